"""The engine protocol: frozen, picklable dataclasses sent between the studio and the engine process.

Requests (studio -> engine): ``LoadModel``, ``Synthesize``, ``PrepareVoice``, ``Transcribe``, ``Cancel``,
``Shutdown``.
Events (engine -> studio): ``Hello`` (always first; carries ``PROTOCOL_VERSION``), ``State``,
``Progress``, ``TakeQueued``, ``AudioChunk``, ``TakeFinished``, ``Transcript``, ``Error``.

A session looks like::

    -> (process starts)           <- Hello(protocol_version, pid, ...)
    -> LoadModel(model_dir, ...)  <- State(LOADING) ... State(WARMING) ... State(READY, load_s, warmup_s)
    -> Synthesize(request_id=..)  <- State(BUSY) (TakeQueued) AudioChunk* (Progress*) TakeFinished | Error
                                  <- State(READY)
    -> PrepareVoice(prompt_wav..) (no answer: the voice's prompt state is made in the background)
    -> Cancel(request_id)         <- TakeFinished(stats.cancelled=True) for that request
    -> Transcribe(request_id=..)  <- Progress* (a first download) Transcript | Error   (no model needed)
    -> Shutdown()                 <- State(STOPPED), then the process exits

A load that fails answers ``Error(None, ...)`` and ``State(ERROR)`` (the process stays up); loading what is
already loaded answers ``State(READY)`` at once. The backend actually used is in ``State.backend``, and
``State.backend_reason`` says why when vLLM was asked for but PyTorch runs.
Every take ends with exactly one ``TakeFinished`` or one ``Error`` carrying its ``request_id``. A take held back
for GPU memory (the model's take gate) sends a ``TakeQueued`` each time it starts to wait (before its first
``AudioChunk``, or between chunks while its state may not grow yet).
Audio is float32 mono; each ``AudioChunk`` carries its rate (``SAMPLE_RATE``, 24 kHz, for CosyVoice2). All numbers in seconds unless named otherwise.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from studio.request import SAMPLE_RATE, Mode, RequestError, validate_take

PROTOCOL_VERSION = 4


class EngineState(StrEnum):
    """Connection and engine states, as the GUI shows them."""

    STARTING = "starting"
    LOADING = "loading"
    WARMING = "warming"
    READY = "ready"
    BUSY = "busy"
    ERROR = "error"  # the last load failed; the process is alive and accepts a new LoadModel
    CRASHED = "crashed"  # the process died (set by the client, never sent by the engine)
    STOPPED = "stopped"  # clean shutdown


def new_request_id() -> str:
    return uuid.uuid4().hex[:12]


# ----------------------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class LoadModel:
    """Load (or reload) a model folder, then warm it up. ``backend`` is "pytorch" or "vllm"."""

    model_dir: str
    backend: str = "pytorch"
    fp16: bool = False
    vllm_options: dict[str, Any] = field(default_factory=dict)
    warmup: bool = True
    vram_budget_gb: float = 0.0  # GiB on CUDA; 0: 80% of the free memory; negative: no budget

    def __post_init__(self) -> None:
        if self.backend not in ("pytorch", "vllm"):
            raise ValueError(f"backend must be 'pytorch' or 'vllm', not {self.backend!r}")


@dataclass(frozen=True)
class Synthesize:
    """One take. The prompt is either audio (``prompt_wav`` float32 mono + ``prompt_sr``) or ``voice_id``.

    Invalid requests raise `RequestError` (a ValueError naming the field) when built, before they reach
    the engine; the rules are `studio.request.validate_take`, the same the runtime applies.
    """

    text: str
    mode: Mode = Mode.ZERO_SHOT
    prompt_wav: np.ndarray | None = None
    prompt_sr: int = 0
    voice_id: str = ""
    prompt_text: str = ""
    instruct: str = ""
    speed: float = 1.0
    seed: int | None = None
    stream: bool = True
    request_id: str = field(default_factory=new_request_id)
    exact_speech_tokens: int | None = None  # benchmarks: ignore stop ids, decode exactly N tokens
    # benchmarks: an exact-length take admitted as its text's take would be (see SynthesisSpec)
    admit_by_text: bool = False
    first_hop_tokens: int = 0  # streaming: the first chunk after N tokens (0: upstream's schedule)

    def __post_init__(self) -> None:
        if self.prompt_wav is not None:
            _keep_mono_prompt(self)
        if self.first_hop_tokens < 0:
            raise RequestError("first_hop_tokens", "first_hop_tokens must be 0 (upstream's schedule) or more")
        mode = validate_take(
            text=self.text,
            mode=self.mode,
            has_prompt_audio=self.prompt_wav is not None,
            voice=self.voice_id,
            prompt_text=self.prompt_text,
            instruct=self.instruct,
            speed=self.speed,
            exact_speech_tokens=self.exact_speech_tokens,
        )
        object.__setattr__(self, "mode", mode)


@dataclass(frozen=True)
class Transcribe:
    """Transcribe a reference recording (float32 mono at ``sample_rate``, at most 30 s) with ``asr_model``
    (a Whisper folder or hub id, fetched once); ``language`` (a code) skips detection."""

    audio: np.ndarray
    sample_rate: int
    asr_model: str
    language: str = ""
    request_id: str = field(default_factory=new_request_id)

    def __post_init__(self) -> None:
        audio = np.asarray(self.audio)
        if audio.ndim != 1 or audio.size == 0:
            raise RequestError("audio", "the recording to transcribe must be a non-empty 1-D (mono) array")
        if self.sample_rate <= 0:
            raise RequestError("sample_rate", "the recording's sample rate must be positive")
        if not self.asr_model.strip():
            raise RequestError("asr_model", "no ASR model is configured (Settings -> Transcripts)")
        object.__setattr__(self, "audio", np.ascontiguousarray(audio, dtype=np.float32))


@dataclass(frozen=True)
class PrepareVoice:
    """Make a voice's prompt state now, ahead of its first take (the studio sends it when the user picks,
    records or cleans a voice), so that take starts as fast as the voice's later ones. The voice is audio
    (``prompt_wav`` float32 mono + ``prompt_sr``) or a library ``voice_id``. No event answers it: a voice that
    cannot be prepared is logged, and its take reports the problem as it would have."""

    prompt_wav: np.ndarray | None = None
    prompt_sr: int = 0
    voice_id: str = ""

    def __post_init__(self) -> None:
        if self.prompt_wav is not None:
            _keep_mono_prompt(self)
        elif not self.voice_id:
            raise RequestError("prompt_wav", "a voice to prepare needs prompt_wav or voice_id")


def _keep_mono_prompt(request) -> None:
    """A request's prompt audio checked (mono, not empty, with its rate) and kept as contiguous float32."""
    if request.prompt_sr <= 0:
        raise RequestError("prompt_sr", "prompt_sr must be given with prompt_wav")
    wav = np.asarray(request.prompt_wav)
    if wav.ndim != 1 or wav.size == 0:
        raise RequestError("prompt_wav", "prompt_wav must be a non-empty 1-D (mono) array")
    object.__setattr__(request, "prompt_wav", np.ascontiguousarray(wav, dtype=np.float32))


