"""The one Qt object that talks to the engine: a worker on its own QThread turns engine events into signals.

Usage (GUI thread)::

    bridge = EngineBridge(parent=window)          # optional log_path=...
    bridge.sig_state_changed.connect(on_state)    # State (also CRASHED with a restart hint)
    bridge.sig_take_queued.connect(on_queued)     # TakeQueued: the take waits for GPU memory
    bridge.sig_chunk.connect(on_chunk)            # AudioChunk (float32, its own sample_rate)
    bridge.sig_take_finished.connect(on_done)     # TakeFinished (stats)
    bridge.sig_error.connect(on_error)            # Error (request_id None: the engine itself)
    bridge.start(LoadModel(model_dir, backend="vllm"))    # spawns the engine off the GUI thread
    rid = bridge.synthesize(Synthesize(...)); bridge.cancel(rid)
    bridge.restart(); bridge.load_model(LoadModel(...))
    bridge.shutdown()                              # on close: stops the engine, the thread, waits

Every method returns at once; starting, restarting and stopping happen on the worker thread. Widgets use
only these signals and methods, never the client or its pipes.
"""

from __future__ import annotations

import logging
import queue
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QObject, Qt, QThread, Signal, Slot

from studio.engine.client import EngineClient, EngineError
from studio.engine.protocol import (
    AudioChunk,
    EngineState,
    Error,
    Hello,
    LoadModel,
    PrepareVoice,
    Progress,
    State,
    Synthesize,
    TakeFinished,
    TakeQueued,
    Transcribe,
    Transcript,
)

_POLL_SECONDS = 0.05

log = logging.getLogger(__name__)


class EngineSignals(QObject):
    """The engine's events as Qt signals, declared once: the worker emits them, the bridge re-emits them."""

    sig_hello = Signal(object)
    """The engine's handshake (Hello) after each (re)start."""
    sig_state_changed = Signal(object)
    """An engine State (starting, ..., ready, busy, error, stopped); CRASHED when the process died."""
    sig_take_queued = Signal(object)
    """A TakeQueued: the take waits for GPU memory that other takes hold (before its first chunk)."""
    sig_chunk = Signal(object)
    """An AudioChunk of a take (float32 mono at the chunk's own ``sample_rate``)."""
    sig_take_finished = Signal(object)
    """A TakeFinished with the take's stats (also for cancelled takes)."""
    sig_error = Signal(object)
    """An Error: of a take (request_id set) or of the engine (request_id None, log lines in traceback)."""
    sig_progress = Signal(object)
    """A Progress report."""
    sig_transcript = Signal(object)
    """A Transcript: what the ASR heard in a Transcribe request's recording."""

    #: every signal above, for relaying worker -> bridge
    NAMES = (
        "sig_hello",
        "sig_state_changed",
        "sig_take_queued",
        "sig_chunk",
        "sig_take_finished",
        "sig_error",
        "sig_progress",
        "sig_transcript",
    )


class EngineWorker(EngineSignals):
    """Runs on the bridge's QThread: owns the EngineClient and drains its events into signals."""

    finished = Signal()
    """The worker loop ended (the thread quits on it)."""

    def __init__(self, client: EngineClient) -> None:
        super().__init__()
        self.client = client
        self.commands: queue.Queue = queue.Queue()

    @Slot()
    def run(self) -> None:
        """Worker loop: run queued commands (start, restart, stop), forward events, until 'stop'."""
        try:
            while True:
                try:
                    command, argument = self.commands.get_nowait()
                except queue.Empty:
                    command, argument = None, None
                if command == "stop":
                    self._stop()
                    break
                if command in ("start", "restart"):
                    self._start(argument, restart=command == "restart")
                event = self.client.get_event(timeout=_POLL_SECONDS)
                while event is not None:
                    self._emit(event)
                    event = self.client.get_event(timeout=0)
        finally:
            self.finished.emit()

    def _start(self, load: LoadModel | None, restart: bool) -> None:
        self.sig_state_changed.emit(State(EngineState.STARTING, "starting the engine process"))
        try:
            if restart:
                hello = self.client.restart(load)
            else:
                hello = self.client.start()
                if load is not None:
                    self.client.load_model(load)
            self.sig_hello.emit(hello)
        except EngineError as exc:
            self.sig_error.emit(Error(None, str(exc)))
            self.sig_state_changed.emit(State(EngineState.CRASHED, f"engine failed to start: {exc}"))

    def _stop(self) -> None:
        try:
            self.client.shutdown()
        finally:
            event = self.client.get_event(timeout=0)
            while event is not None:
                self._emit(event)
                event = self.client.get_event(timeout=0)

    def _emit(self, event: object) -> None:
        if isinstance(event, AudioChunk):
            self.sig_chunk.emit(event)
        elif isinstance(event, State):
            self.sig_state_changed.emit(event)
        elif isinstance(event, TakeFinished):
            self.sig_take_finished.emit(event)
        elif isinstance(event, Error):
            self.sig_error.emit(event)
        elif isinstance(event, Progress):
            self.sig_progress.emit(event)
        elif isinstance(event, TakeQueued):
            self.sig_take_queued.emit(event)
        elif isinstance(event, Hello):
            self.sig_hello.emit(event)
        elif isinstance(event, Transcript):
            self.sig_transcript.emit(event)


