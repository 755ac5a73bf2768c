"""Speech-token decoding on vLLM: one stepping thread owns the engine and serves every request.

`VllmTokenBackend.generate` follows the token-backend protocol of docs/RUNTIME.md. Each request
gets its own queue; the stepping thread adds and aborts requests, steps the engine while any is
unfinished and routes new tokens (vLLM's DELTA outputs) to their queues. Cancelling (the event, or
closing the generator) aborts the request in vLLM; an engine error reaches every waiting caller.
Sampling: `top_k == 1` is greedy; otherwise upstream's RAS runs in a logits processor
(tts/llm/vllm/sampling.py) that draws the token from the RAS distribution with the request's seed.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studio import envs
from studio.recent import RecentlyUsed
from studio.tts.device import flow_turn
from studio.tts.errors import BackendUnavailableError
from studio.tts.llm.backend import check_prompt_embeds
from studio.tts.llm.vllm.processes import engine_processes, reap_processes
from studio.tts.llm.vllm.warm import warm_first_request
from studio.vllm_options import VLLM_DEFAULTS, with_defaults

if TYPE_CHECKING:
    import torch

    from studio.tts.device.flow_turn import FlowTurn
    from studio.tts.llm.sampling import RasSampling

log = logging.getLogger(__name__)

# The studio's knobs (settings, dialog, CLI: studio/vllm_options.py) and the values used when the caller
# leaves one out.
DEFAULT_VLLM_OPTIONS: dict[str, Any] = dict(VLLM_DEFAULTS)
CANCEL_POLL_S = 0.05
# How long vLLM's engine-core process gets to tear down (its executor waits for its workers, then it
# unlinks its shared-memory queues) before it is killed. vLLM's own default (5 s) is shorter than that
# teardown on a busy CPU, so the core was SIGKILLed half way and its shared memory leaked.
ENGINE_STOP_TIMEOUT_S = 20.0
# How long `close()` waits for the stepping thread before shutting the engine down anyway.
STEPPER_JOIN_TIMEOUT_S = 5.0


HOST_EMBEDS_KEPT = 64  # prompt embeddings kept on the host (a few hundred KB each)


class VllmBackendError(RuntimeError):
    """The vLLM engine failed while serving a request (the original error is chained)."""


class _Request:
    __slots__ = ("request_id", "prompt", "params", "outputs")

    def __init__(self, request_id: str, prompt: dict, params: Any):
        self.request_id, self.prompt, self.params = request_id, prompt, params
        self.outputs: queue.SimpleQueue = queue.SimpleQueue()


class VllmTokenBackend:
    """Token backend over a vLLM `LLMEngine`; thread-safe `generate`, `close()` shuts the engine down."""

    prompt_embeds_on_host = True  # vLLM's engine takes them from the host: the take makes them there at once

    def __init__(
        self,
        engine: Any,
        *,
        stop_token_ids: list[int],
        hidden_size: int,
        embed_dtype: torch.dtype,
        turn: FlowTurn | None = None,
    ):
        self._engine = engine
        # the LM prompt embeddings of recent texts by their ids: a line's takes, or a burst for one text and
        # voice, make them once (16 takes started together on an H200 made them in 19 ms each, 0.6 ms alone)
        self.host_embeds: RecentlyUsed[torch.Tensor] = RecentlyUsed(HOST_EMBEDS_KEPT)
        self.turn = turn  # the flow's GPU turn shared with this engine's processes, closed with it
        if turn is not None:
            turn.lm_requests = lambda: self.num_live_requests
        self.stop_token_ids = list(stop_token_ids)
        self.speech_vocab = min(self.stop_token_ids)
        self.hidden_size = hidden_size
        self.embed_dtype = embed_dtype
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._ids = itertools.count()
        self._failure: BaseException | None = None
        self._closed = False
        self._shutdown_lock = threading.Lock()
        self._processes = engine_processes(engine)  # vLLM's engine-core processes and their workers
        self.num_live_requests = 0  # requests the engine still holds (updated by the stepping thread)
        self._thread = threading.Thread(target=self._run, name="vllm-stepper", daemon=True)
        self._thread.start()

    # ---- caller side -------------------------------------------------------------------------------
    def generate(
        self,
        prompt_embeds: torch.Tensor,
        *,
        min_len: int,
        max_len: int,
        sampling: RasSampling,
        seed: int | None,
        cancel: threading.Event,
        ignore_stop: bool = False,
    ) -> Iterator[int]:
        """Yield speech token ids until a stop id (after `min_len`), `max_len` tokens, or `cancel`."""
        check_prompt_embeds(prompt_embeds, self.hidden_size)
        if max_len <= 0:
            return
        self._check_alive()
        request = _Request(
            f"tts-{next(self._ids)}",
            {"prompt_embeds": prompt_embeds.detach().to("cpu", self.embed_dtype).contiguous()},
            self._sampling_params(min_len, max_len, sampling, seed, ignore_stop),
        )
        self._inbox.put(("add", request))
        produced, finished = 0, False
        try:
            while not cancel.is_set():
                try:
                    kind, payload = request.outputs.get(timeout=CANCEL_POLL_S)
                except queue.Empty:
                    if not self._thread.is_alive():
                        raise VllmBackendError(
                            f"the vLLM stepping loop has stopped: {self._failure}"
                        ) from None
                    continue
                if kind == "error":
                    finished = True
                    raise VllmBackendError(
                        f"vLLM failed on request {request.request_id}: {payload}"
                    ) from payload
                for token in payload:
                    if token >= self.speech_vocab or cancel.is_set():
                        return
                    yield token
                    produced += 1
                    if produced >= max_len:
                        return
                if kind == "done":
                    finished = True
                    return
        finally:
            if not finished and not self._closed:
                self._inbox.put(("abort", request))

    def close(self, timeout: float = ENGINE_STOP_TIMEOUT_S) -> None:
        """Abort what is running, stop the stepping thread and shut the engine (and its processes) down.

        The engine is shut down here, not by the stepping thread, so a thread stuck inside a step cannot
        keep vLLM's processes alive; `timeout` bounds the engine-core teardown, after which any vLLM
        process still running is killed (no orphans)."""
        if self._closed:
            return
        self._closed = True
        self._inbox.put(("stop", None))
        self._thread.join(min(timeout, STEPPER_JOIN_TIMEOUT_S))
        if self._thread.is_alive():
            log.warning("the vLLM stepping thread did not stop; shutting the engine down anyway")
        self._shutdown_engine(timeout)

    def __enter__(self) -> VllmTokenBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_alive(self) -> None:
        if self._closed:
            raise VllmBackendError("the vLLM backend is closed")
        if self._failure is not None:
            raise VllmBackendError(f"the vLLM engine failed earlier: {self._failure}") from self._failure

    def _sampling_params(
        self, min_len: int, max_len: int, sampling: RasSampling, seed: int | None, ignore_stop: bool
    ) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        from studio.tts.llm.vllm.sampling import ras_extra_args

        min_len = max_len if ignore_stop else min(min_len, max_len)
        common = dict(
            temperature=0.0,  # greedy, or RAS drawn in our logits processor (one-hot rows)
            max_tokens=max_len,
            stop_token_ids=self.stop_token_ids,
            output_kind=RequestOutputKind.DELTA,
            detokenize=False,
        )
        if sampling.top_k == 1:  # greedy, as the PyTorch path: argmax over non-stop ids before min_len
            return SamplingParams(min_tokens=min_len, **common)
        # RAS in the logits processor; it also masks stop ids before min_len (upstream's redraw).
        extra = ras_extra_args(
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            win_size=sampling.win_size,
            tau_r=sampling.tau_r,
            min_len=min_len,
            stop_token_ids=self.stop_token_ids,
            seed=secrets.randbits(63) if seed is None else seed,
        )
        return SamplingParams(extra_args=extra, **common)

    # ---- stepping thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        live: dict[str, _Request] = {}
        try:
            while True:
                block = not live
                while True:
                    try:
                        kind, request = self._inbox.get(block=block)
                    except queue.Empty:
                        break
                    block = False
                    if kind == "stop":  # close() shuts the engine down
                        self._fail_all(live, VllmBackendError("the vLLM backend was closed"))
                        return
                    if kind == "add":
                        try:
                            self._engine.add_request(request.request_id, request.prompt, request.params)
                            live[request.request_id] = request
                        except Exception as exc:  # bad prompt or params: only this caller fails
                            request.outputs.put(("error", exc))
                    elif kind == "abort" and live.pop(request.request_id, None) is not None:
                        self._engine.abort_request([request.request_id])
                if live:
                    self._step(live)
                self.num_live_requests = len(live)
        except BaseException as exc:
            self._failure = exc
            log.exception("vLLM stepping loop failed")
            self._fail_all(live, exc)
            self._shutdown_engine()

    def _step(self, live: dict[str, _Request]) -> None:
        for output in self._engine.step():
            request = live.get(output.request_id)
            if request is None:
                continue
            tokens = list(output.outputs[0].token_ids) if output.outputs else []
            if output.finished:
                live.pop(output.request_id)
                request.outputs.put(("done", tokens))
            elif tokens:
                request.outputs.put(("tokens", tokens))

    def _fail_all(self, live: dict[str, _Request], exc: BaseException) -> None:
        for request in live.values():
            request.outputs.put(("error", exc))
        live.clear()
        self.num_live_requests = 0
        while True:  # requests still waiting in the inbox must not wait forever
            try:
                kind, request = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "add":
                request.outputs.put(("error", exc))

    def _shutdown_engine(self, timeout: float = ENGINE_STOP_TIMEOUT_S) -> None:
        """Shut vLLM down once: the engine core gets `timeout` s to exit by itself (so it unlinks its
        shared memory), then whatever is left of its process tree is killed."""
        with self._shutdown_lock:
            engine, self._engine = self._engine, None
            if engine is None:
                return
            core = getattr(engine, "engine_core", None)
            start = time.monotonic()
            try:
                if core is not None:
                    try:
                        core.shutdown(timeout=timeout)
                    except TypeError:  # vLLM releases whose shutdown() takes no timeout
                        core.shutdown()
            except Exception:  # shutting down; nothing the caller can do
                log.warning("vLLM engine shutdown raised", exc_info=True)
            finally:
                reap_processes(self._processes, max(1.0, timeout - (time.monotonic() - start)))
            log.info("vLLM engine shut down in %.1f s", time.monotonic() - start)
            if self.turn is not None:
                self.turn.close()


def engine_args(model_path: str | Path, **vllm_options: Any) -> Any:
    """vLLM EngineArgs for an exported folder: prompt embeddings in, no tokenizer, RAS processor."""
    from vllm import EngineArgs

    from studio.tts.llm.vllm.sampling import PROCESSOR_PATH

    options = with_defaults(vllm_options)
    if not envs.VLLM_COMPILE.enabled() and not options.get("enforce_eager"):
        # No torch.compile (its cold start took 20-24 s on the H200); decode steps still replay graphs.
        options.setdefault("compilation_config", {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"})
    return EngineArgs(
        model=str(model_path),
        skip_tokenizer_init=True,
        enable_prompt_embeds=True,
        logits_processors=[PROCESSOR_PATH],
        disable_log_stats=True,
        seed=0,
        **options,
    )


def engine_forks(device: torch.device) -> bool:
    """Whether vLLM will fork its engine-core process from this one on ``device``: its way on CUDA while
    this process has not initialised CUDA; not on a CPU (vLLM spawns there), not when its engine runs in
    this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) or it is told to spawn."""
    return (
        device.type == "cuda"
        and hasattr(os, "register_at_fork")
        and os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0"
        and os.environ.get("VLLM_WORKER_MULTIPROC_METHOD", "fork") == "fork"
    )


def start_engine(model_path: str | Path, **vllm_options: Any) -> Any:
    """Start a vLLM `LLMEngine` on an exported folder (the plugin registers our architecture)."""
    # A desktop studio sends nothing home; vLLM's usage report would also fork a probe of the GPU.
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    try:
        from vllm import LLMEngine
    except ImportError as exc:
        raise BackendUnavailableError(f"vLLM is not installed or fails to import: {exc}") from exc
    from studio.tts.llm.vllm.plugin import register

    register(in_process=True)  # the entry point registers by name in vLLM's processes; here the class
    return LLMEngine.from_engine_args(engine_args(model_path, **vllm_options))


def resolve_dtype(requested: str | None, source: str, supported: list[str] | None = None) -> str:
    """The dtype vLLM will run, named explicitly: `requested` unless it is "auto" (or None).

    "auto" follows vLLM's own rule, resolved here so the export can be written in that dtype (one
    cast, at export) instead of vLLM casting the exported weights again while loading: float32
    weights run in the platform's preferred dtype, float16/bfloat16 weights in their own dtype when
    the platform supports it, else in the preferred one. `supported` (preferred first) defaults to
    vLLM's `current_platform.supported_dtypes`.
    """
    if requested and requested != "auto":
        return str(requested).removeprefix("torch.")
    if supported is None:
        from vllm.platforms import current_platform

        supported = [str(d).removeprefix("torch.") for d in current_platform.supported_dtypes]
    preferred = supported[0]
    if source == "float32" or source not in supported:
        if source not in ("float32", preferred):
            log.warning("this platform does not run %s; the vLLM export is cast to %s", source, preferred)
        return preferred
    return source


def create_vllm_backend(llm: Any, model_dir: str | Path, **vllm_options: Any) -> VllmTokenBackend:
    """Export `model_dir/llm.pt` (cached), start vLLM on it and return the token backend for `llm`.

    `llm` is the `Qwen2LM` or `CosyVoice3LM` (meta is fine); its backbone config, head, hidden size and
    stop ids describe the export: CosyVoice2's biased head runs in our registered class, CosyVoice3's
    bias-less one in vLLM's stock `Qwen2ForCausalLM` (`export.architecture_for`). The run dtype is resolved first (`resolve_dtype`), the export is written in it and vLLM is given
    it explicitly, so the weights vLLM loads are already in the dtype it runs. The export is written
    without PyTorch's CPU thread pool, so vLLM may fork its engine process right after it
    (`device.fork_safe`).
    """
    import torch

    from studio.tts.llm.vllm import export

    llm_pt = Path(model_dir) / "llm.pt"
    requested = vllm_options.get("dtype") or DEFAULT_VLLM_OPTIONS["dtype"]
    dtype = resolve_dtype(requested, export.weights_dtype(llm_pt))
    log.info("vLLM dtype: %s (asked: %s)", dtype, requested)
    config = llm.llm.model.config.to_dict()
    architecture = export.architecture_for(llm)
    export_dir = export.cached_export(llm_pt, config, dtype=dtype, architecture=architecture)
    if export_dir is None:
        written = time.perf_counter()
        export_dir = export.export_for_vllm(llm_pt, config, dtype=dtype, architecture=architecture)
        log.info("first start on this export: written in %.1f s", time.perf_counter() - written)
    started = time.perf_counter()
    turn = flow_turn.share()  # vLLM's steps wait while the flow makes a first chunk
    try:
        engine = start_engine(export_dir, **{**vllm_options, "dtype": dtype})
    except BaseException:
        if turn is not None:
            turn.close()
        raise
    if turn is not None:
        turn.started()
    log.info("vLLM engine ready in %.1f s", time.perf_counter() - started)
    run_dtype = engine.model_config.dtype if hasattr(engine, "model_config") else getattr(torch, dtype)
    backend = VllmTokenBackend(
        engine,
        stop_token_ids=list(llm.stop_token_ids),
        hidden_size=int(llm.llm_input_size),
        embed_dtype=run_dtype,
        turn=turn,
    )
    warm_first_request(backend)
    return backend
