"""Admission of takes against the memory their states will need: beyond the budget a take queues (first
come, first served) instead of failing, and runs as soon as enough running takes have finished. A take
larger than the whole budget runs alone. A queued take that is cancelled leaves the queue at once.

A take that can also run lean (keeping no flow state: it solves its frames again at every chunk, upstream's
way, for more GPU work) is admitted lean at once when its kept state does not fit but its lean one does.

A take that finds it will hold less than it was admitted by gives the rest back (`Admission.release`): a take
whose prompt state is read in place from the prompt cache does not hold its prompt's frames itself."""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

POLL_S = 0.05


@dataclass
class Admission:
    """A take let in: ``lean`` when by its lean need (it keeps no flow state); it holds ``held`` bytes."""

    gate: TakeGate
    held: int
    lean: bool = False

    def release(self, nbytes: int) -> None:
        """Give back `nbytes` the take will not use after all (at most what it holds): waiting takes may fit."""
        self.gate._give_back(self, nbytes)


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
        self.lean_total = 0  # takes admitted lean
        self.released_total = 0  # bytes given back by takes that held less than they were admitted by
        self.running_peak = 0  # the most takes running at once
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

    def _enter(self, need: int, lean_need: int | None, cancel: threading.Event | None) -> int | None:
        """The bytes taken once admitted (``lean_need`` when only it fits), or None when cancelled."""
        with self._condition:
            ticket = next(self._tickets)
            self._queue.append(ticket)
            waited, thread = False, threading.get_ident()
            while True:
                if self._queue[0] == ticket:
                    if self._fits(need):
                        break
                    if lean_need is not None and self._fits(lean_need):
                        need = lean_need
                        self.lean_total += 1
                        break
                if cancel is not None and cancel.is_set():
                    self._queue.remove(ticket)
                    self._waiting_threads.discard(thread)
                    self._condition.notify_all()
                    return None
                waited = True
                self._waiting_threads.add(thread)
                self._condition.wait(POLL_S)
            self._waiting_threads.discard(thread)
            self._queue.popleft()
            self.used += need
            self.running += 1
            self.running_peak = max(self.running_peak, self.running)
            self.queued_total += waited
            self._condition.notify_all()  # the next in line may fit too
            return need

    @contextmanager
    def admitted(
        self, need_bytes: int, cancel: threading.Event | None = None, lean_bytes: int | None = None
    ) -> Iterator[Admission | None]:
        """Yields an `Admission` once admitted (lean when only ``lean_bytes`` fit), or None when ``cancel`` was
        set while the take waited."""
        need = max(0, int(need_bytes))
        lean = None if lean_bytes is None else min(need, max(0, int(lean_bytes)))
        taken = self._enter(need, lean, cancel)
        if taken is None:
            yield None
            return
        admission = Admission(self, taken, lean=taken < need)
        try:
            yield admission
        finally:
            with self._condition:
                self.used -= admission.held
                self.running -= 1
                self._condition.notify_all()

    def _give_back(self, admission: Admission, nbytes: int) -> None:
        with self._condition:
            given = min(max(0, int(nbytes)), admission.held)
            admission.held -= given
            self.used -= given
            self.released_total += given
            self._condition.notify_all()
