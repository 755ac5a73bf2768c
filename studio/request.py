"""One vocabulary for a take, shared by the GUI, the engine protocol and the runtime (no Qt, no torch).

`Mode` names the three ways to voice a text (one enum, one spelling each; upstream's method names are
accepted on input); `SAMPLE_RATE` is CosyVoice2's output rate (each audio chunk also carries its own);
`validate_take` holds every rule a take must meet and raises `RequestError` naming the offending field,
so callers choose what to tell the user without matching message text.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

#: CosyVoice2's output rate in Hz. Audio crosses the engine protocol with its rate attached
#: (`AudioChunk.sample_rate`); this constant is the runtime's default and the synth command's.
SAMPLE_RATE = 24000
# "Start playing sooner": the first streamed chunk after this many speech tokens instead of upstream's 25
# (plus the prompt's alignment); its frames are computed without the rest of their chunk.
FAST_FIRST_HOP_TOKENS = 10

MIN_SPEED, MAX_SPEED = 0.25, 4.0
#: The longest voice prompt CosyVoice2 takes, in seconds: `synth`, `clean`, the studio and the server agree on it.
MAX_PROMPT_SECONDS = 30.0
#: The reference length that clones best, in seconds (upstream recommends a few seconds up to about ten; the
#: quality check grades less than the lower bound of speech "short"), and the one sentence every hint uses.
BEST_PROMPT_SECONDS = (5.0, 10.0)
PROMPT_LENGTH_ADVICE = (
    f"{BEST_PROMPT_SECONDS[0]:g}-{BEST_PROMPT_SECONDS[1]:g} s works best ({MAX_PROMPT_SECONDS:g} s at most)"
)


class Mode(StrEnum):
    """How a take is voiced. The value is the studio's spelling (GUI, protocol, CLI, take sidecars)."""

    ZERO_SHOT = "zero-shot"
    CROSS_LINGUAL = "cross-lingual"
    INSTRUCT = "instruct"

    @property
    def label(self) -> str:
        """What the GUI shows for the mode."""
        return _LABELS[self]

    @property
    def upstream_name(self) -> str:
        """The mode as upstream's ``inference_*`` methods name it ("zero_shot", "cross_lingual", "instruct2")."""
        return _UPSTREAM[self]

    @classmethod
    def parse(cls, value: Any) -> Mode:
        """A `Mode` from any spelling in use ("zero-shot", "zero_shot", "instruct2", ...)."""
        if isinstance(value, Mode):
            return value
        text = str(value).strip().lower()
        for mode in cls:
            if text in (mode.value, mode.upstream_name, mode.value.replace("-", "_")):
                return mode
        raise RequestError(
            "mode", f"unknown mode {value!r}; expected one of {', '.join(m.value for m in cls)}"
        )


_LABELS = {
    Mode.ZERO_SHOT: "Zero-shot (clone the voice)",
    Mode.CROSS_LINGUAL: "Cross-lingual",
    Mode.INSTRUCT: "Instruct (describe the delivery)",
}
_UPSTREAM = {Mode.ZERO_SHOT: "zero_shot", Mode.CROSS_LINGUAL: "cross_lingual", Mode.INSTRUCT: "instruct2"}


class RequestError(ValueError):
    """A take cannot be served as asked; ``field`` names the request field at fault ("text", "mode", ...)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def validate_take(
    *,
    text: Any,
    mode: Any,
    has_prompt_audio: bool,
    voice: str = "",
    prompt_text: str = "",
    instruct: str = "",
    speed: float = 1.0,
    exact_speech_tokens: int | None = None,
    prompt_path: Any = None,
) -> Mode:
    """Check a take against every rule (in the order a user would fix them); return its `Mode`.

    ``voice`` is a saved voice's id (it brings its own prompt and transcript); ``prompt_path`` a prompt
    given as a file path, which must exist. Raises `RequestError` with the offending field.
    """
    if not isinstance(text, str) or not text.strip():
        raise RequestError("text", "text is empty: there is nothing to say")
    mode = Mode.parse(mode)
    if not has_prompt_audio and not voice:
        raise RequestError(
            "prompt_wav", "a voice is needed: a prompt recording (prompt audio) or a saved voice"
        )
    if prompt_path is not None and not Path(prompt_path).is_file():
        raise RequestError("prompt_wav", f"prompt recording not found: {prompt_path}")
    if mode is Mode.ZERO_SHOT and not voice and not str(prompt_text or "").strip():
        raise RequestError("prompt_text", "zero-shot mode needs the transcript of the prompt (prompt_text)")
    if mode is Mode.INSTRUCT and not str(instruct or "").strip():
        raise RequestError("instruct", "instruct mode needs an instruction")
    if not MIN_SPEED <= float(speed) <= MAX_SPEED:
        raise RequestError("speed", f"speed {speed} is out of range ({MIN_SPEED} .. {MAX_SPEED})")
    if exact_speech_tokens is not None and int(exact_speech_tokens) < 1:
        raise RequestError("exact_speech_tokens", "exact_speech_tokens must be a positive number of tokens")
    return mode
