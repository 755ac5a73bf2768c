"""The API's request models, its refusals (`ServiceError`) and its error shape: every text field has a length cap and refuses control
characters and lone surrogates, numbers have ranges, and every refusal is OpenAI's
``{"error": {"message", "type", "param", "code"}}`` naming the field."""

from __future__ import annotations

import unicodedata
from typing import Annotated, Literal

from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

MAX_INPUT_CHARS = 4096  # OpenAI's own limit for /v1/audio/speech
MAX_INSTRUCTIONS_CHARS = 1000
MAX_TRANSCRIPT_CHARS = 1000  # 30 s of speech is a few hundred characters in any language
MAX_ID_CHARS = 100  # voice ids, model names, voice names
MAX_SEED = 2**64 - 1

_CODES = {
    400: "invalid_value",
    401: "invalid_api_key",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "request_too_large",
    422: "invalid_value",
    503: "not_ready",
}


def check_text(value: str, *, lines: bool = True) -> str:
    """``value`` unchanged, or a ValueError when it holds a lone surrogate or a control character (tabs and
    line breaks are allowed where ``lines``)."""
    allowed = "\t\n\r" if lines else ""
    for char in value:
        category = unicodedata.category(char)
        if category == "Cs":
            raise ValueError("holds a lone surrogate (not valid Unicode text)")
        if category == "Cc" and char not in allowed:
            raise ValueError(f"holds the control character U+{ord(char):04X}")
    return value


def speakable(value: str) -> bool:
    """Whether ``value`` has a letter or a digit to speak."""
    return any(unicodedata.category(char)[0] in "LN" for char in value)


def check_speakable(value: str) -> str:
    """``value`` unchanged when it has a letter or a digit to speak (or is blank), else a ValueError."""
    if value.strip() and not speakable(value):
        raise ValueError("has no letter or digit: there is nothing to say")
    return value


def _line(value: str) -> str:
    return check_text(value, lines=False)


def _voice_id(value):
    """OpenAI's voice object ``{"id": ...}`` as its id; anything else as it came."""
    if isinstance(value, dict):
        if "id" not in value:
            raise ValueError('a voice object needs an "id"')
        return value["id"]
    return value


Text = Annotated[str, AfterValidator(check_text)]
Line = Annotated[str, AfterValidator(_line)]


class ServiceError(Exception):
    """A request the service refuses: ``status`` is the HTTP status, the message says why; ``headers`` go
    with the answer (``Retry-After`` on a busy server), ``code`` replaces the status's usual one."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        *,
        headers: dict | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.status, self.param, self.headers, self.code = status, param, headers, code


class SpeechBody(BaseModel):
    """``POST /v1/audio/speech``: OpenAI's fields (``voice`` a name or ``{"id": ...}``; ``stream_format``),
    plus the studio's ``reference_audio``/``reference_text`` (a voice sent with the request), ``seed``,
    ``stream`` (default: stream the streamable formats, as OpenAI does) and ``first_hop_tokens``; and
    vLLM-Omni's ``ref_audio``/``ref_text`` (the same as the studio's), ``task_type`` and ``language``
    (accepted, unused: the mode follows from the fields sent and CosyVoice reads the language off the text).
    The one request model: the service takes it as it came (`SpeechService.synthesize_request`)."""

    model_config = ConfigDict(extra="ignore")

    model: Annotated[Line, Field(max_length=MAX_ID_CHARS)] = "cosyvoice2"
    input: Annotated[Text, Field(max_length=MAX_INPUT_CHARS), AfterValidator(check_speakable)]
    voice: Annotated[Line, Field(max_length=MAX_ID_CHARS), BeforeValidator(_voice_id)] = (
        ""  # library or alias
    )
    reference_audio: Annotated[str, Field(max_length=8 << 20)] = ""  # base64 audio file used as the voice
    reference_text: Annotated[Text, Field(max_length=MAX_TRANSCRIPT_CHARS)] = ""  # its transcript
    response_format: Annotated[Line, Field(max_length=16)] = "wav"
    speed: float = Field(1.0, gt=0)
    instructions: Annotated[Text, Field(max_length=MAX_INSTRUCTIONS_CHARS)] = ""
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    stream: bool | None = None  # None: stream when the format can (pcm, wav) or stream_format is "sse"
    stream_format: Literal["audio", "sse"] = "audio"
    first_hop_tokens: int = Field(0, ge=0, le=10_000)  # the first streamed chunk after N speech tokens
    ref_audio: Annotated[str, Field(max_length=8 << 20)] = ""  # vLLM-Omni's name for reference_audio
    ref_text: Annotated[Text, Field(max_length=MAX_TRANSCRIPT_CHARS)] = ""
    task_type: Annotated[Line, Field(max_length=MAX_ID_CHARS)] = ""
    language: Annotated[Line, Field(max_length=MAX_ID_CHARS)] = ""

    @model_validator(mode="after")
    def _vllm_omni_names(self):
        self.reference_audio = self.reference_audio or self.ref_audio
        self.reference_text = self.reference_text or self.ref_text
        return self


class VoicePatch(BaseModel):
    """``PATCH /v1/voices/{id}``: the voice's aliases, replacing the ones it had (``[]`` removes them)."""

    aliases: Annotated[list[Annotated[Line, Field(max_length=MAX_ID_CHARS)]], Field(max_length=32)]


def error_json(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    """OpenAI's error body; the message made printable (it may quote what the client sent)."""
    kind = (
        "authentication_error"
        if status == 401
        else "invalid_request_error"
        if status < 500
        else "server_error"
    )
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return {"error": {"message": message, "type": kind, "param": param, "code": code or _CODES.get(status)}}


def error_response(
    status: int, message: str, param: str | None = None, headers: dict | None = None, code: str | None = None
):
    return JSONResponse(error_json(status, message, param, code), status_code=status, headers=headers)
