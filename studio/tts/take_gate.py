"""Admission of takes against the memory their states will need: beyond the budget a take queues (first
come, first served) instead of failing, and runs as soon as enough running takes have finished. A take
larger than the whole budget runs alone. A queued take that is cancelled leaves the queue at once."""

from __future__ import annotations

import itertools
import sys
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

POLL_S = 0.05


class TakeGate:
    """``admitted(bytes, cancel)`` holds a take until its bytes fit beside the running takes'."""

    def __init__(self, capacity_bytes: int):
        if capacity_bytes <= 0:
            raise ValueError("a take gate needs a positive capacity")
        self.capacity = int(capacity_bytes)
        self.used = 0
        self.running = 0
        self._queue: deque[int] = deque()
        self._tickets = itertools.count()
        self._condition = threading.Condition()
        self.queued_total = 0  # takes that had to wait (a counter for bench and tests)

    @property
    def waiting(self) -> int:
        with self._condition:
            return len(self._queue)

    def queues(self, thread_id: int) -> bool:
        """Whether the thread ``thread_id`` is waiting in this gate's queue now: read from its stack (the
        take waits on the thread that runs it), so the gate keeps nothing for it."""
        frame = sys._current_frames().get(thread_id)
        while frame is not None:
            if frame.f_code is TakeGate._enter.__code__ and frame.f_locals.get("self") is self:
                return bool(frame.f_locals.get("waited"))
            frame = frame.f_back
        return False

    def _fits(self, need: int) -> bool:
        return self.running == 0 or self.used + need <= self.capacity

    def _enter(self, need: int, cancel: threading.Event | None) -> bool:
        with self._condition:
            ticket = next(self._tickets)
            self._queue.append(ticket)
            waited = False
            while not (self._queue[0] == ticket and self._fits(need)):
                if cancel is not None and cancel.is_set():
                    self._queue.remove(ticket)
                    self._condition.notify_all()
                    return False
                waited = True
                self._condition.wait(POLL_S)
            self._queue.popleft()
            self.used += need
            self.running += 1
            self.queued_total += waited
            self._condition.notify_all()  # the next in line may fit too
            return True

    @contextmanager
    def admitted(self, need_bytes: int, cancel: threading.Event | None = None) -> Iterator[bool]:
        """Yields True once admitted, or False when ``cancel`` was set while the take waited."""
        need = max(0, int(need_bytes))
        if not self._enter(need, cancel):
            yield False
            return
        try:
            yield True
        finally:
            with self._condition:
                self.used -= need
                self.running -= 1
                self._condition.notify_all()
