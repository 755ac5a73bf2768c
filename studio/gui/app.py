"""Start the Qt application and show the studio window."""

from __future__ import annotations

import sys


def run_studio(argv: list[str] | None = None) -> int:
    from PySide6.QtWidgets import QApplication, QLabel, QMainWindow

    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv)
    window = QMainWindow()
    window.setWindowTitle("CosyVoice Studio")
    window.setCentralWidget(QLabel("CosyVoice Studio — the studio window is being built."))
    window.resize(1100, 720)
    window.show()
    return app.exec()
