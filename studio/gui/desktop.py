"""Hand a folder to the desktop's file manager (QDesktopServices: xdg-open, Finder, Explorer)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices


def show_in_file_manager(path: str | Path) -> bool:
    """Open the folder holding ``path`` (or ``path`` itself when it is a folder); False when none opens."""
    target = Path(path)
    folder = target if target.is_dir() else target.parent
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))
