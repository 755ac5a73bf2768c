"""Atomic file writes shared by the settings, the take store and saved voices.

A file is written under a unique temporary name in its target's folder, flushed to disk, then renamed
over the target, so a crash or a full disk leaves either the old file or the new one, never half of
one, and two writers never mix their bytes.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(target: Path, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path beside ``target``; when the block succeeds, sync it and rename it over
    ``target``; when it fails, remove it. ``suffix`` lets writers that infer a format from the name
    (soundfile) see the right extension."""
    target = Path(target)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(target: Path, payload: bytes) -> None:
    """Replace ``target`` with ``payload`` atomically."""
    with atomic_path(target) as tmp:
        tmp.write_bytes(payload)
