"""Noise reduction (noisereduce's spectral gating) and a low-priority, cancellable worker for takes.

``denoise_samples`` works in place of the caller, chunk by chunk, reporting progress and checking for
cancellation between chunks. ``DenoiseWorker`` runs it in one niced child process (started with
``spawn``) so the caller's thread and the GIL stay free; cancelling kills the job at once. Results come
back through Picard's contract ``callback(result=None, error=None)``, called on the worker's own
controller thread (the GUI re-emits it as a Qt signal).
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from studio.audio.errors import AudioError, DenoiseCancelled

log = logging.getLogger(__name__)

Callback = Callable[..., None]
Progress = Callable[[float], None]
#: Seconds processed per noisereduce call, and the context added on each side of a chunk.
CHUNK_S = 10.0
PAD_S = 1.0
_POLL_S = 0.05
#: Defaults chosen on espeak speech under white noise (SNR 9-29 dB): stationary gating without noisereduce's
#: mask smoothing lowered the noise by 13-14 dB at strength 0.8 and changed the speech level by < 1 dB;
#: its default smoothing (500 Hz, 50 ms) took 4-6 dB off the speech itself.
DEFAULT_STRENGTH = 0.8


def _import_noisereduce():
    """Import noisereduce without letting it import torch (it does so only for a GPU path we never use).

    Keeps the audio core torch-free in processes that have not loaded torch (the GUI) and saves seconds.
    The block lasts only while noisereduce's own modules load (scipy looks torch up in sys.modules).
    """
    if "noisereduce" in sys.modules or "torch" in sys.modules:
        import noisereduce

        return noisereduce
    import joblib  # noqa: F401  (noisereduce's own dependencies load first, outside the torch block)
    import scipy.signal  # noqa: F401
    import tqdm.auto  # noqa: F401

    sys.modules["torch"] = None  # makes `import torch` raise ImportError inside noisereduce
    try:
        import noisereduce
    finally:
        del sys.modules["torch"]
    return noisereduce


def denoise_samples(
    samples: np.ndarray,
    sample_rate: int,
    *,
    strength: float = DEFAULT_STRENGTH,
    stationary: bool = True,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> np.ndarray:
    """Reduce background noise in mono float ``samples``; returns a new float32 array of the same length.

    ``strength`` (0..1) is how much of the detected noise is removed; ``stationary`` gating estimates one
    noise profile per chunk (room tone, hiss), the non-stationary mode follows changing noise. Raises DenoiseCancelled when
    ``cancel`` is set between chunks.
    """
    if not 0.0 <= strength <= 1.0:
        raise ValueError(f"strength must be between 0 and 1, not {strength}")
    samples = np.asarray(samples, dtype=np.float32)
    if samples.ndim != 1:
        raise AudioError(f"Denoise expects mono samples, got an array of shape {samples.shape}.")
    nr = _import_noisereduce()
    chunk = int(CHUNK_S * sample_rate)
    pad = int(PAD_S * sample_rate)
    out = np.empty_like(samples)
    starts = range(0, len(samples), chunk) if len(samples) else ()
    for index, start in enumerate(starts):
        if cancel is not None and cancel.is_set():
            raise DenoiseCancelled("Denoising was cancelled.")
        stop = min(len(samples), start + chunk)
        lo, hi = max(0, start - pad), min(len(samples), stop + pad)
        cleaned = nr.reduce_noise(
            y=samples[lo:hi],
            sr=sample_rate,
            stationary=stationary,
            prop_decrease=strength,
            freq_mask_smooth_hz=None,
            time_mask_smooth_ms=None,
            n_jobs=1,
        )
        out[start:stop] = cleaned[start - lo : stop - lo]
        if progress is not None:
            progress((index + 1) / len(starts))
    if cancel is not None and cancel.is_set():
        raise DenoiseCancelled("Denoising was cancelled.")
    return out


@dataclass(eq=False)
class DenoiseJob:
    """A submitted denoise request: watch ``progress``, call ``cancel()``, or ``wait()`` for it."""

    id: int
    samples: np.ndarray | None
    sample_rate: int
    options: dict
    callback: Callback
    on_progress: Progress | None = None
    progress: float = 0.0
    result: np.ndarray | None = None
    error: BaseException | None = None
    _cancel: threading.Event = field(default_factory=threading.Event)
    _done: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        """Ask for the job to stop; its callback then gets ``error=DenoiseCancelled``. Never blocks."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job finished (for scripts and tests; the GUI uses the callback)."""
        return self._done.wait(timeout)


#: Audio crosses the pipe in pieces this size: each copy holds the interpreter lock only briefly, so a
#: GUI thread in the parent never waits on a whole take's pickling (tens of ms for a long take).
_PIECE_BYTES = 64 * 1024


def _send_samples(conn, samples: np.ndarray) -> None:
    """Send a float32 array as its shape, then raw pieces (no pickled copy of the whole take)."""
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    conn.send(samples.shape)
    raw = memoryview(samples.reshape(-1)).cast("B")
    for start in range(0, len(raw), _PIECE_BYTES):
        conn.send_bytes(raw[start : start + _PIECE_BYTES])


def _recv_samples(conn) -> np.ndarray:
    """Receive what `_send_samples` sent, piece by piece, into one preallocated array."""
    out = np.empty(conn.recv(), dtype=np.float32)
    raw = memoryview(out.reshape(-1)).cast("B")
    filled = 0
    while filled < len(raw):
        filled += conn.recv_bytes_into(raw[filled:])
    return out