@dataclass(frozen=True)
class Cancel:
    """Stop a take; the engine answers with its TakeFinished (cancelled=True)."""

    request_id: str


@dataclass(frozen=True)
class Shutdown:
    """Finish: cancel running takes, shut the backend down, exit."""


# ------------------------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Hello:
    """The engine's first message: protocol version and what it runs on."""

    protocol_version: int
    pid: int
    studio_version: str
    python: str
    log_path: str = ""


@dataclass(frozen=True)
class State:
    """Engine state change; ``detail`` is a human sentence (e.g. the backend and why)."""

    state: EngineState
    detail: str = ""
    backend: str = ""  # the backend actually in use ("pytorch" | "vllm"), once loaded
    backend_reason: str = ""  # why it differs from what was asked, else empty
    model: str = ""  # the model loaded ("CosyVoice2-0.5B", "Fun-CosyVoice3-0.5B"), once loaded
    load_seconds: float | None = None
    warmup_seconds: float | None = None
    active_requests: int = 0


@dataclass(frozen=True)
class Progress:
    """Progress of a take (``fraction`` in [0, 1] or None when unknown) or of loading."""

    request_id: str | None
    message: str
    fraction: float | None = None


@dataclass(frozen=True)
class TakeQueued:
    """A take waits for GPU memory that running takes hold; it goes on by itself once they give it back.
    Sent each time the take starts to wait: before its first ``AudioChunk`` (to start), or between chunks
    (to grow its state as it runs longer: its audio pauses until the next chunk)."""

    request_id: str
    reason: str = "other takes are using it"


@dataclass(frozen=True)
class AudioChunk:
    """A piece of a take: float32 mono samples at ``sample_rate``, in order (``index`` counts from 0)."""

    request_id: str
    index: int
    samples: np.ndarray
    sample_rate: int = SAMPLE_RATE


@dataclass(frozen=True)
class TakeStats:
    """Timing of one take; ``rtf`` = synthesis seconds / audio seconds (lower is faster)."""

    first_chunk_latency: float
    total_seconds: float
    audio_seconds: float
    rtf: float
    speech_tokens: int
    chunks: int
    backend: str = ""
    cancelled: bool = False
    stage_seconds: dict[str, float] = field(default_factory=dict)  # llm / flow / hift
    first_chunk_stages: dict[str, float] = field(default_factory=dict)  # the same, for the first chunk
    # Playing each chunk as it arrives, from the first one on: how long playback would have waited for
    # the next chunk (0: the stream stayed ahead of the listener all the way).
    stall_seconds: float = 0.0


@dataclass(frozen=True)
class TakeFinished:
    """A take is complete (or was cancelled): its stats."""

    request_id: str
    stats: TakeStats


@dataclass(frozen=True)
class Transcript:
    """What the ASR heard in a ``Transcribe`` request's recording, and in which language."""

    request_id: str
    text: str
    language: str  # a code, e.g. "en"
    language_name: str  # e.g. "english"
    seconds: float
    model: str


@dataclass(frozen=True)
class Error:
    """A failure: of one take (``request_id``) or of the engine (None). ``traceback`` is text."""

    request_id: str | None
    message: str
    traceback: str = ""


Request = LoadModel | Synthesize | PrepareVoice | Transcribe | Cancel | Shutdown
Event = Hello | State | Progress | TakeQueued | AudioChunk | TakeFinished | Transcript | Error
