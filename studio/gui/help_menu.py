"""The Help menu's keyboard-shortcut list (one table: what each key does)."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox, QWidget

#: what the keyboard does
SHORTCUTS = (
    ("Ctrl+Enter", "generate a take"),
    ("Esc", "stop the take, or stop playback"),
    ("Ctrl+O", "import a voice recording"),
    ("Ctrl+E", "export the selected takes"),
    ("Ctrl+,", "settings"),
    ("Ctrl+R", "restart the engine"),
    ("Tab / Shift+Tab", "move between fields"),
    ("F1", "this list"),
    ("Ctrl+Q", "quit"),
)


def shortcuts_box(parent: QWidget | None = None) -> QMessageBox:
    """A message box listing `SHORTCUTS` (not yet shown)."""
    rows = "".join(f"<tr><td><b>{keys}</b></td><td>&nbsp;&nbsp;{what}</td></tr>" for keys, what in SHORTCUTS)
    return QMessageBox(
        QMessageBox.Icon.Information, "Keyboard shortcuts", f"<table>{rows}</table>", parent=parent
    )
