"""Admission of takes against the memory their states will need: beyond the budget a take queues (first
come, first served) instead of failing, and runs as soon as enough running takes have finished. A take
larger than the whole budget runs alone. A queued take that is cancelled leaves the queue at once."""

from __future__ import annotations

import itertools
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
        self._waiting_threads: set[int] = set()  # the threads of the takes waiting now

    @property
    def waiting(self) -> int:
        with self._condition:
            return len(self._queue)

    def queues(self, thread_id: int) -> bool:
        """Whether the take run by thread ``thread_id`` waits in this gate's queue now."""
        with self._condition:
            return thread_id in self._waiting_threads

    def _fits(self, need: int) -> bool:
        return self.running == 0 or self.used + need <= self.capacity

    def _enter(self, need: int, cancel: threading.Event | None) -> bool:
        with self._condition:
            ticket = next(self._tickets)
            self._queue.append(ticket)
            waited, thread = False, threading.get_ident()
            while not (self._queue[0] == ticket and self._fits(need)):
                if cancel is not None and cancel.is_set():
                    self._queue.remove(ticket)
                    self._waiting_threads.discard(thread)
                    self._condition.notify_all()
                    return False
                waited = True
                self._waiting_threads.add(thread)
                self._condition.wait(POLL_S)
            self._waiting_threads.discard(thread)
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
