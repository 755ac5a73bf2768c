"""Time from a click on Play to the first sound leaving the sound server, for a stored take (takes list),
the preview's Play and the reference's ▶ Original; the studio's real widgets and player, a real
PulseAudio server whose sink is a FIFO timed by the system clock (so a sample comes out when a sound card
would play it), read here and timestamped at its first non-silent block.

    .venv/bin/python benchmarks/play_latency.py --trials 10 --json benchmarks/results/DATE/cpu_play-latency.json

Needs ``pulseaudio`` (scripts/system-packages installs it). A null sink would not do: it has a fixed 2 s
latency, which is what a first try measured as "1.5 s from Play to sound".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

BLOCK_BYTES = 96  # 1 ms of s16le mono at 48 kHz
SILENCE = 64  # |sample| above this is sound


def start_pulse(work: Path) -> tuple[dict[str, str], Path]:
    if shutil.which("pulseaudio") is None:
        raise SystemExit("pulseaudio is not installed (scripts/system-packages)")
    fifo = work / "sink.fifo"
    env = {"PULSE_RUNTIME_PATH": str(work / "pulse"), "HOME": str(work)}
    (work / "pulse").mkdir()
    subprocess.run(
        ["pulseaudio", "--daemonize=yes", "--exit-idle-time=-1", "-n", "--disable-shm=yes",
         f"--load=module-pipe-sink sink_name=fifo file={fifo} format=s16le rate=48000 channels=1 "
         "use_system_clock_for_timing=yes",
         "--load=module-native-protocol-unix"],
        env={**os.environ, **env}, check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    env["PULSE_SERVER"] = f"unix:{work}/pulse/native"
    return env, fifo


class SoundWatch:
    """Reads the sink's FIFO all the time; ``first_sound_after(t)`` is when sound first came out after t."""

    def __init__(self, fifo: Path):
        self._events: list[float] = []
        self._fd = os.open(fifo, os.O_RDONLY)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            data = os.read(self._fd, BLOCK_BYTES)
            if not data:
                return
            if np.abs(np.frombuffer(data[: len(data) // 2 * 2], np.int16)).max(initial=0) > SILENCE:
                self._events.append(time.perf_counter())

    def first_sound_after(self, start: float) -> float | None:
        later = [t for t in self._events if t >= start]
        return later[0] if later else None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="play-latency-"))
    env, fifo = start_pulse(work)
    os.environ.update(env)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["STUDIO_CONFIG_DIR"] = str(work / "config")
    os.environ["STUDIO_DATA_DIR"] = str(work / "data")
    try:
        return run(args, work, fifo)
    finally:
        subprocess.run(["pulseaudio", "--kill"], env={**os.environ, **env}, capture_output=True, timeout=30)
        shutil.rmtree(work, ignore_errors=True)


def run(args, work: Path, fifo: Path) -> int:
    from PySide6.QtCore import QEventLoop, Qt, QTimer
    from PySide6.QtMultimedia import QMediaDevices
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    from studio.gui.app import create_window
    from studio.runtime.warmup import synthetic_voice
    from studio.settings import Settings

    app = QApplication(sys.argv)  # noqa: F841 - kept alive while the window runs
    watch = SoundWatch(fifo)  # opens once pulse writes; pulse opens the FIFO at load
    window = create_window(Settings(model_dir="", output_dir=str(work / "takes"), asr_model=""))
    window.show()
    device = QMediaDevices.defaultAudioOutput().description()

    def pump(seconds: float) -> None:
        loop = QEventLoop()
        QTimer.singleShot(int(seconds * 1000), loop.quit)
        loop.exec()

    rate = 24000
    take = window.store.add(
        (0.3 * synthetic_voice(rate, 3.0)).astype(np.float32), rate, text="a take to play"
    )
    window.takes_panel.refresh(select=take.id)
    window.voice_panel.set_recording(0.4 * synthetic_voice(16000, 4.0), 16000, origin="reference")
    deadline = time.monotonic() + 60
    while window.voice_panel.current_prompt() is None and time.monotonic() < deadline:
        pump(0.05)

    sources = {
        "takes list Play": window.takes_panel.play_button,
        "preview Play": window.preview.play_button,
        "reference Original": window.voice_panel.play_before,
    }
    results: dict[str, list[float]] = {}
    for name, button in sources.items():
        delays = []
        for _ in range(args.trials):
            window.playback.stop()
            pump(0.4)  # silence between trials
            start = time.perf_counter()
            QTest.mouseClick(button, Qt.MouseButton.LeftButton)
            while watch.first_sound_after(start) is None and time.perf_counter() - start < 3.0:
                pump(0.001)
            heard = watch.first_sound_after(start)
            delays.append(float("nan") if heard is None else (heard - start) * 1000.0)
        results[name] = delays
        print(f"{name:20s} median {statistics.median(delays):6.1f} ms  max {max(delays):6.1f} ms", flush=True)
    window.shutdown()

    report = {
        "what": "click on Play -> first non-silent sample out of the sound server (PulseAudio FIFO sink, "
        "system-clock timed)",
        "command": "benchmarks/play_latency.py --trials " + str(args.trials),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "output_device": device,
        "trials": args.trials,
        "ms": {
            name: {"median": statistics.median(d), "max": max(d), "all": d} for name, d in results.items()
        },
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
