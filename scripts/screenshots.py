"""Drive the studio for screenshots (run through scripts/screenshots, under Xvfb): first-run panel, engine
loading, a voice imported and cleaned, a take streaming, the take finished, two takes, a take's details,
playback paused mid-take, and the settings dialog."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--model", type=Path, help="model folder (default: build/reuse the tiny demo model)")
    parser.add_argument("--backend", default="pytorch", choices=("pytorch", "vllm"))
    parser.add_argument("--out", type=Path, help="folder for the PNGs (default: <repo>/shots)")
    parser.add_argument(
        "--gpu-replay",
        type=Path,
        help="NVML samples recorded on a GPU machine (JSON) to show in an extra GPU-panel shot",
    )
    parser.add_argument("--size", default="1440x870", help="window size WIDTHxHEIGHT (the screen's, too)")
    args = parser.parse_args()
    width, height = (int(n) for n in args.size.lower().split("x"))
    out = args.out or args.repo / "shots"
    out.mkdir(parents=True, exist_ok=True)
    model = args.model or args.repo / ".cache" / "test-models" / "screenshots-tiny"
    if not (model / "llm.pt").exists():
        print(f"building the tiny demo model in {model} ...", flush=True)
        subprocess.run(
            [sys.executable, "-m", "studio", "make-model", "--size", "tiny", str(model)], check=True
        )

    import numpy as np
    import soundfile as sf
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from studio.engine.protocol import EngineState
    from studio.gui.app import create_window
    from studio.runtime.warmup import synthetic_voice
    from studio.settings import Settings

    app = QApplication(sys.argv)
    app.setStyle("Fusion")

    def pump(seconds: float) -> None:
        loop = QEventLoop()
        QTimer.singleShot(int(seconds * 1000), loop.quit)
        loop.exec()

    def wait_until(condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            pump(0.05)

    def shot(name: str) -> None:
        pump(0.3)
        path = out / f"{name}.png"
        app.primaryScreen().grabWindow(0).save(str(path))
        print(f"saved {path}", flush=True)

    window = create_window(Settings(backend=args.backend))
    window.show()
    window.move(0, 0)
    window.resize(width, height)
    shot("01-first-run")

    window.first_run.use_folder(str(model))  # what "Choose a model folder" does
    window.start_engine()
    wait_until(
        lambda: window.engine_status.state in (EngineState.LOADING, EngineState.WARMING), 120, "loading"
    )
    shot("02-engine-loading")
    wait_until(lambda: window.engine_status.state == EngineState.READY, 600, "the engine")

    voice = Path(window.settings.resolved_output_dir()).parent / "my-voice.wav"
    rate = 44100
    speech = 0.5 * synthetic_voice(rate, 6.0)
    noise = 0.002 * np.random.default_rng(1).standard_normal(rate)  # room noise around the speech
    sf.write(voice, np.concatenate([noise, speech + 0.01, noise]).astype(np.float32), rate)
    window.voice_panel.import_file(str(voice))
    wait_until(lambda: window.voice_panel.current_prompt() is not None, 60, "the cleanup")
    window.voice_panel.transcript.setText("A calm voice reads a few plain words aloud.")
    window.voice_panel.save_voice("Calm narrator")
    window.text_panel.editor.setPlainText(
        "Welcome to the studio! [breath] Today we <strong>test</strong> streaming. [laughter]"
    )
    shot("03-voice-ready")

    chunks = []
    window.takes.sig_chunk.connect(lambda samples, _latency: chunks.append(samples))
    window.text_panel.generate_button.click()
    wait_until(lambda: len(chunks) >= 2 or not window.takes.busy, 600, "the first chunks")
    shot("04-streaming")
    wait_until(lambda: not window.takes.busy, 900, "the take")
    window.preview.denoise.setChecked(True)
    shot("05-take-finished")

    window.text_panel.mode.setCurrentIndex(window.text_panel.mode.findData("instruct"))
    window.text_panel.instruct.setText("Speak slowly and warmly, like a bedtime story")
    window.text_panel.generate_button.click()
    wait_until(lambda: not window.takes.busy, 900, "the second take")
    window.takes_panel.tree.selectAll()
    shot("06-two-takes")

    newest = window.takes_panel.tree.topLevelItem(0).data(0, 256)
    window.takes_panel.refresh(select=newest)
    shot("07-take-details")
    window.play_take(newest)
    transport = window.playback.transport
    if transport.state == "playing":
        transport.pause()
        transport.seek(0.4 * (transport.clip.duration if transport.clip else 0.0))
    shot("08-paused-mid-take")
    transport.stop()

    from studio.gui.settings import SettingsDialog

    dialog = SettingsDialog(window.settings, window)
    dialog.show()
    dialog.move(max(0, width // 2 - 300), 80)
    shot("09-settings")
    dialog.close()

    window.voice_panel.set_recording(0.4 * synthetic_voice(22050, 4.0), 22050, origin="second voice")
    wait_until(lambda: window.voice_panel.current_prompt() is not None, 60, "the second voice")
    window.voice_panel.transcript.setText("")
    window.voice_panel.save_voice("Bright reader")
    script = voice.parent / "The lighthouse.txt"
    script.write_text(
        "[Calm narrator] The lighthouse stood at the end of the road, older than the town.\n"
        "[Bright reader] Every night its keeper climbed the hundred steps.\n"
        "[Calm narrator|Speak softly, as if telling a secret] Nobody had ever seen him come down.\n\n"
        "[Bright reader] Until one winter morning, the light stayed dark.\n",
        encoding="utf-8",
    )
    window.views.setCurrentWidget(window.script_view)
    view = window.script_view
    view.open_script(str(script))
    view.render_button.click()
    wait_until(lambda: not view.controller.busy, 900, "the script")
    view.table.selectRow(2)
    shot("10-script-view")
    window.close()
    if args.gpu_replay:
        gpu_replay_shot(args.gpu_replay, out / "11-gpu-panel-replay.png", pump)
    return 0


def gpu_replay_shot(samples_file: Path, path: Path, pump) -> None:
    """Feed recorded NVML samples through the real GpuPanel on a simulated 2 Hz clock, and grab it."""
    import json

    from studio.gpu.nvml import GpuSnapshot
    from studio.gui.engine import gpu_panel as panel_module

    recording = json.loads(samples_file.read_text())
    clock = [1000.0]
    panel_module.time.monotonic = lambda: clock[0]  # this script only: a simulated clock
    samples = iter(recording["samples"])
    current: dict = {}

    def replay():
        sample = current["sample"]
        engine_pid = 4242
        return [
            GpuSnapshot(
                0,
                recording["name"],
                tuple(recording["cc"]),
                recording["driver"],
                sample["total"],
                sample["used"],
                sample["util"],
                {engine_pid: sample["engine"]},
            )
        ]

    panel = panel_module.GpuPanel(query=replay)
    panel.set_engine_pid(4242)
    panel._pids_refreshed = float("inf")
    panel._engine_pids = {4242}
    panel.resize(560, 460)
    panel.show()
    for index, sample in enumerate(samples):
        current["sample"] = sample
        clock[0] = 1000.0 + sample["t"]
        panel.on_sample()
        if index in (8, 40):
            panel.mark_take_started()
        if index in (30, 56):
            panel.mark_take_finished()
    pump(0.3)
    panel.grab().save(str(path))
    print(f"saved {path}", flush=True)
    panel.close()


if __name__ == "__main__":
    try:
        code = main()
    except BaseException:  # noqa: BLE001 - a failed run must not hang on the engine's threads
        import os
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.exit(code)
