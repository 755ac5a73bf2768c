"""Shared test set-up: offscreen Qt, warnings from our package as errors, the tiny model cache."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

TEST_MODELS = Path(__file__).resolve().parents[1] / ".cache" / "test-models"


@pytest.fixture
def offline_hub(monkeypatch):
    """No model hub (none is reachable here or in CI): an ASR model that is not on disk fails at once, as
    for an offline user, instead of after network timeouts. Engine processes started meanwhile inherit it."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _cached_tiny_model(family: str) -> Path:
    """The tiny random-weight folder of ``family``, built once per version of its model code and reused across
    runs; built into a private folder and renamed into place, so concurrent test runs never see half a folder.
    """
    from studio.tts.fabricate.builder import BUILDER_VERSION, build_model_folder, source_fingerprint

    prefix = "tiny" if family == "cosyvoice2" else f"tiny-{family}"
    target = TEST_MODELS / f"{prefix}-v{BUILDER_VERSION}-{source_fingerprint(family)}"
    if not (target / "README.md").is_file():
        TEST_MODELS.mkdir(parents=True, exist_ok=True)
        staging = TEST_MODELS / f".{target.name}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        build_model_folder(staging, size="tiny", seed=0, family=family)
        try:
            staging.rename(target)
        except OSError:  # another run finished first
            shutil.rmtree(staging, ignore_errors=True)
    return target


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny random-weight CosyVoice2 folder, built once per version of the model code and reused across runs.

    Treat it as read-only: tests that change files must copy it first.
    """
    return _cached_tiny_model("cosyvoice2")


@pytest.fixture(scope="session")
def tiny_cosyvoice3_dir() -> Path:
    """The tiny random-weight CosyVoice3 folder (``make-model --family cosyvoice3``), cached as `tiny_model_dir`.

    Treat it as read-only: tests that change files must copy it first.
    """
    return _cached_tiny_model("cosyvoice3")


@pytest.fixture
def small_disk(tmp_path):
    """A factory of real small disks: ``small_disk(kib, read_only=False, full=False)`` mounts a fresh tmpfs of
    that size (full-disk and read-only failures as a user's machine sees them; ``full``: filled to the last
    byte) and unmounts it after the test. Skips, saying why, where mounting is not allowed (it needs root)."""
    import subprocess

    mounted: list[Path] = []

    def make(kib: int, read_only: bool = False, full: bool = False) -> Path:
        target = tmp_path / f"disk{len(mounted)}"
        target.mkdir()
        options = f"size={int(kib)}k,mode=0777" + (",ro" if read_only else "")
        try:
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True, timeout=30
            )
        except (OSError, subprocess.SubprocessError) as exc:
            pytest.skip(f"cannot mount a small disk here ({exc})")
        if done.returncode != 0:
            pytest.skip(f"cannot mount a small disk here: {done.stderr.decode(errors='replace').strip()}")
        mounted.append(target)
        if full:
            with open(target / "filler", "wb", buffering=0) as handle:
                try:
                    while True:
                        handle.write(b"\0" * 4096)
                except OSError:
                    pass
        return target

    yield make
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", str(target)], capture_output=True, timeout=30)


@pytest.fixture(scope="session")
def tiny_asr_dir() -> Path:
    """The tiny random-weight Whisper folder (``make-asr-model``), built once per version of its builder."""
    import hashlib

    import studio.asr.fabricate as fabricate

    digest = hashlib.sha1(Path(fabricate.__file__).read_bytes()).hexdigest()[:10]
    target = TEST_MODELS / f"asr-tiny-{digest}"
    if not (target / "README.md").is_file():
        TEST_MODELS.mkdir(parents=True, exist_ok=True)
        staging = TEST_MODELS / f".{target.name}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        fabricate.write_asr_folder(staging, size="tiny", seed=0)
        try:
            staging.rename(target)
        except OSError:  # another run finished first
            shutil.rmtree(staging, ignore_errors=True)
    return target
