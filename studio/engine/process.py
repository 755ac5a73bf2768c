"""The engine process: loads CosyVoice2 once, warms it up, and serves takes concurrently (a thread each).

``engine_main(requests, events, log_path)`` is the target of a ``spawn``-started, non-daemon process
(vLLM starts children of its own). It sends ``Hello`` first, then reads requests from ``requests`` and
answers on ``events`` (both ``multiprocessing`` connections; see ``studio.engine.protocol``). Logs go to a
rotating log file and raw output (native crash dumps) to ``engine.out``, the last runs' kept beside it;
the client reads both when the process dies. It bounds malloc's arenas and gives freed memory back when
idle (hygiene.py). Start it through ``EngineClient``.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import logging
import os
import platform
import threading
import time
import traceback
from typing import Any

from studio import __version__, lifetime
from studio.engine.asr_service import AsrService
from studio.engine.hygiene import configure_allocator, keep_from_forks, release_memory, setup_logging
from studio.engine.protocol import (
    PROTOCOL_VERSION,
    AudioChunk,
    Cancel,
    EngineState,
    Error,
    Hello,
    LoadModel,
    PrepareVoice,
    Progress,
    Shutdown,
    State,
    Synthesize,
    TakeFinished,
    TakeQueued,
    Transcribe,
)

log = logging.getLogger("studio.engine")


class Engine:
    """The engine's state: the loaded model and the running takes; events go out through ``send``."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._send_lock = threading.Lock()
        self._takes_lock = threading.RLock()  # held while BUSY/READY is decided and sent
        self._takes: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self.loaded: Any = None  # runner.EngineModel
        self._state = EngineState.STARTING
        self._ready_state: State | None = None
        self._loaded_request: LoadModel | None = None  # what self.loaded was made from
        self._idle_since: float | None = None  # since when no take runs, until memory is given back
        self._trimmed_at = time.monotonic()  # when memory was last given back
        self._prepare_lock = threading.Lock()
        self._prepare_next: PrepareVoice | None = None  # the newest voice waiting to be prepared
        self._preparer: threading.Thread | None = None  # prepares voices one at a time while it has any

    # ---------------------------------------------------------------- sending
    def send(self, event: Any) -> None:
        with self._send_lock:
            try:
                self._connection.send(event)
            except (BrokenPipeError, EOFError, OSError):
                log.warning("client gone; dropping %s", type(event).__name__)

    def set_state(self, state: EngineState, detail: str = "", **extra: Any) -> None:
        self._state = state
        if self.loaded is not None:
            extra.setdefault("backend", self.loaded.backend)
            extra.setdefault("backend_reason", self.loaded.backend_reason)
            family = getattr(self.loaded.model, "family", None)
            if family is not None:
                extra.setdefault("model", family.model)
        with self._takes_lock:
            active = len(self._takes)
        event = State(state, detail, active_requests=active, **extra)
        if state is EngineState.READY and "load_seconds" in extra:
            self._ready_state = event
        log.info("state %s %s", state.value, detail)
        self.send(event)

    def _ready_again(self) -> None:
        """After the last take finishes: READY again, repeating the load facts for late listeners."""
        base = self._ready_state
        self.set_state(
            EngineState.READY,
            base.detail if base else "",
            load_seconds=base.load_seconds if base else None,
            warmup_seconds=base.warmup_seconds if base else None,
        )

    # ---------------------------------------------------------------- requests
    def load(self, request: LoadModel) -> None:
        from studio.runtime import runner
        from studio.runtime.warmup import warmup_request

        if self.loaded is not None and self._loaded_request == dataclasses.replace(request, warmup=True):
            log.info("%s is already loaded this way; not reloading", request.model_dir)
            with self._takes_lock:
                if self._takes:
                    self.set_state(EngineState.BUSY, f"{len(self._takes)} take(s) running")
                else:
                    self._ready_again()
            return
        self.cancel_all(wait=True)
        self._stop_preparing()
        if self.loaded is not None:
            self.loaded.close()
            self.loaded = None
        self._loaded_request = None
        self.set_state(EngineState.LOADING, f"loading {request.model_dir} ({request.backend} asked)")
        try:
            self.loaded = runner.load_model(
                request.model_dir,
                request.backend,
                request.fp16,
                request.vllm_options,
                request.vram_budget_gb,
                warm_beside=request.warmup,
            )
            family = getattr(self.loaded.model, "family", None)
            described = f"{self.loaded.backend} backend on {self.loaded.device}"
            if family is not None:
                described = f"{family.model} on the {described}"
            if self.loaded.backend_reason:
                described += f" (not vllm: {self.loaded.backend_reason})"
            warmup_seconds = None
            if request.warmup:
                self.set_state(EngineState.WARMING, f"warming up the {described}")
                start = time.perf_counter()
                runner.run_take(self.loaded.model, warmup_request(), backend=self.loaded.backend)
                warmup_seconds = time.perf_counter() - start
            self._loaded_request = dataclasses.replace(request, warmup=True)
            detail = f"ready: {described}, loaded in {self.loaded.load_seconds:.1f} s"
            if warmup_seconds is not None:
                detail += f", warmed up in {warmup_seconds:.1f} s"
            self.set_state(
                EngineState.READY,
                detail,
                load_seconds=self.loaded.load_seconds,
                warmup_seconds=warmup_seconds,
            )
            self._idle_since = time.monotonic()  # what loading and warming up freed goes back soon
        except Exception as exc:  # noqa: BLE001 - becomes an Error event; the process stays usable
            log.exception("loading %s failed", request.model_dir)
            self.loaded = None
            self.send(Error(None, f"could not load {request.model_dir}: {exc}", traceback.format_exc()))
            self.set_state(EngineState.ERROR, f"load failed: {exc}")

    def synthesize(self, request: Synthesize) -> None:
        if self.loaded is None:
            self.send(Error(request.request_id, "no model is loaded: load a model folder first"))
            return
        cancel = threading.Event()
        thread = threading.Thread(
            target=self._run_take, args=(request, cancel), name=f"take-{request.request_id}", daemon=True
        )
        with self._takes_lock:
            if request.request_id in self._takes:
                self.send(Error(request.request_id, "a take with this request id is already running"))
                return
            self._takes[request.request_id] = (thread, cancel)
            self.set_state(EngineState.BUSY, f"{len(self._takes)} take(s) running")
        thread.start()

    def _run_take(self, request: Synthesize, cancel: threading.Event) -> None:
        from studio.runtime import runner

        loaded = self.loaded
        index = 0
        sample_rate = runner.output_rate(loaded.model)

        def on_chunk(samples: Any) -> None:
            nonlocal index
            self.send(AudioChunk(request.request_id, index, samples, sample_rate))
            index += 1

        def on_progress(tokens: int, audio_seconds: float) -> None:
            total = request.exact_speech_tokens
            fraction = min(1.0, tokens / total) if total else None
            message = f"{audio_seconds:.1f} s of audio, {tokens} speech tokens"
            self.send(Progress(request.request_id, message, fraction))

        def on_queued() -> None:
            log.info("take %s waits for GPU memory", request.request_id)
            self.send(TakeQueued(request.request_id))

        log.info("take %s: %d characters, mode %s", request.request_id, len(request.text), request.mode)
        outcome: Any = None
        try:
            stats = runner.run_take(
                loaded.model,
                request,
                cancel=cancel,
                on_chunk=on_chunk,
                on_progress=on_progress,
                backend=loaded.backend,
                on_queued=on_queued,
            )
            log.info("take %s done: %s", request.request_id, stats)
            outcome = TakeFinished(request.request_id, stats)
        except Exception as exc:  # noqa: BLE001 - reported as this take's Error
            log.exception("take %s failed", request.request_id)
            outcome = Error(request.request_id, f"synthesis failed: {exc}", traceback.format_exc())
        finally:
            # The take leaves the running list before its outcome is sent: a take the client starts on
            # hearing it must not be counted beside this one ("busy 2 take(s)" with one running).
            with self._takes_lock:
                self._takes.pop(request.request_id, None)
                if outcome is not None:
                    self.send(outcome)
                if not self._takes:
                    self._idle_since = time.monotonic()  # memory is given back if it stays idle
                if not self._takes and self.loaded is not None and self._state is EngineState.BUSY:
                    self._ready_again()

    # ---------------------------------------------------------------- memory
    def trim_wait(self) -> float | None:
        """How long the main loop may wait for a request before calling ``trim_if_due`` (None: for ever)."""
        with self._takes_lock:
            if self._takes:
                return max(0.0, self._trimmed_at + BUSY_TRIM_SECONDS - time.monotonic())
            if self._idle_since is None:
                return None
            return max(0.0, self._idle_since + IDLE_TRIM_SECONDS - time.monotonic())

    def trim_if_due(self) -> None:
        """Give freed memory back once no take has run for ``IDLE_TRIM_SECONDS``, and every
        ``BUSY_TRIM_SECONDS`` while takes run. Not after every take: the next one would fault the pages
        in again (back-to-back takes on the tiny model were 14% slower)."""
        with self._takes_lock:
            now = time.monotonic()
            if self._takes:
                due = now - self._trimmed_at >= BUSY_TRIM_SECONDS
            else:
                due = self._idle_since is not None and now - self._idle_since >= IDLE_TRIM_SECONDS
                self._idle_since = None if due else self._idle_since
            if not due:
                return
            self._trimmed_at = now
        release_memory()

    def prepare_voice(self, request: PrepareVoice) -> None:
        """Make the voice's prompt state in the background, one voice at a time; of the voices sent while one
        is being made, only the newest is made next (a user clicking through voices keeps the last)."""
        if self.loaded is None or not hasattr(self.loaded.model, "prepare_voice"):
            log.info("prepare voice: no model loaded; its first take will make its prompt state")
            return
        with self._prepare_lock:
            self._prepare_next = request
            if self._preparer is None:
                self._preparer = threading.Thread(
                    target=self._prepare_voices, name="prepare-voice", daemon=True
                )
                self._preparer.start()

    def _prepare_voices(self) -> None:
        from studio.voices import saved_prompt

        while True:
            with self._prepare_lock:
                request, self._prepare_next = self._prepare_next, None
                loaded = self.loaded
                if request is None or loaded is None:
                    self._preparer = None
                    return
            name = request.voice_id or "(recording)"
            try:
                wav, rate = request.prompt_wav, request.prompt_sr
                if wav is None:
                    saved = saved_prompt(request.voice_id)
                    if saved is None:
                        log.info("prepare voice: no voice %r in the library", request.voice_id)
                        continue
                    wav, rate, _ = saved
                start = time.perf_counter()
                made = loaded.model.prepare_voice(wav, rate)
                took = time.perf_counter() - start
                state = "prompt state made" if made else "already prepared"
                log.info("voice %s prepared in %.2f s (%s)", name, took, state)
            except Exception:  # noqa: BLE001 - a head start only: the take reports a bad voice itself
                log.warning("could not prepare voice %s", name, exc_info=True)

    def _stop_preparing(self, timeout: float = 30.0) -> None:
        """Drop the voices waiting to be prepared and wait for the one being made (before the model goes)."""
        with self._prepare_lock:
            self._prepare_next = None
            preparer = self._preparer
        if preparer is not None:
            preparer.join(timeout)

    def cancel(self, request_id: str) -> None:
        with self._takes_lock:
            take = self._takes.get(request_id)
        if take is None:
            log.info("cancel %s: no such running take", request_id)
            return
        log.info("cancel %s", request_id)
        take[1].set()

    def cancel_all(self, wait: bool, timeout: float = 30.0) -> None:
        with self._takes_lock:
            takes = list(self._takes.values())
        for _thread, cancel in takes:
            cancel.set()
        if wait:
            deadline = time.monotonic() + timeout
            for thread, _cancel in takes:
                thread.join(max(0.0, deadline - time.monotonic()))

    def shutdown(self) -> None:
        self.cancel_all(wait=True)
        self._stop_preparing()
        if self.loaded is not None:
            try:
                self.loaded.close()
            except Exception:  # noqa: BLE001 - shutting down anyway
                log.exception("closing the model failed")
            self.loaded = None
        self.set_state(EngineState.STOPPED, "engine stopped")


