"""Smoke test of the installed studio (Friture's recipe): start the ``cosyvoice-studio`` launcher offscreen,
wait for its ready log line, fail on import errors or tracebacks, then close it with SIGTERM and check it
exits cleanly (engine shut down). Usage: python packaging/smoke_test.py [--timeout 60] [--launcher PATH]."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READY = "studio ready: window shown in"


def smoke(launcher: str, timeout: float) -> tuple[bool, str]:
    """(passed, output) of one start: ready line within ``timeout`` s, no traceback, clean exit on SIGTERM."""
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "STUDIO_CONFIG_DIR": f"{home}/config",
               "STUDIO_DATA_DIR": f"{home}/data", "PYTHONUNBUFFERED": "1"}  # fmt: skip
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
    args = parser.parse_args()
    passed, output = smoke(args.launcher, args.timeout)
    print(output)
    print("smoke test:", "passed" if passed else "FAILED")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
