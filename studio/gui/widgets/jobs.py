"""Short CPU jobs off the GUI thread (cleanup, export): one worker thread so two jobs never race, and
every result comes back on the GUI thread as ``callback(result=None, error=None)`` (Picard's contract)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot

Callback = Callable[..., None]


class BackgroundJobs(QObject):
    """Runs callables on one worker thread; ``shutdown()`` waits for the running one (call it on close)."""

    _sig_done = Signal(object, object, object)
    """Internal: (callback, result, error), queued from the worker thread to the GUI thread."""

    def __init__(self, parent: QObject | None = None, name: str = "studio-jobs"):
        super().__init__(parent)
        self._executor: ThreadPoolExecutor | None = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._running = 0
        self._lock = threading.Lock()
        self._sig_done.connect(self._on_done)

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._running > 0

    def submit(self, function: Callable[..., Any], *args: Any, callback: Callback | None = None) -> Future:
        if self._executor is None:
            raise RuntimeError("the background jobs were shut down")
        with self._lock:
            self._running += 1

        def run() -> None:
            try:
                result, error = function(*args), None
            except Exception as exc:  # delivered to the callback, which shows it to the user
                result, error = None, exc
            self._sig_done.emit(callback, result, error)

        return self._executor.submit(run)

    @Slot(object, object, object)
    def _on_done(self, callback: Callback | None, result: Any, error: BaseException | None) -> None:
        with self._lock:
            self._running -= 1
        if callback is not None and self._executor is not None:  # after shutdown its owner is closing
            callback(result=result, error=error)

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