IDLE_TRIM_SECONDS = 1.0  # memory is given back after this long without a take,
BUSY_TRIM_SECONDS = 5.0  # and this often while takes run


def engine_main(requests: Any, events: Any, log_path: str) -> None:
    """Entry point of the engine process: handshake, then serve requests until Shutdown or EOF."""
    lifetime.lead_group()  # the client ends this process and all vLLM started under it together
    lifetime.die_with_parent()  # as group leader, with vLLM's processes (even before their handshake)
    lifetime.set_name("cosyvoice-studio engine")
    configure_allocator()
    output = setup_logging(log_path)
    keep_from_forks(requests, events)
    log.info("engine starting (pid %d, protocol %d)", os.getpid(), PROTOCOL_VERSION)
    engine = Engine(events)
    asr = AsrService(engine.send)  # transcripts on their own thread: takes keep streaming meanwhile
    engine.send(
        Hello(PROTOCOL_VERSION, os.getpid(), __version__, platform.python_version(), log_path=log_path)
    )
    engine.set_state(EngineState.STARTING, "engine started; no model loaded")
    try:
        while True:
            try:
                if not requests.poll(engine.trim_wait()):  # no request for a while
                    engine.trim_if_due()
                    continue
                request = requests.recv()
            except (EOFError, OSError):
                log.warning("the studio went away; shutting down")
                break
            if isinstance(request, Shutdown):
                break
            if isinstance(request, LoadModel):
                engine.load(request)
            elif isinstance(request, Synthesize):
                engine.synthesize(request)
            elif isinstance(request, PrepareVoice):
                engine.prepare_voice(request)
            elif isinstance(request, Transcribe):
                asr.submit(request)
            elif isinstance(request, Cancel):
                engine.cancel(request.request_id)
            else:
                engine.send(Error(None, f"unknown request {type(request).__name__}"))
    finally:
        asr.close()
        engine.shutdown()
        log.info("engine exiting")
        logging.shutdown()
        faulthandler.disable()
        output.close()
        events.close()
    # The model is closed and vLLM's processes are reaped: the interpreter's own teardown of torch and
    # vLLM (thread joins, atexit hooks) only costs seconds the client waits for.
    lifetime.exit_now()
