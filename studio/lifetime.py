"""Processes that end with their parent, whatever ends it (SIGTERM, SIGKILL, a crash, a quit during load).

A child process calls ``die_with_parent()`` first thing: a watchdog thread waits on the parent (a pidfd;
polling ``getppid()`` where there is none) and then sends this process SIGTERM, so vLLM's engine core shuts
down in order, and SIGKILL after ``grace`` seconds; a process that leads its own group ends the whole group.

vLLM starts its engine core and workers itself, as ``multiprocessing`` children; the studio's
vLLM plugin, which vLLM loads in each of them, calls ``arm_if_child()`` and ``watch_forks()`` (a
forked child inherits the loaded plugin and does not load it again). The multiprocessing resource
tracker needs nothing: it exits once every process holding its pipe has ended.

A parent ends what it started with ``end_group`` (a child that leads its own process group: the studio's
engine process and everything vLLM started under it) or ``end_children`` (its multiprocessing children).
No Qt, no torch: the GUI, the engine and the server all use it.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger(__name__)

GRACE_S = (
    5.0  # how long an orphan's SIGTERM gets (vLLM's engine core unlinks its shared memory) before SIGKILL
)
POLL_S = 0.5  # how often the watchdog asks for its parent where there is no pidfd

_armed_in: int | None = None  # the pid of the process whose watchdog runs (a forked copy must arm again)
_forks_watched = False
_forker: int | None = None  # the pid of the process forking now (set just before each fork)


def set_name(name: str) -> None:
    """Name this process ``name``: its command line (``ps aux``, ``ps -o args``, System Monitor) and its
    short name (``ps -o comm``, ``top``; Linux keeps 15 bytes of it).

    The name takes the place of the old command line only: the process's environment stays where it was,
    readable in ``/proc/<pid>/environ`` (setproctitle's ``SPT_NOENV``, read when it first renames)."""
    import setproctitle  # a small C extension, only for the processes that name themselves

    had = os.environ.get("SPT_NOENV")
    os.environ["SPT_NOENV"] = "1"
    try:
        setproctitle.setproctitle(name)
    finally:
        if had is None:
            del os.environ["SPT_NOENV"]
        else:
            os.environ["SPT_NOENV"] = had


def expected_parent() -> int:
    """The pid of the process that started this one (a multiprocessing child knows it even once orphaned)."""
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None and parent.pid else os.getppid()


def die_with_parent(parent_pid: int | None = None, *, grace: float = GRACE_S) -> None:
    """End this process when ``parent_pid`` (default: the process that started it) ends. Idempotent.

    A process that leads its own process group (``lead_group``) ends the whole group: its children too,
    also those that cannot watch for themselves yet (vLLM's engine core before its handshake)."""
    global _armed_in
    if _armed_in == os.getpid():  # no lock: a lock held by another thread at a fork would stay held
        return
    _armed_in = os.getpid()
    parent_pid = parent_pid or expected_parent()
    threading.Thread(target=_watch, args=(parent_pid, grace), name="parent-watchdog", daemon=True).start()


def _leads_group() -> bool:
    return os.getpgrp() == os.getpid()


def _watch(parent_pid: int, grace: float) -> None:
    if os.getppid() != parent_pid:  # it died before this process could ask to follow it
        _end_self(parent_pid, grace)
    try:
        pidfd = os.pidfd_open(parent_pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None and os.getppid() == parent_pid:  # the pidfd names the parent, not a reused pid
        select.select([pidfd], [], [])  # readable once the parent has ended
    else:
        while os.getppid() == parent_pid:
            time.sleep(POLL_S)
    _end_self(parent_pid, grace)


def _end_self(parent_pid: int, grace: float) -> None:
    log.warning("parent process %d has ended; ending process %d", parent_pid, os.getpid())
    if _leads_group():
        _end_own_group(grace)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace)
    os.kill(os.getpid(), signal.SIGKILL)


def group_members(pgid: int) -> list[int]:
    """The pids of process group ``pgid`` (from ``/proc``; empty where there is none)."""
    members = []
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:  # after the name: state, ppid, pgrp
            members.append(int(entry.name))
    return members


def _end_own_group(grace: float) -> None:
    """SIGTERM every other process of this process's group, SIGKILL what is left after ``grace``, then
    SIGKILL the group (this process included)."""
    me = os.getpid()
    others = [pid for pid in group_members(me) if pid != me]
    for pid in others:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(pid != me for pid in group_members(me)):
        time.sleep(0.1)
    signal_group(me, signal.SIGKILL)


def arm_if_spawning() -> bool:
    """In a child that ``multiprocessing`` is still preparing (spawn or forkserver: before anything else it
    imports the parent's main module, and with it this package), die with the parent from now on. vLLM's
    engine core loads the studio's plugin (`arm_if_child`) only seconds later, after its own imports; a
    ``serve`` killed meanwhile left it running. Returns whether this process is one."""
    if not getattr(multiprocessing.current_process(), "_inheriting", False):
        return False
    die_with_parent(os.getppid())  # its parent_process() is not set yet: the process that started it
    return True


def arm_if_child() -> bool:
    """In a process started by ``multiprocessing`` (vLLM's engine core and workers are), die with the
    parent. vLLM ends them when it shuts down in order; this covers every other way its parent ends.
    Returns whether this process is one."""
    if multiprocessing.parent_process() is None:
        return False
    die_with_parent()
    return True


def watch_forks() -> None:
    """Make every process forked from this one (from now on) die with this one. Idempotent."""
    global _forks_watched
    if _forks_watched or not hasattr(os, "register_at_fork"):
        return
    _forks_watched = True
    os.register_at_fork(before=_before_fork, after_in_child=lambda: die_with_parent(_forker))


def _before_fork() -> None:
    global _forker
    _forker = os.getpid()


def lead_group() -> None:
    """Make this process the leader of a new process group, which its children join: ``end_group``
    can then end them all. (A new group, not a session: the terminal stays the parent's.)"""
    try:
        os.setpgid(0, 0)
    except OSError:
        log.warning("could not start a process group", exc_info=True)


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to process group ``pgid``; False when the group has no process left."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def end_group(pid: int, reaped: Callable[[float], bool], grace: float = GRACE_S) -> None:
    """End process ``pid`` and, when it leads its own process group, every process of that group: SIGTERM,
    then SIGKILL to what remains after ``grace`` seconds. ``reaped(timeout)`` waits for ``pid`` (our child)
    to be reaped and says whether it was (a zombie still counts as a member of the group)."""
    if not signal_group(pid, signal.SIGTERM):  # not (or no longer) a group of its own
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    done = reaped(grace)
    while signal_group(pid, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not done or signal_group(pid, 0):
        log.warning("process group %d did not end within %.0f s; killing it", pid, grace)
        signal_group(pid, signal.SIGKILL)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        reaped(grace)


def end_children(grace: float = GRACE_S) -> None:
    """End this process's multiprocessing children (vLLM's engine core, even one still starting): SIGTERM,
    then SIGKILL after ``grace`` seconds. Their own children follow them (``die_with_parent``)."""
    children = multiprocessing.active_children()
    for child in children:
        log.info("ending %s (pid %s)", child.name, child.pid)
        child.terminate()
    deadline = time.monotonic() + grace
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.exitcode is None:
            log.warning("%s (pid %s) did not end within %.0f s; killing it", child.name, child.pid, grace)
            child.kill()
            child.join(5)


def exit_now(code: int = 0) -> None:
    """End this process at once with ``code`` after flushing the logs and standard streams: for a
    process whose orderly shutdown is done, where the interpreter's teardown of native threads still
    running (a model still loading) could hang or abort."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


@contextlib.contextmanager
def sigterm_exits(code: int = 128 + signal.SIGTERM) -> Iterator[None]:
    """While inside, SIGTERM raises ``SystemExit(code)`` in the main thread, so ``finally`` blocks run
    (a model is closed); on the way out, by any exception, the multiprocessing children still running
    (vLLM's engine core while it starts) are ended."""
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_exit(code)) if in_main else None
    try:
        yield
    except BaseException:
        end_children()
        raise
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def _raise_exit(code: int) -> Callable[[int, Any], None]:
    def handler(sig: int, frame: Any) -> None:
        log.info("%s: stopping", signal.Signals(sig).name)
        raise SystemExit(code)

    return handler
