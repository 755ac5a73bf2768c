"""The engine process's hygiene, apart from its work: its log and raw output (`setup_logging`), glibc's
malloc bounded and freed memory given back (`configure_allocator`, `release_memory`), and the studio's pipes
and log kept out of the processes forked from it (`keep_from_forks`)."""

from __future__ import annotations

import ctypes
import faulthandler
import functools
import logging
import logging.handlers
import os
import sys
from pathlib import Path
from typing import Any

from studio.engine.raw_output import output_header, output_path, rotate_output

LOG_FORMAT = "%(asctime)s %(process)d %(threadName)s %(levelname)s %(name)s: %(message)s"


def setup_logging(log_path: str) -> Any:
    """Log to a rotating file; send raw stdout/stderr (vLLM, C++ errors, fatal-signal tracebacks) to a
    ``.out`` file beside it, which starts with a line naming this process. The previous runs' ``.out``
    files are kept as ``.out.1`` and ``.out.2`` (the crash a restart follows). Returns the open file."""
    path = Path(log_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=2_000_000, backupCount=3, encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    mode = "w" if rotate_output(output_path(path)) else "a"  # never truncate a file that was not kept
    output = open(output_path(path), mode, encoding="utf-8", buffering=1)  # noqa: SIM115 - lives as long as the process
    output.write(output_header(os.getpid()) + "\n")
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os.dup2(output.fileno(), 1)
    os.dup2(output.fileno(), 2)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    faulthandler.enable(output)
    return output


ARENA_MAX = 2  # glibc's malloc arenas (its default: 8 per core)
M_ARENA_MAX = -8  # mallopt's parameter number for it


@functools.cache
def _libc_function(name: str, *argtypes: Any) -> Any:
    """A glibc function through ctypes, or None where there is none (macOS, Windows, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    function.argtypes, function.restype = list(argtypes), ctypes.c_int
    return function


def configure_allocator() -> None:
    """Bound glibc's malloc arenas to ``ARENA_MAX`` unless the user set ``MALLOC_ARENA_MAX``.

    Concurrent takes otherwise get an arena each, whose freed memory stays resident (RSS grew 0.8 ->
    2.5 GB over bursts of 8 takes). Called first thing in the engine process, before torch starts its
    threads: set for this process (mallopt) and in its environment, which vLLM's processes inherit;
    the studio's own process and environment are left alone."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return  # the user's: glibc read it when the process started
    os.environ["MALLOC_ARENA_MAX"] = str(ARENA_MAX)
    mallopt = _libc_function("mallopt", ctypes.c_int, ctypes.c_int)
    if mallopt is not None:
        mallopt(M_ARENA_MAX, ARENA_MAX)


def release_memory() -> None:
    """Give the memory that finished takes freed back to the system (glibc's ``malloc_trim``, a few ms;
    a no-op on other C libraries). The engine calls it when it has been idle for a while, and while busy."""
    trim = _libc_function("malloc_trim", ctypes.c_size_t)
    if trim is not None:
        trim(0)


def keep_from_forks(*connections: Any) -> None:
    """In every process forked from this one (vLLM's engine core is), close the studio's pipes and stop
    writing this process's log: only this process talks to the studio, a child holding the pipes open
    would hide this process's exit, and two writers would tangle the rotating log. The child's own output
    still reaches ``engine.out`` through stdout and stderr."""
    if not hasattr(os, "register_at_fork"):
        return
    kept = [(c.fileno(), _identity(c.fileno())) for c in connections]
    handlers = list(logging.getLogger().handlers)

    def in_child() -> None:
        for fd, identity in kept:
            if _identity(fd) == identity:  # the same pipe, not a later file given the same number
                os.close(fd)
        root = logging.getLogger()
        for handler in handlers:
            root.removeHandler(handler)
        root.addHandler(logging.StreamHandler(sys.stderr))

    os.register_at_fork(after_in_child=in_child)


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    return info.st_dev, info.st_ino
