"""Hand a folder to the desktop's file manager (QDesktopServices: xdg-open, Finder, Explorer); where none
opens, the user is told where the file is, with a button that copies its path."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QMessageBox, QWidget


def show_in_file_manager(path: str | Path) -> bool:
    """Open the folder holding ``path`` (or ``path`` itself when it is a folder); False when none opens."""
    target = Path(path)
    folder = target if target.is_dir() else target.parent
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))


def reveal(path: str | Path, parent: QWidget) -> QMessageBox | None:
    """Show ``path`` in the file manager; when none can be opened, a non-blocking message names the path
    and offers to copy it to the clipboard (returned; None when the file manager opened)."""
    if show_in_file_manager(path):
        return None
    box = QMessageBox(
        QMessageBox.Icon.Information,
        "No file manager",
        f"No file manager could be opened on this computer. The file is here:\n\n{path}",
        parent=parent,
    )
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    copy = box.addButton("Copy path", QMessageBox.ButtonRole.ActionRole)
    copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(str(path)))
    box.addButton(QMessageBox.StandardButton.Close)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()
    return box
