"""Thread-safe caches keeping the most recently used values: by count (`RecentlyUsed`, values made from
their keys) or by bytes (`RecentlyUsedBytes`, values that say their size)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

V = TypeVar("V")


class Sized(Protocol):
    nbytes: int


S = TypeVar("S", bound=Sized)


class RecentlyUsed(Generic[V]):
    """At most `capacity` values by key, the least recently used dropped first; counts hits and misses.

    `get` makes a missing value outside the lock, so two first callers of one key may both make it (the
    last one made is kept); a `make` that raises caches nothing.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._lock = threading.Lock()
        self._values: OrderedDict[Hashable, V] = OrderedDict()
        self.hits = self.misses = 0

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        with self._lock:
            found = self._values.get(key)
            if found is not None:
                self._values.move_to_end(key)
                self.hits += 1
                return found
            self.misses += 1
        made = make()
        with self._lock:
            self._values[key] = made
            self._values.move_to_end(key)
            while len(self._values) > self.capacity:
                self._values.popitem(last=False)
        return made

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)


class RecentlyUsedBytes(Generic[S]):
    """Values by key within `max_bytes` (each value's ``nbytes``), the least recently used dropped first;
    counts hits, misses, evictions and values refused for being larger than the whole budget.

    A pinned key (`pin`, once per user; `unpin` when done) is never dropped: a value that would need it
    dropped to fit is not kept instead."""

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self._entries: OrderedDict[Hashable, S] = OrderedDict()
        self._lock = threading.Lock()
        self.nbytes = 0
        self.hits = self.misses = self.evictions = self.rejected = 0
        self._pins: dict[Hashable, int] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        """Whether `key` has an entry (no hit or miss counted, the order unchanged)."""
        with self._lock:
            return key in self._entries

    def stats(self) -> dict:
        with self._lock:
            return {
                "entries": len(self._entries),
                "bytes": self.nbytes,
                "max_bytes": self.max_bytes,
                "hits": self.hits,
                "misses": self.misses,
                "evictions": self.evictions,
                "rejected": self.rejected,
            }

    def get(self, key: Hashable) -> S | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry

    def fits(self, nbytes: int) -> bool:
        """Whether a value of `nbytes` could be kept at all (counts a refusal when not)."""
        if nbytes <= self.max_bytes:
            return True
        with self._lock:
            self.rejected += 1
        return False

    def put(self, key: Hashable, value: S) -> bool:
        """Keep `value` as the most recent, dropping the least recently used until the bytes fit; False
        (nothing kept) when it alone exceeds the budget."""
        if not self.fits(value.nbytes):
            return False
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self.nbytes -= previous.nbytes
            self._entries[key] = value
            self.nbytes += value.nbytes
            while self.nbytes > self.max_bytes:
                victim = next((k for k in self._entries if not self._pins.get(k)), None)
                # None: only pinned values are left (one was replaced under its pinned key); kept until unpinned
                if victim is None:
                    break
                self.nbytes -= self._entries.pop(victim).nbytes
                self.evictions += victim != key
                if victim == key:
                    self.rejected += 1
                    return False
            return True

    def pin(self, key: Hashable) -> bool:
        """Keep `key`'s value until as many `unpin` calls: False (nothing pinned) when it has none."""
        with self._lock:
            if key not in self._entries:
                return False
            self._pins[key] = self._pins.get(key, 0) + 1
            return True

    def unpin(self, key: Hashable) -> None:
        with self._lock:
            left = self._pins.get(key, 0) - 1
            if left > 0:
                self._pins[key] = left
            else:
                self._pins.pop(key, None)

    def pinned(self) -> int:
        """Keys pinned now."""
        with self._lock:
            return len(self._pins)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.nbytes = 0
