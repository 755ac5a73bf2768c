"""The set-up scripts fail early and clearly on bad input, and every script is valid bash."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ["scripts/bootstrap", "scripts/test", "scripts/studio", "scripts/system-packages", ".ci/run"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_is_executable_bash(script):
    path = ROOT / script
    assert path.stat().st_mode & 0o111, f"{script} is not executable"
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_bootstrap_rejects_an_unknown_backend(tmp_path):
    result = subprocess.run(
        [str(ROOT / "scripts/bootstrap")],
        env={"PATH": "/usr/bin:/bin", "STUDIO_BACKEND": "tensorrt", "STUDIO_VENV": str(tmp_path / "venv")},
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2
    assert "STUDIO_BACKEND must be vllm, vllm-cpu or none" in result.stderr
    assert not (tmp_path / "venv").exists()