def _child_main(conn, niceness: int) -> None:
    """Entry of the worker process: lower its priority, then denoise jobs until told to stop."""
    if niceness and hasattr(os, "nice"):
        try:
            os.nice(niceness)
        except OSError:
            pass
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        job_id, sample_rate, options = message
        samples = _recv_samples(conn)
        try:
            result = denoise_samples(
                samples, sample_rate, progress=lambda f, j=job_id: conn.send(("progress", j, f)), **options
            )
            conn.send(("done", job_id, None))
            _send_samples(conn, result)
        except Exception as exc:  # sent back to the caller as an error value
            conn.send(("error", job_id, f"{type(exc).__name__}: {exc}"))


class DenoiseWorker:
    """Runs denoise jobs one at a time in a niced child process, never blocking the submitting thread.

    Submit with ``submit(samples, rate, callback)``; ``callback(result=array)`` or
    ``callback(error=exception)`` is called on the worker's controller thread. ``shutdown()`` cancels
    what is left and stops the child.
    """

    def __init__(self, *, niceness: int = 19):
        self._niceness = niceness
        self._ids = itertools.count(1)
        self._pending: collections.deque[DenoiseJob] = collections.deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._start_child = False
        self._process = None
        self._conn = None
        self._thread = threading.Thread(target=self._run, name="denoise-worker", daemon=True)
        self._thread.start()

    def submit(
        self,
        samples: np.ndarray,
        sample_rate: int,
        callback: Callback,
        *,
        on_progress: Progress | None = None,
        strength: float = DEFAULT_STRENGTH,
        stationary: bool = True,
    ) -> DenoiseJob:
        """Queue a take for denoising and return at once."""
        if not 0.0 <= strength <= 1.0:
            raise ValueError(f"strength must be between 0 and 1, not {strength}")
        job = DenoiseJob(
            next(self._ids),
            np.asarray(samples, dtype=np.float32),
            int(sample_rate),
            {"strength": strength, "stationary": stationary},
            callback,
            on_progress,
        )
        with self._wake:
            if self._stopping:
                raise RuntimeError("The denoise worker has been shut down.")
            self._pending.append(job)
            self._wake.notify()
        return job

    def prestart(self) -> None:
        """Start the child process now, on the worker's thread, so the first take does not wait for it.

        Starting a process forks the caller, which holds the interpreter lock for a time that grows
        with the process's memory; doing it when denoising is switched on keeps that off a take's path.
        """
        with self._wake:
            self._start_child = True
            self._wake.notify()

    @property
    def child_pid(self) -> int | None:
        """Process id of the denoise child while one runs (None before the first job or after a cancel)."""
        process = self._process
        return process.pid if process is not None and process.is_alive() else None

    def shutdown(self, timeout: float = 5.0) -> None:
        """Cancel queued and running jobs, stop the child process and the controller thread."""
        with self._wake:
            self._stopping = True
            for job in self._pending:
                job.cancel()
            self._wake.notify()
        self._thread.join(timeout)

    def __enter__(self) -> DenoiseWorker:
        return self

    def __exit__(self, *exc_info) -> None:
        self.shutdown()

    # -- controller thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._wake:
                    while not self._pending and not self._stopping and not self._start_child:
                        self._wake.wait()
                    start_child, self._start_child = self._start_child, False
                    if start_child and not self._stopping:
                        job = None
                    elif not self._pending:
                        break
                    else:
                        job = self._pending.popleft()
                if job is None:
                    self._ensure_child()
                    continue
                if job.cancelled:
                    self._finish(job, error=DenoiseCancelled("Denoising was cancelled."))
                    continue
                self._process_job(job)
        finally:
            self._stop_child()

    def _ensure_child(self) -> None:
        if self._process is not None and self._process.is_alive():
            return
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        parent_conn, child_conn = context.Pipe()
        self._process = context.Process(
            target=_child_main, args=(child_conn, self._niceness), name="studio-denoise", daemon=True
        )
        self._process.start()
        child_conn.close()
        self._conn = parent_conn

    def _stop_child(self, kill: bool = False) -> None:
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if process is None:
            return
        if not kill:
            try:
                conn.send(None)
            except OSError:
                kill = True
            process.join(2.0)
        if process.is_alive():
            process.kill()
            process.join(2.0)
        conn.close()

    def _process_job(self, job: DenoiseJob) -> None:
        try:
            self._ensure_child()
            self._conn.send((job.id, job.sample_rate, job.options))
            _send_samples(self._conn, job.samples)
            job.samples = None  # the child has its copy; do not hold the take twice
            while True:
                if job.cancelled or self._stopping:
                    self._stop_child(kill=True)  # the only way to stop noisereduce mid-chunk
                    self._finish(job, error=DenoiseCancelled("Denoising was cancelled."))
                    return
                if not self._conn.poll(_POLL_S):
                    continue
                kind, _job_id, payload = self._conn.recv()
                if kind == "progress":
                    job.progress = payload
                    if job.on_progress is not None:
                        self._safe_call(job.on_progress, payload)
                elif kind == "done":
                    result = _recv_samples(self._conn)
                    job.progress = 1.0
                    self._finish(job, result=result)
                    return
                else:
                    self._finish(job, error=AudioError(f"Denoising failed: {payload}"))
                    return
        except (EOFError, OSError) as exc:
            self._stop_child(kill=True)
            self._finish(job, error=AudioError(f"The denoise worker stopped unexpectedly ({exc})."))

    def _finish(
        self, job: DenoiseJob, *, result: np.ndarray | None = None, error: BaseException | None = None
    ):
        job.result, job.error = result, error
        self._safe_call(job.callback, result=result, error=error)
        job._done.set()

    @staticmethod
    def _safe_call(function: Callable, *args, **kwargs) -> None:
        try:
            function(*args, **kwargs)
        except Exception:
            log.exception("A denoise callback raised")
