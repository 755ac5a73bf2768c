"""The installed ``cosyvoice-studio`` launcher starts offscreen, logs its ready line within seconds and
exits cleanly on SIGTERM (packaging/smoke_test.py, Friture's recipe)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_smoke():
    spec = importlib.util.spec_from_file_location("smoke_test", ROOT / "packaging" / "smoke_test.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_launcher_shows_the_window_and_exits_cleanly():
    launcher = Path(sys.executable).with_name("cosyvoice-studio")
    if not launcher.exists():
        pytest.skip("the package is not installed (no cosyvoice-studio launcher)")
    passed, output = load_smoke().smoke(str(launcher), timeout=60)
    assert passed, output[-4000:]
    shown = float(re.search(r"window shown in (\d+\.\d+) s", output).group(1))
    assert shown > 0  # the 2 s target is measured (printed), not asserted: CI machines vary
    print(f"window shown in {shown:.2f} s")


def test_desktop_entry_names_the_gui_launcher_and_icon():
    entry = (ROOT / "packaging" / "cosyvoice-studio.desktop").read_text()
    assert "Exec=cosyvoice-studio-gui" in entry and "Icon=cosyvoice-studio" in entry
    assert (ROOT / "studio" / "resources" / "icons" / "cosyvoice-studio.svg").exists()
