"""Denoising finished takes with the audio core's low-priority worker (a niced child process); its
callback arrives on the worker's thread and is re-emitted here as a Qt signal on the GUI thread."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QObject, Signal


class TakeDenoiser(QObject):
    """Queues takes for denoising; ``sig_done``/``sig_failed`` arrive on the GUI thread."""

    sig_done = Signal(str, object)
    """(take id, denoised float32 samples)."""
    sig_failed = Signal(str, str)
    """(take id, reason)."""

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._worker = None
        self._jobs: dict[str, object] = {}
        self.sig_done.connect(self._forget)
        self.sig_failed.connect(self._forget)

    @property
    def pending(self) -> set[str]:
        return set(self._jobs)

    @property
    def worker_ready(self) -> bool:
        """Whether the worker's child process is up (after `prestart` or a first take)."""
        return self._worker is not None and self._worker.child_pid is not None

    def prestart(self) -> None:
        """Start the worker and its child now (when denoising is switched on), not on the first take."""
        self._ensure_worker().prestart()

    def _ensure_worker(self):
        if self._worker is None:
            from studio.audio.denoise import DenoiseWorker

            self._worker = DenoiseWorker()
        return self._worker

    def submit(self, take_id: str, samples: np.ndarray, sample_rate: int) -> None:
        self._ensure_worker()

        def callback(result=None, error=None) -> None:  # runs on the worker's controller thread
            if error is not None:
                self.sig_failed.emit(take_id, str(error))
            else:
                self.sig_done.emit(take_id, result)

        self._jobs[take_id] = self._worker.submit(samples, sample_rate, callback)

    def _forget(self, take_id: str, *_rest) -> None:
        self._jobs.pop(take_id, None)

    def shutdown(self) -> None:
        """Cancel what is queued and stop the worker (on close)."""
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.shutdown()
        self._jobs.clear()
