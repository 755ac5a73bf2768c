"""The frozen studio (PyInstaller, PyTorch backend) builds from this checkout and passes the packaging smoke
test: the window comes up, the engine process starts from the frozen executable and loads the tiny model,
and the studio exits cleanly on SIGTERM. The build is kept per version of the sources (it takes minutes)."""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILDS = ROOT / ".cache" / "frozen"


def _sources_digest() -> str:
    digest = hashlib.sha1()
    for path in sorted(
        [*ROOT.glob("studio/**/*"), *ROOT.glob("packaging/pyinstaller/**/*"), ROOT / "pyproject.toml"]
    ):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(ROOT)).encode() + path.read_bytes())
    return digest.hexdigest()[:12]


@pytest.fixture(scope="module")
def frozen_launcher() -> Path:
    if importlib.util.find_spec("PyInstaller") is None:
        pytest.skip("PyInstaller is not installed (the dev extra brings it)")
    dist = BUILDS / _sources_digest()
    launcher = dist / "cosyvoice-studio" / "cosyvoice-studio"
    if not launcher.is_file():
        shutil.rmtree(BUILDS, ignore_errors=True)  # one build kept: each is ~1 GB
        built = subprocess.run([str(ROOT / "packaging" / "build-frozen"), str(dist)], capture_output=True,
                               text=True, timeout=2400)  # fmt: skip
        assert built.returncode == 0, (built.stdout + built.stderr)[-4000:]
        print(built.stdout.strip().splitlines()[-1])
    return launcher


def _smoke():
    spec = importlib.util.spec_from_file_location("smoke_test", ROOT / "packaging" / "smoke_test.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(3000)
def test_the_frozen_studio_starts_its_engine_and_exits_cleanly(frozen_launcher, tiny_model_dir):
    passed, output = _smoke().smoke(str(frozen_launcher), timeout=240, model=str(tiny_model_dir))
    assert passed, output[-4000:]


@pytest.mark.timeout(600)
def test_the_frozen_executable_is_the_command_line_too(frozen_launcher, tmp_path):
    made = subprocess.run([str(frozen_launcher), "make-model", "--size", "tiny", str(tmp_path / "m")],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    assert (tmp_path / "m" / "llm.pt").is_file()
    version = subprocess.run([str(frozen_launcher), "--version"], capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout.startswith("cosyvoice-studio ")
