"""The folder the export dialogs start in: the one exported to last, shared by the takes and the Script
export and kept in the settings (the window stores it when ``sig_changed`` fires)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal


class ExportFolder(QObject):
    """The last export folder; ``start`` is where a dialog opens (the home folder while there is none)."""

    sig_changed = Signal(str)
    """An export went to another folder than the last one (its path)."""

    def __init__(self, folder: str | Path = "", parent: QObject | None = None):
        super().__init__(parent)
        self.folder = str(folder)

    @property
    def start(self) -> str:
        """The last export folder while it still exists, else the home folder."""
        return self.folder if self.folder and Path(self.folder).is_dir() else str(Path.home())

    def remember(self, folder: str | Path) -> None:
        folder = str(folder)
        if folder != self.folder:
            self.folder = folder
            self.sig_changed.emit(folder)
