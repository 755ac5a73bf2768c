"""A bug report in one file: the GUI keeps a log of its own (records, Qt messages, thread exceptions) beside
the engine's, and Help -> Save diagnostics zips the logs, the settings and doctor's findings."""

from __future__ import annotations

import json
import logging
import threading
import zipfile

import pytest

from studio.settings import Settings

pytestmark = pytest.mark.gui


def test_the_gui_log_gets_records_qt_messages_and_thread_exceptions(tmp_path, qapp):
    import faulthandler

    from PySide6.QtCore import qInstallMessageHandler, qWarning

    from studio.gui.diagnostics import setup_gui_logging

    root = logging.getLogger()
    handlers, hook = list(root.handlers), threading.excepthook
    level = root.level
    root.setLevel(logging.INFO)
    try:
        path = setup_gui_logging(tmp_path / "logs")
        logging.getLogger("studio.gui").info("window shown")
        qWarning("a Qt warning")
        thread = threading.Thread(target=lambda: 1 / 0, name="a-worker")
        thread.start()
        thread.join()
        for handler in root.handlers:
            handler.flush()
        text = path.read_text()
        assert "window shown" in text and "a Qt warning" in text
        assert "uncaught exception in thread a-worker" in text and "ZeroDivisionError" in text
        assert (tmp_path / "logs" / "gui.crash").exists()
    finally:
        for handler in set(root.handlers) - set(handlers):
            root.removeHandler(handler)
            handler.close()
        root.setLevel(level)
        threading.excepthook = hook
        qInstallMessageHandler(None)
        faulthandler.disable()


def test_save_diagnostics_zips_logs_settings_and_doctor(qtbot, tmp_path, monkeypatch):
    from studio.gui.app import create_window
    from studio.settings import data_dir

    logs = data_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "engine.log").write_text("engine line\n")
    (logs / "engine.out.1").write_text("Fatal Python error: Segmentation fault\n")
    window = create_window(Settings(model_dir=""))
    qtbot.addWidget(window)
    monkeypatch.setattr(window, "start_engine", lambda: None)
    target = tmp_path / "report.zip"
    with qtbot.waitSignal(window.statusBar().messageChanged, timeout=180_000,
                          check_params_cb=lambda text: "Diagnostics saved" in text):  # fmt: skip
        window.help.save_diagnostics(target)
    with zipfile.ZipFile(target) as archive:
        names = set(archive.namelist())
        assert {"logs/engine.log", "logs/engine.out.1", "settings.json", "about.json", "doctor.json"} <= names
        checks = json.loads(archive.read("doctor.json"))
        assert isinstance(checks, list) and {c["name"] for c in checks} >= {"python", "model"}
        assert json.loads(archive.read("settings.json"))["model_dir"] == ""
    window.shutdown()
