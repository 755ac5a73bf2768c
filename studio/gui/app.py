"""Start the Qt application and show the studio window at once; the engine starts in the background.

Logs ``studio ready: window shown in X s`` when the window is up (the packaging smoke test waits for it).
Uncaught exceptions are logged and shown in a dialog instead of killing the studio.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback

log = logging.getLogger("studio.gui")
READY_MESSAGE = "studio ready: window shown in"


def resource(*parts: str):
    """A file shipped inside the package (``studio/resources/...``), wherever and however it is installed."""
    from importlib.resources import files

    return files("studio").joinpath("resources", *parts)


def load_style() -> str:
    """The studio's Qt style sheet; a missing one is logged (the package is incomplete), never fatal."""
    try:
        return resource("studio.qss").read_text(encoding="utf-8")
    except OSError as exc:
        log.warning("the style sheet is missing from the package (%s): the studio looks unstyled", exc)
        return ""


def install_excepthook(parent_getter) -> None:
    """Errors reach the user: log the traceback and show it in a dialog."""
    from PySide6.QtWidgets import QMessageBox

    def hook(kind, value, tb) -> None:
        text = "".join(traceback.format_exception(kind, value, tb))
        log.error("unexpected error:\n%s", text)
        box = QMessageBox(
            QMessageBox.Icon.Critical, "Unexpected error", f"{kind.__name__}: {value}", parent=parent_getter()
        )
        box.setDetailedText(text)
        box.open()

    sys.excepthook = hook


def app_icon():
    """The studio's icon from the package's SVG (an empty icon, logged, if the file is missing)."""
    from PySide6.QtGui import QIcon, QPixmap

    pixmap = QPixmap()
    try:
        pixmap.loadFromData(resource("icons", "cosyvoice-studio.svg").read_bytes(), "SVG")
    except OSError as exc:
        log.warning("the icon is missing from the package (%s)", exc)
    return QIcon(pixmap)


def create_window(settings=None, bridge=None):
    """Build the styled main window (no engine yet); the tests and run_studio share it."""
    from PySide6.QtWidgets import QApplication

    from studio.gui.main_window import MainWindow
    from studio.settings import load_settings

    app = QApplication.instance()
    if app is None:
        raise RuntimeError("create a QApplication first")
    app.setApplicationName("CosyVoice Studio")
    app.setOrganizationName("cosyvoice-studio")
    app.setDesktopFileName("cosyvoice-studio")
    app.setWindowIcon(app_icon())
    app.setStyle("Fusion")  # the same metrics everywhere (and in the tests) under the style sheet
    app.setStyleSheet(load_style())
    return MainWindow(settings if settings is not None else load_settings(), bridge=bridge)


def run_studio(argv: list[str] | None = None) -> int:
    """Entry of ``cosyvoice-studio`` without a subcommand: the window, then the engine."""
    started = time.monotonic()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv)
    try:
        from studio.gui.diagnostics import setup_gui_logging
        from studio.settings import data_dir

        log.info("GUI log: %s", setup_gui_logging(data_dir(create=False) / "logs"))
    except OSError as exc:  # an unwritable data folder: the studio starts anyway and says so
        log.warning("no GUI log file: %s", exc)
    window = None
    install_excepthook(lambda: window)  # before the window exists: a failure building it is shown too
    window = create_window()
    window.show()

    def on_shown() -> None:  # runs once the event loop has put the window on screen
        log.info("%s %.2f s", READY_MESSAGE, time.monotonic() - started)
        window.report_folder_problems()
        window.start_engine()

    QTimer.singleShot(0, on_shown)
    close_on_signals(window)
    return app.exec()


def close_on_signals(window) -> None:
    """Ctrl+C or SIGTERM closes the window properly (engine shut down, settings saved)."""
    import signal

    from PySide6.QtCore import QTimer

    def request_close(signum, _frame) -> None:
        log.info("signal %d: closing the studio", signum)
        QTimer.singleShot(0, window.close)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, request_close)
    # Python runs signal handlers only between bytecodes: wake the interpreter regularly
    heartbeat = QTimer(window)
    heartbeat.timeout.connect(lambda: None)
    heartbeat.start(250)
