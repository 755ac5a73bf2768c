"""Test audio made at test time: espeak-ng speech with known silence around it (helpers in audio_signals)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import soundfile as sf
from audio_signals import Speech, speech_bounds_by_level


@pytest.fixture(scope="session")
def espeak_speech(tmp_path_factory) -> Speech:
    """About 5 s of English from espeak-ng (22.05 kHz), with its speech bounds measured by level."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    path = tmp_path_factory.mktemp("espeak") / "speech.wav"
    text = "One, two, three. Welcome to the voice cloning studio. We are testing the cleaner."
    subprocess.run(["espeak-ng", "-s", "170", "-w", str(path), text], check=True, capture_output=True)
    samples, sr = sf.read(path, dtype="float32")
    start, end = speech_bounds_by_level(samples, sr)
    return Speech(samples, sr, start, end)


@pytest.fixture(scope="session")
def padded_speech(espeak_speech) -> Speech:
    """espeak speech with 0.8 s before and 1.2 s after, under a faint noise floor (-80 dBFS rms)."""
    return espeak_speech.padded(0.8, 1.2, noise=1e-4)
