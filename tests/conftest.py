"""Shared test set-up: offscreen Qt, warnings from our package as errors, the tiny model cache."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

TEST_MODELS = Path(__file__).resolve().parents[1] / ".cache" / "test-models"


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny random-weight model folder, built once per version of the model code and reused across runs.

    Built into a private folder and renamed into place, so concurrent test runs never see half a folder.
    Treat it as read-only: tests that change files must copy it first.
    """
    from studio.tts.fabricate.builder import BUILDER_VERSION, build_model_folder, source_fingerprint

    target = TEST_MODELS / f"tiny-v{BUILDER_VERSION}-{source_fingerprint()}"
    if not (target / "README.md").is_file():
        TEST_MODELS.mkdir(parents=True, exist_ok=True)
        staging = TEST_MODELS / f".{target.name}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        build_model_folder(staging, size="tiny", seed=0)
        try:
            staging.rename(target)
        except OSError:  # another run finished first
            shutil.rmtree(staging, ignore_errors=True)
    return target
