"""The Help menu: the keyboard shortcuts, and Save diagnostics… (logs + settings + doctor in one zip)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from studio.gui.diagnostics import write_diagnostics
from studio.settings import data_dir

#: what the keyboard does
SHORTCUTS = (
    ("Ctrl+Enter", "generate a take"),
    ("Space", "play or pause the preview, or the Script tab's line (a focused button: press it)"),
    ("Esc", "stop the take, or stop playback (in the Script tab too)"),
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


class HelpMenu(QObject):
    """Adds the Help menu to ``window`` (a MainWindow) and runs its entries."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window
        menu = window.menuBar().addMenu("&Help")
        self.shortcuts_action = QAction("&Keyboard shortcuts", window, shortcut=QKeySequence("F1"))
        self.shortcuts_action.triggered.connect(self.show_shortcuts)
        self.diagnostics_action = QAction("Save &diagnostics…", window)
        self.diagnostics_action.triggered.connect(lambda: self.save_diagnostics())
        menu.addAction(self.shortcuts_action)
        menu.addAction(self.diagnostics_action)

    def show_shortcuts(self) -> QMessageBox:
        """The keyboard shortcuts, in a non-blocking box."""
        return self.window.open_notice(shortcuts_box(self.window))

    def save_diagnostics(self, target: str | Path | None = None) -> None:
        """Logs, settings and doctor's findings in one zip for a bug report (doctor runs in the background)."""
        if target is None:
            target, _ = QFileDialog.getSaveFileName(
                self.window, "Save diagnostics", "cosyvoice-studio-diagnostics.zip"
            )
            if not target:
                return
        self.window.show_message("Collecting diagnostics (running doctor)…")
        self.window.jobs.submit(
            write_diagnostics,
            Path(target),
            data_dir(create=False),
            self.window.settings.to_dict(),
            callback=self._on_saved,
        )

    def _on_saved(self, result=None, error=None) -> None:
        self.window.show_message(
            f"Diagnostics saved to {result}" if error is None else f"Diagnostics failed: {error}"
        )
