"""What a bug report needs: the GUI's own log beside the engine's, and one zip of everything.

``setup_gui_logging`` sends the GUI's log records, Qt's messages, uncaught exceptions of any thread and
native crashes (faulthandler) to ``<data>/logs/gui.log`` (and ``gui.crash``). ``write_diagnostics`` zips
the logs (GUI and engine, with the kept earlier runs), the settings and ``doctor --json`` (run as its own
process: the GUI never imports torch) into one file for Help -> Save diagnostics…
"""

from __future__ import annotations

import faulthandler
import json
import logging
import logging.handlers
import platform
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

log = logging.getLogger("studio.gui")
LOG_FORMAT = "%(asctime)s %(process)d %(threadName)s %(levelname)s %(name)s: %(message)s"


def setup_gui_logging(log_dir: Path) -> Path:
    """Log the GUI to ``log_dir/gui.log`` (rotating) with Qt messages, thread exceptions and crash dumps."""
    from PySide6.QtCore import QtMsgType, qInstallMessageHandler

    log_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.handlers.RotatingFileHandler(log_dir / "gui.log", maxBytes=2_000_000, backupCount=2)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logging.getLogger().addHandler(handler)
    crash = open(log_dir / "gui.crash", "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the studio
    faulthandler.enable(crash)
    levels = {
        QtMsgType.QtDebugMsg: logging.DEBUG,
        QtMsgType.QtInfoMsg: logging.INFO,
        QtMsgType.QtWarningMsg: logging.WARNING,
        QtMsgType.QtCriticalMsg: logging.ERROR,
        QtMsgType.QtFatalMsg: logging.CRITICAL,
    }
    qt_log = logging.getLogger("qt")
    qInstallMessageHandler(
        lambda kind, _context, message: qt_log.log(levels.get(kind, logging.INFO), message)
    )

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        log.error(
            "uncaught exception in thread %s",
            getattr(args.thread, "name", "?"),
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )

    threading.excepthook = thread_hook
    return log_dir / "gui.log"


def doctor_findings(timeout: float = 120.0) -> list | dict:
    """``cosyvoice-studio doctor --json`` as data (or what went wrong running it)."""
    from studio.launch import studio_command

    try:
        done = subprocess.run(
            studio_command("doctor", "--json"), capture_output=True, text=True, timeout=timeout
        )
        return json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return {"error": f"doctor could not run: {exc}"}


def write_diagnostics(
    target: Path, data_dir: Path, settings: dict, doctor: list | dict | None = None
) -> Path:
    """One zip: every log under ``data_dir/logs``, the settings, versions and the doctor's findings."""
    from studio import __version__

    target = Path(target)
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted((data_dir / "logs").glob("*")):
            if path.is_file():
                archive.write(path, f"logs/{path.name}")
        archive.writestr("settings.json", json.dumps(settings, indent=2, default=str))
        about = {"studio": __version__, "python": sys.version, "platform": platform.platform()}
        archive.writestr("about.json", json.dumps(about, indent=2))
        archive.writestr(
            "doctor.json", json.dumps(doctor if doctor is not None else doctor_findings(), indent=2)
        )
    return target
