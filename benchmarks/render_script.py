"""Time ``cosyvoice-studio render`` on a generated N-line, two-voice script (the tiny model unless told):
total wall time (model load included, as a user waits), render time, lines per minute, audio seconds, and a
``--resume`` run after one line changed. The command runs in a child process, exactly as a user runs it.

    .venv/bin/python benchmarks/render_script.py --lines 50 --concurrency 1,4 \\
        --json benchmarks/results/DATE/cpu_render-50-lines-tiny.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import soundfile as sf

SENTENCES = (
    "The lighthouse stood at the end of the road, older than the town.",
    "Every night its keeper climbed the hundred steps.",
    "Nobody had ever seen him come down.",
    "Until one winter morning, the light stayed dark.",
    "The children ran down to the harbour to look.",
)


def write_inputs(folder: Path, lines: int) -> tuple[Path, list[str]]:
    from studio.runtime.warmup import synthetic_voice

    sf.write(folder / "a.wav", 0.4 * synthetic_voice(16000, 4.0), 16000)
    sf.write(folder / "b.wav", 0.3 * synthetic_voice(22050, 3.0), 22050)
    text = []
    for n in range(lines):
        voice = "Narrator" if n % 2 == 0 else "Reader"
        text.append(
            ("\n" if n and n % 10 == 0 else "") + f"[{voice}] Line {n + 1}. {SENTENCES[n % len(SENTENCES)]}"
        )
    script = folder / "script.txt"
    script.write_text("\n".join(text) + "\n", encoding="utf-8")
    voices = ["--voice", f"Narrator={folder / 'a.wav'}:A calm voice reads a few words.", "--voice",
              f"Reader={folder / 'b.wav'}"]  # fmt: skip
    return script, voices


def render(model: str, script: Path, out: Path, voices: list[str], concurrency: int, *extra: str) -> dict:
    command = [sys.executable, "-m", "studio", "render", str(script), "--model", model, "--out", str(out),
               *voices, "--seed", "1", "--concurrency", str(concurrency), "--srt", *extra]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"})
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"render failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    match = re.search(
        r"rendered (\d+) line\(s\) in ([\d.]+) s \(([\d.]+) lines/min, ([\d.]+) s of audio\)", done.stdout
    )
    manifest = json.loads((out / "script.json").read_text())
    return {"concurrency": concurrency, "wall_s": round(wall, 2), "lines_rendered": int(match.group(1)),
            "render_s": float(match.group(2)), "lines_per_min": float(match.group(3)),
            "audio_s": float(match.group(4)), "joined_s": round(sf.info(out / "joined.wav").duration, 2),
            "statuses": sorted({x["status"] for x in manifest["lines"]})}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="", help="model folder (default: build the tiny one)")
    parser.add_argument("--lines", type=int, default=50)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = args.model
        if not model:
            from studio.cli import main as cli

            model = str(work / "tiny")
            cli(["make-model", "--size", "tiny", model])
        script, voices = write_inputs(work, args.lines)
        runs = []
        for level in (int(x) for x in args.concurrency.split(",")):
            out = work / f"out-{level}"
            runs.append(render(model, script, out, voices, level))
            print(json.dumps(runs[-1]), flush=True)
        script.write_text(script.read_text().replace("Line 7.", "Line seven, changed."), encoding="utf-8")
        resumed = render(model, script, out, voices, level, "--resume")
        print(json.dumps({"resume_after_one_edit": resumed}), flush=True)
    report = {"machine": f"{platform.machine()} {os.cpu_count()} CPUs", "model": args.model or "tiny (random)",
              "lines": args.lines, "runs": runs, "resume_after_one_edit": resumed,
              "command": "benchmarks/render_script.py " + " ".join(sys.argv[1:])}  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
