"""The built wheel carries what the studio needs at run time: installed (not editable) into a fresh venv on
Python 3.11 and 3.12, the window starts offscreen with its style sheet and icon, from the installed copy."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: what the window imports at start (the GUI never imports torch): installed from CI's exact pins
WINDOW_NEEDS = ["numpy", "platformdirs", "PySide6-Essentials", "PySide6-Addons", "shiboken6", "pyqtgraph"]
START = r"""
import json, sys
from PySide6.QtWidgets import QApplication
app = QApplication([])
from studio.gui.app import create_window, resource
from studio.settings import Settings
window = create_window(Settings(model_dir=""))
import studio
print(json.dumps({"module": studio.__file__, "style": app.styleSheet(), "icon": not app.windowIcon().isNull(),
                  "packaged": resource("studio.qss").read_text(encoding="utf-8")}))
window.shutdown()
"""


def _interpreter(version: str) -> str | None:
    """A python of ``version`` ("3.12") on this machine, or None."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return sys._base_executable  # the interpreter this venv was made from
    candidates = [
        shutil.which(f"python{version}"),
        *glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}*/bin/python{version}")),
    ]
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
        )
        if probe.returncode == 0 and probe.stdout.strip() == str(tuple(map(int, version.split(".")))):
            return candidate
    return None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
        check=True, timeout=300,
    )  # fmt: skip
    (built,) = out.glob("cosyvoice_studio-*.whl")
    return built


@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", ["3.11", "3.12"])
def test_the_installed_wheel_starts_the_window_with_its_style(wheel, version, tmp_path):
    python = _interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine")
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True, timeout=300)
    if version == f"{sys.version_info.major}.{sys.version_info.minor}":
        # the window's dependencies from this environment (a .pth adds them; the editable studio stays out)
        site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        Path(site, "dev-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    else:
        subprocess.run(
            [*pip, "--constraint", str(ROOT / "constraints" / "cpu.txt"), *WINDOW_NEEDS],
            check=True,
            timeout=600,
        )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "STUDIO_CONFIG_DIR": str(tmp_path / "config"),
           "STUDIO_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": ""}  # fmt: skip
    started = subprocess.run([str(venv / "bin" / "python"), "-c", START], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert started.returncode == 0, started.stderr[-3000:]
    shown = json.loads(started.stdout.strip().splitlines()[-1])
    assert Path(shown["module"]).is_relative_to(venv), shown["module"]  # the wheel's copy, not the checkout
    assert shown["style"] and shown["style"] == shown["packaged"] and "QPushButton" in shown["style"]
    assert shown["icon"]
