"""Reports the commands write on request (``--json FILE``): whole or not at all, failures in one line."""

from __future__ import annotations

import sys
from pathlib import Path


def write_report(path: str | Path, text: str) -> bool:
    """Write ``text`` to ``path`` atomically (a full disk leaves no empty or half file); on failure say why
    on stderr, naming the file, and return False."""
    from studio.atomic_files import atomic_write_bytes

    try:
        atomic_write_bytes(Path(path), text.encode("utf-8"))
    except OSError as exc:
        print(f"error: the report was not written to {path}: {exc}", file=sys.stderr)
        return False
    return True
