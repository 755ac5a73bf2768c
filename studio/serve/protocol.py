"""The API's request models and its error shape: every text field has a length cap and refuses control
characters and lone surrogates, numbers have ranges, and every refusal is OpenAI's
``{"error": {"message", "type", "param", "code"}}`` naming the field."""

from __future__ import annotations

import unicodedata
from typing import Annotated

from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

MAX_INPUT_CHARS = 4096  # OpenAI's own limit for /v1/audio/speech
MAX_INSTRUCTIONS_CHARS = 1000
MAX_TRANSCRIPT_CHARS = 1000  # 30 s of speech is a few hundred characters in any language
MAX_ID_CHARS = 100  # voice ids, model names, voice names
MAX_SEED = 2**64 - 1

_CODES = {
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


def check_speakable(value: str) -> str:
    """``value`` unchanged when it has a letter or a digit to speak, else a ValueError."""
    if value.strip() and not any(unicodedata.category(char)[0] in "LN" for char in value):
        raise ValueError("has no letter or digit: there is nothing to say")
    return value


def _line(value: str) -> str:
    return check_text(value, lines=False)


Text = Annotated[str, AfterValidator(check_text)]
Line = Annotated[str, AfterValidator(_line)]


class SpeechBody(BaseModel):
    """``POST /v1/audio/speech``: OpenAI's fields, plus the studio's ``reference_audio``/``reference_text``
    (a voice sent with the request), ``seed``, ``stream`` and ``first_hop_tokens``."""

    model_config = ConfigDict(extra="ignore")

    model: Annotated[Line, Field(max_length=MAX_ID_CHARS)] = "cosyvoice2"
    input: Annotated[Text, Field(max_length=MAX_INPUT_CHARS), AfterValidator(check_speakable)]
    voice: Annotated[Line, Field(max_length=MAX_ID_CHARS)] = ""  # a voice of the library
    reference_audio: Annotated[str, Field(max_length=8 << 20)] = ""  # base64 audio file used as the voice
    reference_text: Annotated[Text, Field(max_length=MAX_TRANSCRIPT_CHARS)] = ""  # its transcript
    response_format: Annotated[Line, Field(max_length=16)] = "wav"
    speed: float = Field(1.0, gt=0)
    instructions: Annotated[Text, Field(max_length=MAX_INSTRUCTIONS_CHARS)] = ""
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    stream: bool = False
    first_hop_tokens: int = Field(0, ge=0, le=10_000)  # the first streamed chunk after N speech tokens


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
