"""Admission of takes against the memory their states will need: beyond the budget a take queues (first
come, first served) instead of failing, and runs as soon as enough running takes have finished. A take
larger than the whole budget runs alone. A queued take that is cancelled leaves the queue at once.

A take that can also run lean (keeping no flow state: it solves its frames again at every chunk, upstream's
way, for more GPU work) is admitted lean at once when its kept state does not fit but its lean one does.

A take that finds it will hold less than it was admitted by gives the rest back (`Admission.release`): a take
whose prompt state is read in place from the prompt cache does not hold its prompt's frames itself.

A take may be admitted by less than its bound (``start_bytes``: what it holds first) and grow towards the bound
as it runs (`Admission.grow_to`). The gate then keeps the running takes in a safe state (the banker's rule for
one resource): some order exists in which each take can grow to its bound with what is free plus what the takes
before it in that order held, so at least one take can always finish, and a take that may not grow yet waits for
one to end instead of failing. A take whose bound is larger than the whole budget runs alone."""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

POLL_S = 0.05


# eq=False: each take is itself; two holding the same bytes are not one (the gate's list removes by identity)
@dataclass(eq=False)
class Admission:
    """A take let in: ``lean`` when by its lean need (it keeps no flow state); it holds ``held`` bytes."""

    gate: TakeGate
    held: int
    lean: bool = False
    bound: int = 0  # the most it may grow to (`grow_to`); never below `held`

    def release(self, nbytes: int) -> None:
        """Give back `nbytes` the take will not use after all (at most what it holds; its bound shrinks by as
        much): waiting takes may fit."""
        self.gate._give_back(self, nbytes)

    def grow_to(self, nbytes: int, cancel: threading.Event | None = None) -> bool:
        """Hold `nbytes` (at most the bound), waiting while granting them could leave no take able to finish;
        False when `cancel` was set while it waited."""
        return self.gate._grow(self, nbytes, cancel)


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
        self.used_peak = 0  # the most bytes held at once
        self.grow_waits = 0  # times a take waited to grow (a counter for bench and tests)
        self._waiting_threads: set[int] = set()  # the threads of the takes waiting now
        self._admitted: list[Admission] = []  # the running takes

    @property
    def waiting(self) -> int:
        with self._condition:
            return len(self._queue)

    def queues(self, thread_id: int) -> bool:
        """Whether the take run by thread ``thread_id`` waits in this gate's queue now."""
        with self._condition:
            return thread_id in self._waiting_threads

    def _fits(self, held: int, bound: int) -> bool:
        """Whether a take holding `held` that may grow to `bound` can run beside the running takes (lock held)."""
        return self.running == 0 or self._safe(held, extra=((held, bound),))

    def _safe(
        self, more: int, extra: tuple[tuple[int, int], ...] = (), grown: Admission | None = None
    ) -> bool:
        """The banker's rule, were `more` bytes granted (to the running take `grown`, or held by `extra`'s
        (held, bound) pairs): the running takes and `extra` can each grow to their bound in some order, each
        finishing and freeing what it held (lock held)."""
        free = self.capacity - self.used - more
        if free < 0:
            return False
        held_now = [a.held + (more if a is grown else 0) for a in self._admitted]
        takes = [(a.bound - h, h) for a, h in zip(self._admitted, held_now, strict=True)]
        takes += [(b - h, h) for h, b in extra]
        for headroom, held in sorted(takes):  # the least headroom first: the best order
            if headroom > free:
                return False
            free += held
        return True

    def _enter(
        self, need: int, lean_need: int | None, cancel: threading.Event | None, start: int
    ) -> Admission | None:
        """The take admitted: holding ``start`` with ``need`` as its bound, or lean (holding ``lean_need``,
        its bound too) when only that fits; None when cancelled while it waited."""
        with self._condition:
            ticket = next(self._tickets)
            self._queue.append(ticket)
            waited, thread = False, threading.get_ident()
            while True:
                if self._queue[0] == ticket:
                    if self._fits(start, need):
                        admission = Admission(self, start, bound=need)
                        break
                    if lean_need is not None and self._fits(lean_need, lean_need):
                        admission = Admission(self, lean_need, lean=True, bound=lean_need)
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
            self._admitted.append(admission)
            self._hold(admission.held)
            self.running += 1
            self.running_peak = max(self.running_peak, self.running)
            self.queued_total += waited
            self._condition.notify_all()  # the next in line may fit too
            return admission

    def _hold(self, nbytes: int) -> None:
        """`nbytes` more held by the running takes (lock held)."""
        self.used += nbytes
        self.used_peak = max(self.used_peak, self.used)

    def restart_peak(self) -> None:
        """`running_peak` and `used_peak` count from now (a benchmark's next level)."""
        with self._condition:
            self.running_peak = self.running
            self.used_peak = self.used

    @contextmanager
    def admitted(
        self,
        need_bytes: int,
        cancel: threading.Event | None = None,
        lean_bytes: int | None = None,
        start_bytes: int | None = None,
    ) -> Iterator[Admission | None]:
        """Yields an `Admission` once admitted (lean when only ``lean_bytes`` fit), or None when ``cancel`` was
        set while the take waited. ``need_bytes`` is the take's bound; it holds ``start_bytes`` (default: the
        bound) at first and grows by `Admission.grow_to`."""
        need = max(0, int(need_bytes))
        lean = None if lean_bytes is None else min(need, max(0, int(lean_bytes)))
        start = need if start_bytes is None else min(need, max(0, int(start_bytes)))
        admission = self._enter(need, lean, cancel, start)
        if admission is None:
            yield None
            return
        try:
            yield admission
        finally:
            with self._condition:
                self._admitted.remove(admission)
                self.used -= admission.held
                self.running -= 1
                self._condition.notify_all()

    def _give_back(self, admission: Admission, nbytes: int) -> None:
        with self._condition:
            given = min(max(0, int(nbytes)), admission.held)
            admission.held -= given
            admission.bound -= given
            self.used -= given
            self.released_total += given
            self._condition.notify_all()

    def _grow(self, admission: Admission, nbytes: int, cancel: threading.Event | None) -> bool:
        with self._condition:
            target = min(int(nbytes), admission.bound)
            thread, waited = threading.get_ident(), False
            while target > admission.held:
                more = target - admission.held
                if self.running == 1 or self._safe(more, grown=admission):
                    admission.held += more
                    self._hold(more)
                    break
                if cancel is not None and cancel.is_set():
                    self._waiting_threads.discard(thread)
                    return False
                self._waiting_threads.add(thread)
                self.grow_waits += not waited
                waited = True
                self._condition.wait(POLL_S)
            self._waiting_threads.discard(thread)
            return True
