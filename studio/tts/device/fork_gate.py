"""Wait for a fork before touching the GPU: vLLM forks its engine core only while CUDA is untouched here.

vLLM starts its engine-core process by forking when this process has not initialised CUDA, and by
spawning a fresh interpreter (which imports torch and vLLM again: ~20 s on the H200) when it has. So the
studio starts vLLM first and loads its own weights meanwhile, on another thread that waits at a
`ForkGate` until vLLM's process exists. The gate opens when the thread that armed it forks
(``os.register_at_fork``; forks of other threads do not count), or when `open()` is called (the start
ended without forking, or failed). No torch here: the gate is plain threading.
"""

from __future__ import annotations

import os
import threading
import weakref

_armed: weakref.WeakSet[ForkGate] = weakref.WeakSet()
_armed_lock = threading.Lock()


class ForkGate:
    """Closed until the arming thread forks (or `open()`); ``armed=False`` makes an open gate."""

    def __init__(self, armed: bool = True) -> None:
        self._opened = threading.Event()
        self._thread = threading.get_ident()
        self.forked = False  # whether a fork of the arming thread opened it
        if armed:
            with _armed_lock:
                _armed.add(self)
        else:
            self._opened.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the gate is open; False when ``timeout`` passed first."""
        return self._opened.wait(timeout)

    def is_open(self) -> bool:
        return self._opened.is_set()

    def open(self) -> None:
        with _armed_lock:
            _armed.discard(self)
        self._opened.set()

    def _after_fork(self) -> None:
        if threading.get_ident() == self._thread and not self._opened.is_set():
            self.forked = True
            self.open()


def _after_fork_in_parent() -> None:
    with _armed_lock:
        gates = list(_armed)
    for gate in gates:
        gate._after_fork()


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere nothing forks and armed gates wait for open()
    os.register_at_fork(after_in_parent=_after_fork_in_parent)