class EngineBridge(EngineSignals):
    """GUI-thread facade: owns the worker's QThread and re-emits its signals (queued across threads)."""

    def __init__(
        self, parent: QObject | None = None, log_path: str | Path | None = None, client=None
    ) -> None:
        super().__init__(parent)
        self.client = client if client is not None else EngineClient(log_path)  # or a RemoteEngineClient
        self._thread: QThread | None = None
        self._worker: EngineWorker | None = None
        app = QCoreApplication.instance()
        if app is not None:  # never leave a running QThread (or an engine) behind at exit
            app.aboutToQuit.connect(self.shutdown)

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def last_state(self) -> State | None:
        return self.client.last_state

    def start(self, load: LoadModel | None = None) -> None:
        """Start the worker thread and the engine process, then load ``load`` when given."""
        if self._thread is not None:
            raise RuntimeError("the engine bridge is already started")
        thread = QThread()
        thread.setObjectName("engine-bridge")
        worker = EngineWorker(self.client)
        worker.moveToThread(thread)
        for name in EngineSignals.NAMES:
            getattr(worker, name).connect(getattr(self, name))
        thread.started.connect(worker.run)
        # Direct: the GUI thread may be blocked in shutdown()'s wait() and could not run a queued quit.
        worker.finished.connect(thread.quit, Qt.ConnectionType.DirectConnection)
        worker.finished.connect(worker.deleteLater, Qt.ConnectionType.DirectConnection)
        thread.finished.connect(thread.deleteLater)
        worker.commands.put(("start", load))
        self._thread, self._worker = thread, worker
        thread.start()

    def load_model(self, request: LoadModel) -> None:
        """Load (or switch) the model; progress comes as states, failures as sig_error."""
        self._guarded(self.client.load_model, request)

    def synthesize(self, request: Synthesize) -> str:
        """Start a take; returns its request id (an Error is emitted if the engine is not running)."""
        self._guarded(self.client.synthesize, request)
        return request.request_id

    def transcribe(self, request: Transcribe) -> str:
        """Ask for a recording's transcript; it comes as sig_transcript (or sig_error with its request id)."""
        self._guarded(self.client.send, request)
        return request.request_id

    def prepare_voice(self, request: PrepareVoice) -> None:
        """Ask the engine to make a voice's prompt state ahead of its first take. A head start only: nothing
        comes back, and an engine that cannot (not running, a server) is simply not asked."""
        try:
            self.client.send(request)
        except EngineError as exc:
            log.debug("voice not prepared ahead: %s", exc)

    def cancel(self, request_id: str) -> None:
        """Cancel a take; it ends with its TakeFinished (cancelled)."""
        self._guarded(self.client.cancel, request_id)

    def restart(self, load: LoadModel | None = None) -> None:
        """Restart the engine (after a crash, or to apply settings); reloads ``load`` or the last model."""
        if self._worker is None:
            self.start(load)
            return
        self._worker.commands.put(("restart", load))

    def use_client(self, client) -> None:
        """Talk to another engine from the next start (this computer's process or a server); stops first."""
        self.shutdown()
        self.client = client

    def shutdown(self, wait_ms: int = 60_000) -> bool:
        """Stop the engine and the worker thread; True when both ended within ``wait_ms``."""
        thread, worker = self._thread, self._worker
        if thread is None or worker is None:
            return True
        self._thread = self._worker = None
        worker.commands.put(("stop", None))
        return thread.wait(wait_ms)

    def _guarded(self, method, argument) -> None:
        try:
            method(argument)
        except EngineError as exc:
            request_id = getattr(argument, "request_id", argument if isinstance(argument, str) else None)
            self.sig_error.emit(Error(request_id, str(exc)))
