"""GUI test set-up: isolated config/data folders, a PulseAudio null sink/source when PulseAudio is
installed, and napari's rule: a test that leaves a QThread, a QTimer or one of our threads running fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import weakref

import pytest

pytest.importorskip("PySide6.QtMultimedia")


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path, monkeypatch, offline_hub):
    monkeypatch.setenv("STUDIO_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("STUDIO_DATA_DIR", str(tmp_path / "data"))
    return tmp_path


@pytest.fixture(scope="session", autouse=True)
def pulse_null_devices(tmp_path_factory):
    """Start a private PulseAudio daemon with one null sink and one null source (real audio devices
    on a headless machine). Must run before the QApplication exists, hence session + autouse."""
    if shutil.which("pulseaudio") is None or os.environ.get("STUDIO_TEST_NO_PULSE"):
        yield None
        return
    runtime = tmp_path_factory.mktemp("pulse")
    env = {**os.environ, "PULSE_RUNTIME_PATH": str(runtime), "HOME": str(runtime)}
    started = subprocess.run(
        ["pulseaudio", "--daemonize=yes", "--exit-idle-time=-1", "-n", "--disable-shm=yes",
         "--load=module-null-sink sink_name=studio_test_sink",
         "--load=module-null-source source_name=studio_test_mic",
         "--load=module-native-protocol-unix"],
        env=env, capture_output=True, timeout=30,
    )  # fmt: skip
    if started.returncode != 0:
        yield None
        return
    old = os.environ.get("PULSE_SERVER")
    os.environ["PULSE_SERVER"] = f"unix:{runtime}/native"
    yield os.environ["PULSE_SERVER"]
    subprocess.run(["pulseaudio", "--kill"], env=env, capture_output=True, timeout=30)
    if old is None:
        os.environ.pop("PULSE_SERVER", None)
    else:
        os.environ["PULSE_SERVER"] = old


@pytest.fixture(autouse=True)
def no_dangling_threads_or_timers(monkeypatch, qapp):
    """Fail the test when it leaves a started QThread, an active QTimer or a new Python thread running."""
    from PySide6.QtCore import QThread, QTimer
    from shiboken6 import isValid

    timers: weakref.WeakSet = weakref.WeakSet()
    qthreads: weakref.WeakSet = weakref.WeakSet()
    original_timer_start, original_thread_start = QTimer.start, QThread.start

    def timer_start(self, *args):
        timers.add(self)
        return original_timer_start(self, *args)

    def thread_start(self, *args):
        qthreads.add(self)
        return original_thread_start(self, *args)

    monkeypatch.setattr(QTimer, "start", timer_start)
    monkeypatch.setattr(QThread, "start", thread_start)
    before = set(threading.enumerate())
    yield
    leaks = [f"QTimer {t.objectName() or t.parent()!r}" for t in list(timers) if isValid(t) and t.isActive()]
    leaks += [f"QThread {t.objectName()!r}" for t in list(qthreads) if isValid(t) and t.isRunning()]
    for thread in set(threading.enumerate()) - before:
        if isinstance(thread, threading._DummyThread):
            continue  # a Qt-made thread Python saw once; QThreads are checked above
        thread.join(timeout=10)  # a stopped worker may still be unwinding
        if thread.is_alive():
            leaks.append(f"thread {thread.name!r}")
    assert not leaks, f"the test left these running: {leaks}"


@pytest.fixture
def window(qtbot, monkeypatch, tmp_path, tiny_model_dir):
    """The studio window on the tiny model, with a takes folder of its own and no engine (tested elsewhere)."""
    from studio.gui.app import create_window
    from studio.settings import Settings

    studio = create_window(
        Settings(model_dir=str(tiny_model_dir), output_dir=str(tmp_path / "takes"), asr_model="")
    )
    qtbot.addWidget(studio)
    monkeypatch.setattr(studio, "start_engine", lambda: None)
    yield studio
    studio.shutdown()
