"""Admission of takes against the memory their states need, by the banker's algorithm: a take holds what its
state needs now and grows its holding before each chunk; it never fails for memory and never deadlocks.

A take is admitted with a small holding and its bound (the most it can ever need). The gate keeps the
system *safe*: ordering the running takes by age, for every take i, ``bound_i + sum(held_j, j younger)``
fits the capacity, so the oldest can always grow to its bound and finish, then the next, and so on. A
growth or an admission that would make the system unsafe is refused: a refused growth defers the take's
next chunk (it retries when memory is released, `generation`), a refused admission queues (first come,
first served; it also waits while a running take's growth is deferred: running takes come first). A take
whose bound exceeds the whole capacity runs alone. A queued take that is cancelled leaves the queue at once.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

POLL_S = 0.05


class Holding:
    """One admitted take's reservation: `held` bytes now, at most `bound`; oldest first by `seq`."""

    def __init__(self, gate: TakeGate, seq: int, held: int, bound: int):
        self.gate, self.seq, self.held, self.bound = gate, seq, held, bound
        self.refused_at: int | None = None  # the gate's generation when its last growth was refused
        self.deferred = False  # a growth was refused and has not succeeded since
        self.need_at: Callable[[int], int] | None = (
            None  # bytes its state holds at a frame (set by the owner)
        )

    def need_for(self, frames: int) -> int:
        """The bytes to hold before the state grows to `frames` frames (never past the bound)."""
        return self.held if self.need_at is None else min(self.bound, self.need_at(frames))

    def try_grow(self, need: int) -> bool:
        return self.gate.try_grow(self, need)

    def grow(self, need: int, cancel: threading.Event | None = None) -> bool:
        return self.gate.grow(self, need, cancel)

    def blocked(self) -> bool:
        """Its last growth was refused and no memory was released since (retrying is pointless)."""
        return self.deferred and self.refused_at == self.gate.generation

    def __repr__(self) -> str:
        return f"Holding(seq={self.seq}, held={self.held}, bound={self.bound})"


class TakeGate:
    """``admitted(bytes, cancel, bound)`` holds a take until it is safe to run; `Holding.grow` before chunks."""

    def __init__(self, capacity_bytes: int):
        if capacity_bytes <= 0:
            raise ValueError("a take gate needs a positive capacity")
        self.capacity = int(capacity_bytes)
        self.used = 0
        self._holdings: dict[int, Holding] = {}  # by seq: insertion order is age order
        self._queue: deque[int] = deque()
        self._tickets = itertools.count()
        self._condition = threading.Condition()
        self._listeners: list[Callable[[], None]] = []
        self.generation = 0  # bumped whenever memory is released: refused growths may succeed again
        self.queued_total = 0  # takes that had to wait for admission (counters for bench and tests)
        self.deferred_total = 0  # growths refused (a chunk deferred)
        self.peak_running = 0

    # -- what bench and metrics read ---------------------------------------------------------------
    @property
    def running(self) -> int:
        return len(self._holdings)

    @property
    def waiting(self) -> int:
        """Takes waiting for admission."""
        with self._condition:
            return len(self._queue)

    @property
    def deferred(self) -> int:
        """Running takes whose next chunk waits for memory."""
        with self._condition:
            return sum(h.deferred for h in self._holdings.values())

    def listen(self, callback: Callable[[], None]) -> None:
        """Call `callback()` (outside the gate's lock) whenever memory is released."""
        with self._condition:
            if callback not in self._listeners:
                self._listeners.append(callback)

    # -- the safety rule -------------------------------------------------------------------------
    def _safe(
        self, change: Holding | None = None, held: int = 0, extra: tuple[int, int] | None = None
    ) -> bool:
        """Whether the running takes (with `change` holding `held`, and a new youngest `extra` = (held,
        bound)) can all finish oldest first: each one's bound beside what the younger ones hold fits."""
        takes = [(h.bound, held if h is change else h.held) for h in self._holdings.values()]
        if extra is not None:
            takes.append((extra[1], extra[0]))
        if len(takes) <= 1:
            return True  # alone, a take has the whole card (one larger than it runs alone, as it would)
        younger = 0
        for bound, holds in reversed(takes):
            if max(bound, holds) + younger > self.capacity:
                return False
            younger += holds
        return True

    # -- admission -------------------------------------------------------------------------------
    def admit(
        self, need: int, bound: int | None = None, cancel: threading.Event | None = None
    ) -> Holding | None:
        """A holding of `need` bytes (at most `bound` ever) once safe; None when `cancel` was set meanwhile."""
        need = max(0, int(need))
        bound = need if bound is None else max(need, int(bound))
        with self._condition:
            ticket = next(self._tickets)
            self._queue.append(ticket)
            waited = False
            while not (
                self._queue[0] == ticket
                and not any(h.deferred for h in self._holdings.values())
                and self._safe(extra=(need, bound))
            ):
                if cancel is not None and cancel.is_set():
                    self._queue.remove(ticket)
                    self._condition.notify_all()
                    return None
                waited = True
                self._condition.wait(POLL_S)
            self._queue.popleft()
            holding = self._holdings[ticket] = Holding(self, ticket, need, bound)
            self.used += need
            self.queued_total += waited
            self.peak_running = max(self.peak_running, len(self._holdings))
            self._condition.notify_all()  # the next in line may be safe too
            return holding

    @contextmanager
    def admitted(
        self, need_bytes: int, cancel: threading.Event | None = None, bound: int | None = None
    ) -> Iterator[Holding | bool]:
        """Yields the take's `Holding` once admitted (released at the end), or False when ``cancel`` was set
        while it waited. Without `bound` the take holds `need_bytes` from the start (its bound)."""
        holding = self.admit(need_bytes, bound, cancel)
        if holding is None:
            yield False
            return
        try:
            yield holding
        finally:
            self.release(holding)

    # -- growth and release ----------------------------------------------------------------------
    def try_grow(self, holding: Holding, need: int) -> bool:
        """Hold `need` bytes now if that keeps the system safe; else the take is deferred (False)."""
        with self._condition:
            need = int(need)
            if need <= holding.held:
                return True
            if holding.seq not in self._holdings:
                raise RuntimeError("a released take cannot grow")
            if not self._safe(holding, need):
                self.deferred_total += not holding.deferred
                holding.refused_at, holding.deferred = self.generation, True
                return False
            self.used += need - holding.held
            holding.held, holding.bound = need, max(holding.bound, need)
            holding.deferred = False
            return True

    def grow(self, holding: Holding, need: int, cancel: threading.Event | None = None) -> bool:
        """`try_grow`, waiting until it succeeds; False when `cancel` was set meanwhile."""
        with self._condition:
            while not self.try_grow(holding, need):
                if cancel is not None and cancel.is_set():
                    return False
                self._condition.wait(POLL_S)
            return True

    def release(self, holding: Holding) -> None:
        """The take ended (finished, cancelled or failed): all it held is free; waiters are woken."""
        with self._condition:
            if self._holdings.pop(holding.seq, None) is None:
                return
            self.used -= holding.held
            holding.held = 0
            self.generation += 1
            self._condition.notify_all()
            listeners = list(self._listeners)
        for callback in listeners:
            callback()
