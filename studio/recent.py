"""A thread-safe cache of values made from their keys, keeping the most recently used."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


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
