"""Qt-free client of the engine process: start it, send requests, read events, notice when it dies.

Usage::

    client = EngineClient()                     # log file: data_dir()/logs/engine.log unless given
    hello = client.start()                      # spawns the process, checks the protocol version
    client.load_model(LoadModel(model_dir, backend="vllm"))
    rid = client.synthesize(Synthesize(text, prompt_wav=wav, prompt_sr=16000, prompt_text=t))
    for event in client.events(timeout=60):      # (TakeQueued) AudioChunk ..., TakeFinished or Error for rid
        ...
    client.cancel(rid); client.restart(); client.shutdown()

Events arrive in one queue from a reader thread. When the process dies without being asked to
(crash, SIGKILL), the client queues an ``Error`` for every unfinished take, an ``Error(None, ...)`` whose
``traceback`` holds the last lines of the engine log and of its raw output (``engine.out``, where a
native crash's fault-handler dump goes; the two runs before are kept as ``engine.out.1`` and ``.2``),
and ``State(CRASHED)``. ``restart()`` starts a new process and re-sends the last ``LoadModel``. All
methods are thread-safe.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import multiprocessing.connection as mp_connection
import queue
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from studio import lifetime
from studio.engine.protocol import (
    PROTOCOL_VERSION,
    Cancel,
    EngineState,
    Error,
    Hello,
    LoadModel,
    Shutdown,
    State,
    Synthesize,
    TakeFinished,
)
from studio.engine.raw_output import clip, output_excerpt, output_of

log = logging.getLogger("studio.engine.client")

# How long the engine's process group gets after SIGTERM (vLLM's engine core shuts down in order) before
# SIGKILL, when the engine is ended rather than asked to stop (while it loads, or when it hangs).
END_GRACE_S = 5.0


class EngineError(RuntimeError):
    """The engine could not be started or reached."""


def default_log_path() -> Path:
    from studio.settings import data_dir

    return data_dir() / "logs" / "engine.log"


def tail_lines(path: Path, count: int = 30, pid: int | None = None) -> list[str]:
    """The last ``count`` lines of a log file (those of process ``pid`` when given, plus unprefixed ones)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = deque(handle, maxlen=max(count * 20, 400))
    except OSError:
        return []
    if pid is not None:
        # our lines carry " <pid> " after the timestamp; fault-handler dumps carry no prefix
        lines = deque(line for line in lines if f" {pid} " in line[:40] or not line[:4].isdigit())
    return [line.rstrip("\n") for line in list(lines)[-count:]]


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "the engine process stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"the engine process was killed by {name} (exit code {exitcode})"
    return f"the engine process exited with code {exitcode}"


def _exited(process: multiprocessing.Process, timeout: float = 0.0) -> bool:
    """Whether the process has ended (waits up to ``timeout``); never reaps it, so threads cannot race."""
    return bool(mp_connection.wait([process.sentinel], timeout))


def _end_group(process: multiprocessing.Process) -> None:
    """SIGTERM the engine's process group, SIGKILL what is left after `END_GRACE_S`; the engine reaped."""
    lifetime.end_group(process.pid, lambda timeout: _exit_code(process, timeout) is not None, END_GRACE_S)


def _exit_code(process: multiprocessing.Process, timeout: float) -> int | None:
    """The exit code once the process ends within ``timeout`` seconds, else None."""
    if not _exited(process, timeout):
        return None
    deadline = time.monotonic() + 2.0
    while process.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.02)  # another thread is reaping it this instant and will record the code
    return process.exitcode


