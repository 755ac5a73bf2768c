"""Atomic file writes shared by the settings, the take store and saved voices, and plain-words disk errors.

A file is written under a unique temporary name in its target's folder, flushed to disk, then renamed
over the target, so a crash or a full disk leaves either the old file or the new one, never half of
one, and two writers never mix their bytes. An operating-system failure on the way becomes a
`DiskError` that names the folder and the cause (ENOSPC, EACCES, EROFS, ...) in words a user can act on.
"""

from __future__ import annotations

import errno
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: errno -> (what is wrong with the folder, what the user can do)
_CAUSES = {
    errno.ENOSPC: ("the disk holding {folder} is full", "free some space or choose another folder"),
    errno.EDQUOT: ("the disk quota for {folder} is used up", "free some space or choose another folder"),
    errno.EACCES: ("no permission to write in {folder}", "choose another folder or fix its permissions"),
    errno.EPERM: ("no permission to write in {folder}", "choose another folder or fix its permissions"),
    errno.EROFS: ("{folder} is on a read-only disk", "choose another folder"),
    errno.ENOENT: ("the folder {folder} does not exist (an unplugged drive?)", "choose another folder"),
    errno.ENOTDIR: ("{folder} is a file, not a folder", "choose another folder"),
}


class DiskError(OSError):
    """Writing under ``folder`` failed; ``reason`` and ``advice`` are plain sentences, ``cause`` the errno name."""

    def __init__(self, code: int | None, folder: Path, reason: str, advice: str):
        super().__init__(code, reason, str(folder))
        self.folder = folder
        self.reason = reason
        self.advice = advice

    @property
    def cause(self) -> str:
        return errno.errorcode.get(self.errno or 0, "EIO")

    def __str__(self) -> str:
        return f"{self.reason} ({self.cause})"

    def explain(self, consequence: str) -> str:
        """One sentence for the user: what is wrong, what it meant, what to do.

        ``explain("the voice was not saved")`` -> "The disk holding /x is full (ENOSPC): the voice was
        not saved; free some space or choose another folder."
        """
        return f"{self.reason[:1].upper()}{self.reason[1:]} ({self.cause}): {consequence}; {self.advice}."


def disk_error(exc: OSError, folder: str | os.PathLike[str]) -> DiskError:
    """The `DiskError` for ``exc``, raised while writing in (or creating) ``folder``."""
    if isinstance(exc, DiskError):
        return exc
    folder = Path(folder)
    if exc.errno == errno.ENOTDIR:  # name the file that stands where a folder should be
        folder = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), folder)
    reason, advice = _CAUSES.get(exc.errno, ("cannot write in {folder}: " + (exc.strerror or str(exc)), ""))
    return DiskError(exc.errno, folder, reason.format(folder=folder), advice or "choose another folder")


#: A writer's temporary file: hidden, beside its target, named after it and the writing process
#: (``.take.wav.4242-k3j9x0ab.part``), so a later start can tell one whose writer was killed.
_TEMP_NAME = re.compile(r"^\..+\.(?P<pid>\d+)-[a-z0-9_]{8}\.(?:part|tmp)$")
#: An older writer's name without its process (``.take.wav.k3j9x0ab.part``): removed once this old.
_UNOWNED_PART = re.compile(r"^\..+\.[a-z0-9_]{8}\.part$")
UNOWNED_PART_AGE_S = 24 * 3600


def temp_prefix(target: Path) -> str:
    """The ``mkstemp`` prefix of a temporary file for ``target``: hidden, naming the target and this process."""
    return f".{target.name}.{os.getpid()}-"


def _process_gone(pid: int) -> bool:
    if pid == os.getpid():
        return False
    if sys.platform == "win32":  # os.kill(pid, 0) is not a probe there; age decides instead
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process, alive
        return False
    return False


def remove_leftover_parts(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files a killed writer (a SIGKILL during an export) left in ``folder``.

    A file naming its process goes when that process is gone; an older name without one when it is a day
    old. Writers in progress keep theirs. Returns what was removed; an unreadable folder removes nothing.
    """
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        if not entry.name.startswith("."):
            continue
        owned = _TEMP_NAME.match(entry.name)
        try:
            if owned:
                stale = _process_gone(int(owned["pid"]))
            else:
                stale = (
                    bool(_UNOWNED_PART.match(entry.name)) and now - entry.stat().st_mtime > UNOWNED_PART_AGE_S
                )
            if stale and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


def umask_mode(base: int = 0o666) -> int:
    """``base`` less the process's umask: the mode a plainly created file would get (mkstemp's is 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return base & ~mask


def ensure_folder(folder: str | os.PathLike[str]) -> Path:
    """Create ``folder`` (and its parents) if needed; a failure is a `DiskError` naming it."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise disk_error(exc, folder) from exc
    return folder


@contextmanager
def atomic_path(target: Path, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path beside ``target``; when the block succeeds, sync it and rename it over
    ``target``; when it fails, remove it. ``suffix`` lets writers that infer a format from the name
    (soundfile) see the right extension. OS errors with an errno become `DiskError`s."""
    target = Path(target)
    try:
        fd, name = tempfile.mkstemp(prefix=temp_prefix(target), suffix=suffix, dir=target.parent)
    except OSError as exc:
        raise disk_error(exc, target.parent) from exc
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, umask_mode())
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno is None:
            raise
        raise disk_error(exc, target.parent) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(target: Path, payload: bytes) -> None:
    """Replace ``target`` with ``payload`` atomically."""
    with atomic_path(target) as tmp:
        tmp.write_bytes(payload)


def write_new_files(files: list[tuple[Path, bytes]]) -> None:
    """Create several new files as one unit: all appear, or none does (the last is the commit marker).

    Every file is first written in full under a temporary name beside its target (so a full disk fails
    before anything is visible), then renamed into place in order; a failure removes what was placed.
    """
    temps: list[Path] = []
    placed: list[Path] = []
    folder = files[0][0].parent if files else Path(".")
    try:
        for target, payload in files:
            fd, name = tempfile.mkstemp(prefix=temp_prefix(target), suffix=".part", dir=target.parent)
            temps.append(Path(name))
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temps[-1], umask_mode())
        for (target, _payload), temp in zip(files, temps, strict=True):
            os.replace(temp, target)
            placed.append(target)
    except OSError as exc:
        for path in (*temps, *placed):
            path.unlink(missing_ok=True)
        raise disk_error(exc, folder) from exc
    except BaseException:
        for path in (*temps, *placed):
            path.unlink(missing_ok=True)
        raise
