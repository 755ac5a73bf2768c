"""Fixtures for runtime tests: one loaded tiny CosyVoice2 per session and a synthetic voiced prompt."""

from __future__ import annotations

import numpy as np
import pytest


def voiced_prompt(seconds: float = 2.0, sr: int = 16000, f0: float = 140.0) -> np.ndarray:
    """A vowel-like signal: harmonics of a slowly wavering pitch under a syllable-rate envelope."""
    t = np.arange(int(seconds * sr)) / sr
    pitch = f0 + 20 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / sr
    harmonics = sum(np.sin(k * phase) / k for k in range(1, 9))
    envelope = 0.6 + 0.4 * np.sin(2 * np.pi * 3 * t)
    noise = np.random.default_rng(0).standard_normal(t.size) * 0.01
    return (0.3 * harmonics * envelope + noise).astype(np.float32)


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """One intra-op thread: on a shared 2-core machine OpenMP's spinning teams (the LM thread and the
    flow each run one) made the tiny model 30x slower; a single thread keeps these tests at seconds."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def prompt_wav16k() -> np.ndarray:
    return voiced_prompt()


@pytest.fixture(scope="session")
def tiny_cosyvoice(tiny_model_dir):
    """A CosyVoice2 on the tiny folder (PyTorch backend); tests must not change its state."""
    from studio.tts.cosyvoice2 import CosyVoice2

    return CosyVoice2(tiny_model_dir)