class EngineClient:
    """Owns one engine process at a time and the pipes to it."""

    def __init__(self, log_path: str | Path | None = None, start_timeout: float = 120.0) -> None:
        self.log_path = Path(log_path) if log_path else default_log_path()
        self.start_timeout = start_timeout
        self.hello: Hello | None = None
        self.last_state: State | None = None
        self.last_exitcode: int | None = None  # of the previous engine process, once it ended
        self._events: queue.Queue = queue.Queue()
        self._send_lock = threading.RLock()
        self._process: multiprocessing.Process | None = None
        self._requests: Any = None
        self._reader: threading.Thread | None = None
        self._last_load: LoadModel | None = None
        self._open_takes: set[str] = set()
        self._takes_lock = threading.Lock()
        self._stopping = False
        self._ended = False  # the client ended the process itself (SIGTERM/SIGKILL of its group)
        self._loading = False  # a LoadModel was sent and has not been answered (READY, BUSY or ERROR)

    # ---------------------------------------------------------------- lifecycle
    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def is_alive(self) -> bool:
        return self._process is not None and not _exited(self._process)

    def start(self) -> Hello:
        """Spawn the engine process and wait for its handshake; raises EngineError on failure."""
        with self._send_lock:
            if self.is_alive():
                raise EngineError("the engine is already running")
            if self._process is not None:  # a dead one (crashed): release its pipes first
                self.shutdown(timeout=0)
            # Imported by name: the GUI may use this client but never imports the engine's code itself
            # (an import-linter contract); the spawned child imports it.
            engine_main = importlib.import_module("studio.engine.process").engine_main
            context = multiprocessing.get_context("spawn")
            requests_read, requests_write = context.Pipe(duplex=False)
            events_read, events_write = context.Pipe(duplex=False)
            process = context.Process(
                target=engine_main,
                args=(requests_read, events_write, str(self.log_path)),
                name="cosyvoice-engine",
                daemon=False,  # vLLM starts processes of its own
            )
            process.start()
            requests_read.close()  # only the child keeps these ends: EOF reaches us when it dies
            events_write.close()
            with self._takes_lock:
                self._open_takes.clear()
            try:
                hello = self._handshake(process, events_read)
            except BaseException:
                self._end(process)
                events_read.close()
                requests_write.close()
                self.last_exitcode = _exit_code(process, 5)
                raise
            self._process, self._requests, self._stopping, self._ended = process, requests_write, False, False
            self.hello = hello
            self._reader = threading.Thread(
                target=self._read_events, args=(events_read, process), name="engine-events", daemon=True
            )
            self._reader.start()
            log.info("engine started, pid %d", process.pid)
            return hello

    def shutdown(self, timeout: float = 30.0) -> None:
        """Ask the engine to finish (it cancels takes and closes vLLM), then wait; when it hangs, or while it
        loads a model (it reads no request then), end its whole process group instead (``end``). Whatever
        is left of a crashed engine's processes is ended too.

        Requests sent meanwhile fail at once with EngineError (the lock is not held while waiting)."""
        with self._send_lock:
            process, requests, reader = self._process, self._requests, self._reader
            if process is None:
                return
            self._stopping = True
            self._process = self._requests = self._reader = None
            loading = self._loading
            if not _exited(process) and not loading:
                try:
                    requests.send(Shutdown())
                except (BrokenPipeError, OSError):
                    pass
        if loading and not _exited(process):
            log.info("the engine is loading a model; ending it")
            self._end(process)
        elif _exit_code(process, timeout) is None:
            log.warning("engine did not stop within %.0f s; ending it", timeout)
            self._end(process)
        elif lifetime.signal_group(process.pid, 0):  # what is left of a crashed engine (vLLM's processes)
            _end_group(process)
        code = _exit_code(process, 10)
        requests.close()
        if reader is not None:
            reader.join(10)  # the reader reports the end (STOPPED, or a crash)
        self.last_exitcode = code
        if code is not None:
            process.close()

    def _handshake(self, process: multiprocessing.Process, events: Any) -> Hello:
        if not events.poll(self.start_timeout):
            raise EngineError(f"the engine did not answer within {self.start_timeout:.0f} s")
        try:
            hello = events.recv()
        except (EOFError, OSError) as exc:
            code = _exit_code(process, 5)
            report = self.crash_report(process.pid, 20)
            raise EngineError(f"{describe_exit(code)} while starting\n{report}") from exc
        if not isinstance(hello, Hello) or hello.protocol_version != PROTOCOL_VERSION:
            raise EngineError(f"engine protocol mismatch: expected {PROTOCOL_VERSION}, got {hello!r}")
        return hello

    def restart(self, load: LoadModel | None = None, timeout: float = 30.0) -> Hello:
        """Stop (or clean up after a crash), start a new process, and load ``load`` or the last model."""
        self.shutdown(timeout)
        hello = self.start()
        if load is not None:
            self._last_load = load
        if self._last_load is not None:
            self.load_model(self._last_load)
        return hello

    def _end(self, process: multiprocessing.Process) -> None:
        """End the engine process and every process of its group (vLLM's): SIGTERM, SIGKILL after a grace."""
        self._ended = True
        _end_group(process)

    def __enter__(self) -> EngineClient:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ---------------------------------------------------------------- requests
    def send(self, request: Any) -> None:
        with self._send_lock:
            if self._requests is None or not self.is_alive():
                raise EngineError("the engine is not running (start or restart it)")
            try:
                self._requests.send(request)
            except (BrokenPipeError, OSError) as exc:
                raise EngineError(f"the engine is not reachable: {exc}") from exc

    def load_model(self, request: LoadModel) -> None:
        """Load a model folder (answered by LOADING, WARMING, READY states, or an Error and ERROR)."""
        self._last_load = request
        self._loading = True
        try:
            self.send(request)
        except EngineError:
            self._loading = False
            raise

    def synthesize(self, request: Synthesize) -> str:
        """Start a take; returns its request id. It ends with one TakeFinished or one Error."""
        with self._takes_lock:
            self._open_takes.add(request.request_id)
        try:
            self.send(request)
        except EngineError:
            with self._takes_lock:
                self._open_takes.discard(request.request_id)
            raise
        return request.request_id

    def cancel(self, request_id: str) -> None:
        self.send(Cancel(request_id))

    # ---------------------------------------------------------------- events
    def get_event(self, timeout: float | None = None) -> Any | None:
        """The next event, or None after ``timeout`` seconds."""
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return None

    def events(self, timeout: float | None = None) -> Iterator[Any]:
        """Iterate events; stops when none arrives within ``timeout`` or after the engine stops/crashes."""
        while True:
            event = self.get_event(timeout)
            if event is None:
                return
            yield event
            if isinstance(event, State) and event.state in (EngineState.CRASHED, EngineState.STOPPED):
                return

    def wait_for_state(self, *states: EngineState, timeout: float = 300.0) -> State:
        """Drop events until a State in ``states`` (raises EngineError on timeout, crash or load error)."""
        for event in self.events(timeout):
            if isinstance(event, State) and event.state in states:
                return event
            if isinstance(event, State) and event.state in (EngineState.CRASHED, EngineState.ERROR):
                raise EngineError(f"engine {event.state.value}: {event.detail}")
        raise EngineError(f"no {'/'.join(s.value for s in states)} state within {timeout:.0f} s")

    def _read_events(self, connection: Any, process: multiprocessing.Process) -> None:
        saw_stopped = False
        while True:
            # The sentinel too: vLLM's own children may hold the pipe open after the engine died.
            ready = mp_connection.wait([connection, process.sentinel])
            if connection not in ready and not connection.poll(0):
                break
            try:
                event = connection.recv()
            except (EOFError, OSError):
                break
            if isinstance(event, State):
                self.last_state = event
                saw_stopped = event.state is EngineState.STOPPED
                if event.state in (EngineState.READY, EngineState.BUSY, EngineState.ERROR):
                    self._loading = False
            elif isinstance(event, (TakeFinished, Error)) and event.request_id is not None:
                with self._takes_lock:
                    self._open_takes.discard(event.request_id)
            self._events.put(event)
        connection.close()
        code = _exit_code(process, 10)
        self.last_exitcode = code
        self._loading = False
        if self._stopping and self._ended:
            self._report_lost("the engine was ended")
            self._events.put(State(EngineState.STOPPED, "engine ended"))
        elif not (self._stopping and (code == 0 or (code is None and saw_stopped))):
            self._report_crash(process, code)

    def crash_report(self, pid: int | None, count: int = 30) -> str:
        """Engine process ``pid``'s last log lines and the meaningful lines of its raw output (the fault
        handler's dump of a native crash), found even after a restart; lines cut to ``REPORT_WIDTH``."""
        parts = [f"--- {self.log_path} ---", *tail_lines(self.log_path, count, pid)]
        output = output_of(self.log_path, pid)
        excerpt = output_excerpt(output)
        if excerpt:
            parts += [f"--- {output} (stdout/stderr) ---", *excerpt]
        return "\n".join(clip(part) for part in parts)

    def _report_crash(self, process: multiprocessing.Process, code: int | None) -> None:
        reason = describe_exit(code)
        report = self.crash_report(process.pid)
        log.error("%s; last log lines:\n%s", reason, report)
        self._report_lost(reason)
        self._events.put(Error(None, f"{reason}. The engine's last log lines are in the details.", report))
        crashed = State(EngineState.CRASHED, f"{reason}; restart the engine")
        self.last_state = crashed
        self._events.put(crashed)

    def _report_lost(self, reason: str) -> None:
        """An Error for every take the engine did not finish."""
        with self._takes_lock:
            lost, self._open_takes = sorted(self._open_takes), set()
        for request_id in lost:
            self._events.put(Error(request_id, f"take lost: {reason}"))
