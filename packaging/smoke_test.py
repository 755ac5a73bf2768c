"""Smoke test of the installed studio (Friture's recipe): start the ``cosyvoice-studio`` launcher offscreen,
wait for its ready log line, fail on import errors or tracebacks, then close it with SIGTERM and check it
exits cleanly (engine shut down); with --model the engine process must load that folder first.
Usage: python packaging/smoke_test.py [--timeout 60] [--launcher PATH] [--model DIR]."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READY = "studio ready: window shown in"


ENGINE_READY = " state ready "  # the engine process's log line once its model is loaded


def _engine_ready(log: Path, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            if ENGINE_READY in log.read_text(encoding="utf-8", errors="replace"):
                return True
        except OSError:
            pass
        time.sleep(0.25)
    return False


def smoke(launcher: str, timeout: float, model: str | None = None) -> tuple[bool, str]:
    """(passed, output) of one start: ready line within ``timeout`` s, no traceback, clean exit on SIGTERM.

    With ``model`` (a model folder) the studio opens on it and the engine process must also load it
    (PyTorch backend, no warm-up) before the studio is closed: the engine process starts from the launcher.
    """
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "STUDIO_CONFIG_DIR": f"{home}/config",
               "STUDIO_DATA_DIR": f"{home}/data", "PYTHONUNBUFFERED": "1"}  # fmt: skip
        if model:
            Path(home, "config").mkdir()
            settings = {"model_dir": str(Path(model).resolve()), "backend": "pytorch", "asr_model": ""}
            Path(home, "config", "settings.json").write_text(json.dumps(settings))
        process = subprocess.Popen([launcher], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, bufsize=1)  # fmt: skip
        lines: list[str] = []
        deadline = time.monotonic() + timeout
        ready = False
        os.set_blocking(process.stdout.fileno(), False)
        while time.monotonic() < deadline and process.poll() is None:
            line = process.stdout.readline()
            if not line:
                time.sleep(0.05)
                continue
            lines.append(line)
            if READY in line:
                ready = True
                break
        if ready and model:
            ready = _engine_ready(Path(home, "data", "logs", "engine.log"), deadline)
            if not ready:
                lines.append(f"smoke test: the engine did not load {model} within {timeout:.0f} s\n")
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
                lines.append("smoke test: the studio did not exit within 60 s of SIGTERM\n")
        os.set_blocking(process.stdout.fileno(), True)
        lines.extend(process.stdout.readlines())
    output = "".join(lines)
    broken = "Traceback" in output or "ImportError" in output or "ModuleNotFoundError" in output
    return ready and not broken and process.returncode == 0, output


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    default = Path(sys.executable).with_name("cosyvoice-studio")
    parser.add_argument("--launcher", default=str(default))
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument(
        "--model", help="a model folder the engine process must load (e.g. make-model's tiny)"
    )
    args = parser.parse_args()
    passed, output = smoke(args.launcher, args.timeout, args.model)
    print(output)
    print("smoke test:", "passed" if passed else "FAILED")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
