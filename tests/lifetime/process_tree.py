"""Find every process a test started, however deep and whoever its parent is now, and wait for them to end.

Each process the test starts gets a unique ``STUDIO_TEST_TAG`` in its environment; every process below it
inherits it (vLLM's engine core and workers, the multiprocessing resource tracker), so a scan of
``/proc/*/environ`` finds them even after they were orphaned (their parent is then 1 or a subreaper)."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

TAG = "STUDIO_TEST_TAG"


def tagged_env(**extra: str) -> tuple[dict[str, str], str]:
    """A copy of this environment with a fresh tag (and ``extra``); returns it and the tag."""
    tag = uuid.uuid4().hex
    return {**os.environ, TAG: tag, **extra}, tag


def tagged(tag: str) -> set[int]:
    """Pids of the live (not zombie) processes whose environment carries ``tag``."""
    needle = f"{TAG}={tag}".encode()
    found = set()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0") and alive(int(entry.name)):
                found.add(int(entry.name))
        except OSError:
            continue
    return found


def spawned(tag: str) -> int:
    """How many of those processes were started by multiprocessing's spawn (the studio's engine, vLLM's
    engine core and workers on a CPU; not the resource tracker)."""
    count = 0
    for pid in tagged(tag):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        count += (
            b"spawn_main" in cmdline
            or cmdline.startswith(b"cosyvoice-studio engine")  # the studio names its engine process
            or cmdline.startswith(b"VLLM::")  # vLLM renames its processes
        )
    return count


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def describe(pids: set[int]) -> str:
    lines = []
    for pid in sorted(pids):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:160]
            ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        except OSError:
            cmd, ppid = "?", "?"
        lines.append(f"{pid} (parent {ppid}): {cmd}")
    return "\n".join(lines)


def wait_until_none_left(tag: str, timeout: float) -> None:
    """Fail unless every process carrying ``tag`` has ended within ``timeout`` seconds (then kill them)."""
    deadline = time.monotonic() + timeout
    left = tagged(tag)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = tagged(tag)
    if left:
        report = describe(left)
        kill_all(tag)
        raise AssertionError(
            f"{len(left)} process(es) outlived their parent after {timeout:.0f} s:\n{report}"
        )


def kill_all(tag: str) -> None:
    """SIGKILL whatever still carries ``tag`` (a test's cleanup)."""
    for pid in tagged(tag):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def wait_for(predicate, timeout: float, what: str, poll: float = 0.2):
    """The first true value of ``predicate()`` within ``timeout`` seconds, else fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")
