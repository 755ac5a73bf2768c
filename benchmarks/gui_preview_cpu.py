"""The preview's cost while a take streams in and plays: process CPU time per second of audio, and how far
playback falls behind, for takes of 20 s, 2 min and 15 min. The studio's real preview panel, transport and
player (offscreen Qt, a private PulseAudio null sink) get chunks of a 24 kHz take in the sizes the engine
streams them (per sentence 1 s, 2 s, then 4 s), paced like an engine running at ``--rtf``; the take then
plays to its end as a stored clip. Afterwards the finished take plays for ``--stored-seconds`` from its middle
(the cost of the playhead alone).

    .venv/bin/python benchmarks/gui_preview_cpu.py --json benchmarks/results/2026-12-04/cpu_gui-preview-cost.json

Flat figures from 20 s to 15 min mean the preview's cost per chunk does not grow with the take. A growing
``lag_growth_s`` means playback was starved (the sink ran dry while the window was busy). The run takes as
long as the audio (about 18 minutes for the defaults); other processes on the machine inflate the CPU times
but not their growth with length.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

RATE = 24000
SENTENCE_S = 9.4
HOPS_S = (1, 2, 4)  # the engine's streamed chunk lengths per sentence: 25, 50, then 100 tokens at 25 Hz


def engine_chunk_lengths(seconds: float) -> Iterator[int]:
    """Chunk lengths in samples as the engine streams a take of sentences of `SENTENCE_S` seconds."""
    left = int(round(seconds * RATE))
    while left > 0:
        sentence = min(left, int(SENTENCE_S * RATE))
        left -= sentence
        hop = 0
        while sentence > 0:
            size = min(sentence, HOPS_S[min(hop, len(HOPS_S) - 1)] * RATE)
            sentence -= size
            hop += 1
            yield size


def voice_like(seconds: float, seed: int = 0) -> np.ndarray:
    """Harmonics of a wavering pitch under a syllable-rate envelope, with a little noise (peak about 0.5)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    pitch = 140.0 + 20.0 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / RATE
    harmonics = sum(np.sin(k * phase) / k for k in range(1, 6))
    syllables = 0.5 + 0.5 * np.sin(2 * np.pi * 3.0 * t) ** 2
    return (0.25 * harmonics * syllables + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


def start_pulse(work: Path) -> subprocess.Popen | None:
    """A private PulseAudio daemon with a null sink (as the GUI tests use); None when PulseAudio is missing."""
    if os.environ.get("PULSE_SERVER") or shutil.which("pulseaudio") is None:
        return None
    runtime = work / "pulse"
    runtime.mkdir()
    env = {**os.environ, "PULSE_RUNTIME_PATH": str(runtime), "HOME": str(work)}
    subprocess.run(
        ["pulseaudio", "--daemonize=yes", "--exit-idle-time=-1", "-n", "--disable-shm=yes",
         "--load=module-null-sink sink_name=bench_sink", "--load=module-native-protocol-unix"],
        env=env, check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    os.environ["PULSE_SERVER"] = f"unix:{runtime}/native"
    return env


def cpu_seconds() -> float:
    """CPU time of this process, all its threads (Qt's audio and render threads included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def points_drawn(waveform) -> int:
    """Points in the waveform's upper outline curve."""
    xs, _ys = waveform._upper.getData()
    return 0 if xs is None else len(xs)


class Bench:
    """The preview panel wired to a transport and player as the window's Playback wires them."""

    def __init__(self, stored_seconds: float) -> None:
        from studio.gui.playback.player import StreamPlayer
        from studio.gui.playback.preview import PreviewPanel
        from studio.gui.playback.transport import Transport

        self.stored_seconds = stored_seconds
        self.preview = PreviewPanel()
        self.player = StreamPlayer()
        self.transport = Transport(self.player)
        self.key: str | None = None
        self.transport.bind(self.preview.waveform, lambda: self.key, lambda: None)
        self.transport.sig_state.connect(self.preview.set_transport_state)
        self.transport.sig_position.connect(self.preview.set_position)
        self.preview.resize(1360, 260)
        self.preview.show()
        self.sentence = voice_like(SENTENCE_S)

    def run_take(self, seconds: float, rtf: float) -> dict:
        from PySide6.QtCore import QEventLoop, QTimer

        from studio.gui.playback.transport import Clip

        lengths = list(engine_chunk_lengths(seconds))
        loop = QEventLoop()
        lags: list[tuple[float, float]] = []  # (seconds since the first chunk, lag behind the wall clock)
        points: list[int] = []
        state = {"next": 0, "fed": 0, "t0": 0.0, "ended": False}
        self.key = f"live:{seconds}"
        self.preview.begin_take(streaming=True)
        self.transport.begin_live(self.key)

        def feed_next() -> None:
            index = state["next"]
            size = lengths[index]
            start = state["fed"] % self.sentence.size  # chunks never cross a sentence's end
            chunk = self.sentence[start : start + size]
            if index == 0:
                state["t0"] = time.monotonic()
            self.preview.add_chunk(chunk, RATE, 0.4)
            self.transport.feed_live(self.key, chunk, RATE)
            points.append(points_drawn(self.preview.waveform))
            state["fed"] += size
            state["next"] += 1
            if state["next"] < len(lengths):
                due = state["t0"] + state["fed"] / RATE * rtf
                QTimer.singleShot(max(0, int((due - time.monotonic()) * 1000)), feed_next)
            else:
                clip = Clip(f"take:{seconds}", self.preview.waveform.samples, RATE, "bench")
                self.transport.end_live(self.key, clip)
                self.key = clip.key
                state["ended"] = True

        def sample_lag() -> None:
            if self.transport.state == "playing" and state["t0"]:
                since = time.monotonic() - state["t0"]
                lags.append((since, since - self.player.position))

        def on_state(now: str) -> None:
            if now == "stopped" and state["ended"]:
                loop.quit()

        self.transport.sig_state.connect(on_state)
        sampler = QTimer()
        sampler.setInterval(1000)
        sampler.timeout.connect(sample_lag)
        cpu0, wall0 = cpu_seconds(), time.monotonic()
        sampler.start()
        QTimer.singleShot(0, feed_next)
        loop.exec()
        sampler.stop()
        cpu, wall = cpu_seconds() - cpu0, time.monotonic() - wall0
        self.transport.sig_state.disconnect(on_state)
        settled = [lag for since, lag in lags if since >= 5.0] or [lag for _since, lag in lags]
        return {
            "audio_s": round(seconds, 1),
            "chunks": len(lengths),
            "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 2),
            "cpu_s_per_audio_s": round(cpu / seconds, 4),
            "cpu_share_of_wall": round(cpu / wall, 3),
            "lag_s_first": round(settled[0], 3) if settled else None,
            "lag_s_last": round(settled[-1], 3) if settled else None,
            "lag_s_max": round(max(settled), 3) if settled else None,
            "lag_growth_s": round(settled[-1] - settled[0], 3) if settled else None,
            "points_drawn_max": max(points),
            "stored_playback": self.play_stored(clip_seconds=seconds),
        }

    def play_stored(self, clip_seconds: float) -> dict:
        """The finished take plays from its middle for `--stored-seconds`: CPU per second of playback."""
        from PySide6.QtCore import QEventLoop, QTimer

        clip = self.transport.clip
        if clip is None:
            return {}
        loop = QEventLoop()
        length = min(self.stored_seconds, clip_seconds / 2)
        cpu0, wall0 = cpu_seconds(), time.monotonic()
        self.transport.play(clip, clip_seconds / 2)
        QTimer.singleShot(int(length * 1000), loop.quit)
        loop.exec()
        position = self.player.position
        self.transport.stop()
        cpu, wall = cpu_seconds() - cpu0, time.monotonic() - wall0
        return {
            "seconds": round(wall, 1),
            "cpu_s_per_s": round(cpu / wall, 4),
            "position_s_advanced": round(position - clip_seconds / 2, 2),
        }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lengths", default="20,120,900", help="take lengths in seconds, comma-separated")
    parser.add_argument(
        "--rtf", type=float, default=0.5, help="the engine's real-time factor (0.5: audio at twice real time)"
    )
    parser.add_argument("--stored-seconds", type=float, default=10.0)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    try:
        lengths = [float(part) for part in args.lengths.split(",")]
    except ValueError:
        parser.error(f"--lengths takes seconds separated by commas, got {args.lengths!r}")
    if any(length <= 0 for length in lengths):
        parser.error("--lengths must all be positive")
    if not 0 < args.rtf <= 1:
        parser.error("--rtf must be in (0, 1]: slower than real time, playback waits for the engine")

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    work = Path(tempfile.mkdtemp(prefix="gui-preview-cpu-"))
    pulse_env = start_pulse(work)
    from PySide6.QtMultimedia import QMediaDevices
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])  # noqa: F841 (kept alive for the run)
    if QMediaDevices.defaultAudioOutput().isNull():
        raise SystemExit("no audio output device (install pulseaudio: scripts/system-packages)")
    bench = Bench(args.stored_seconds)
    load_before = os.getloadavg()
    takes = []
    try:
        for seconds in lengths:
            result = bench.run_take(seconds, args.rtf)
            print(json.dumps(result), flush=True)
            takes.append(result)
    finally:
        if pulse_env is not None:
            subprocess.run(["pulseaudio", "--kill"], env=pulse_env, capture_output=True, timeout=30)
    report = {
        "benchmark": "gui_preview_cpu",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
        },
        "qt_platform": os.environ["QT_QPA_PLATFORM"],
        "rtf": args.rtf,
        "takes": takes,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
