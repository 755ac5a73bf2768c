"""What one synthesis request asks for (`SynthesisSpec`), shared by the public API, the engine and benchmarks."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studio.request import Mode, RequestError, validate_take
from studio.tts.errors import SynthesisError

if TYPE_CHECKING:
    import torch

    from studio.tts.llm.backend import TokenBackend


@dataclass
class PromptConditioning:
    """The conditioning one request uses: LM prompt text/tokens and the flow's prompt."""

    prompt_text_ids: list[int]
    llm_speech_tokens: list[int]
    flow_token: torch.Tensor  # [1, P] int32
    flow_feat: torch.Tensor  # [1, 2P, 80]
    embedding: torch.Tensor  # [1, 192]


@dataclass
class SynthesisSpec:
    """One request: the text, how to voice it, and the knobs (stream, speed, seed, exact token count).

    ``prompt_wav`` is a path or a mono float array (``prompt_sr`` gives its rate; arrays default to
    16 kHz as upstream's ``prompt_speech_16k``); ``spk_id`` names a voice saved by ``add_zero_shot_spk``
    and replaces the prompt audio (never the instruction). ``exact_speech_tokens`` makes the LM ignore
    stop ids and produce exactly that many tokens per sentence (benchmarks); with ``admit_by_text`` the VRAM
    gate admits such a take as it admits a take that stops (at the length its text is expected to take, growing
    towards its text's bound), so a benchmark measures growing admission. ``cancel`` stops the work
    when set, like closing the generator. ``token_backend`` decodes this request's speech tokens in
    place of the model's LM (the warm-up beside vLLM's start replays tokens: `ReplayTokens`).
    """

    text: str
    mode: Mode | str = Mode.ZERO_SHOT  # any spelling `Mode.parse` reads ("zero_shot", "instruct2", ...)
    prompt_wav: Any = None
    prompt_sr: int | None = None
    prompt_text: str = ""
    instruct_text: str = ""
    spk_id: str = ""
    stream: bool = False
    speed: float = 1.0
    seed: int | None = None
    text_frontend: bool = True
    exact_speech_tokens: int | None = None
    # an exact-length take admitted by its text's bounds, as a stopping model's take would be
    admit_by_text: bool = False
    first_hop_tokens: int | None = None  # streaming: a shorter first chunk (None: STUDIO_FIRST_HOP_TOKENS)
    cancel: threading.Event | None = field(default=None, compare=False)
    token_backend: TokenBackend | None = field(default=None, compare=False)  # None: the model's LM

    def validate(self) -> None:
        """Raise `SynthesisError` (naming the field) when the request cannot be served; normalise `mode`."""
        try:
            self.mode = validate_take(
                text=self.text,
                mode=self.mode,
                has_prompt_audio=self.prompt_wav is not None,
                voice=self.spk_id,
                prompt_text=self.prompt_text,
                instruct=self.instruct_text,
                speed=self.speed,
                exact_speech_tokens=self.exact_speech_tokens,
                prompt_path=self.prompt_wav if isinstance(self.prompt_wav, (str, Path)) else None,
            )
        except RequestError as exc:
            raise SynthesisError(str(exc), field=exc.field) from None


class LinkedEvent(threading.Event):
    """A cancel flag that also reads as set when the caller's own event is set."""

    def __init__(self, parent: threading.Event | None = None):
        super().__init__()
        self._parent = parent

    def is_set(self) -> bool:
        return super().is_set() or (self._parent is not None and self._parent.is_set())


class SpeechTokenProducer:
    """Runs a token backend's ``generate`` on its own thread and hands tokens to the caller's thread.

    Errors in the thread are re-raised in the caller at its next wait; `close()` cancels the
    backend and joins the thread, so abandoning a request leaves nothing running. ``keep(token)``, when
    given, decides per sampled token whether the take keeps it (`tokens` holds only kept ones).
    """

    def __init__(
        self,
        generate,
        cancel: LinkedEvent,
        name: str = "cosyvoice2-llm",
        intra_op_threads: int | None = None,
        keep: Callable[[int], bool] | None = None,
    ):
        self._generate = generate  # a no-argument callable returning an iterator of token ids
        # which sampled tokens the take keeps, asked once per token in order (CosyVoice3 drops long silences)
        self._keep = keep
        # torch's intra-op thread count is per thread: one for the LM on CPU keeps its OpenMP team from
        # fighting the flow's team for the same cores (per-token LM work is too small to split anyway)
        self._intra_op_threads = intra_op_threads
        self.cancel = cancel
        self.tokens: list[int] = []
        self.done = False
        self.error: BaseException | None = None
        self.llm_seconds = 0.0
        self._condition = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> SpeechTokenProducer:
        self._thread.start()
        return self

    def _run(self) -> None:
        import time

        try:
            if self._intra_op_threads:
                import torch

                torch.set_num_threads(self._intra_op_threads)
            started = time.perf_counter()
            for token in self._generate():
                now = time.perf_counter()
                kept = self._keep is None or self._keep(int(token))
                with self._condition:
                    if kept:
                        self.tokens.append(int(token))
                    self.llm_seconds += now - started
                    self._condition.notify_all()
                started = time.perf_counter()
                if self.cancel.is_set():
                    break
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            with self._condition:
                self.error = exc
        finally:
            with self._condition:
                self.done = True
                self._condition.notify_all()

    def wait_for(self, count: int | None) -> int:
        """Block until ``count`` tokens exist (None: until the LM ends); return how many there are.

        Re-raises an error from the LM thread; returns early when the request is cancelled.
        """
        with self._condition:
            while True:
                if self.error is not None:
                    raise self.error
                if self.done or self.cancel.is_set():
                    return len(self.tokens)
                if count is not None and len(self.tokens) >= count:
                    return len(self.tokens)
                # the timeout only bounds how late an external cancel is noticed
                self._condition.wait(timeout=0.05)

    def take_llm_seconds(self) -> float:
        """LM seconds accumulated since the last call (for per-chunk timings)."""
        with self._condition:
            seconds, self.llm_seconds = self.llm_seconds, 0.0
        return seconds

    def snapshot(self) -> list[int]:
        with self._condition:
            return list(self.tokens)

    def close(self) -> None:
        """Cancel the backend and wait for the thread to end."""
        self.cancel.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
