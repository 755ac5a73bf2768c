"""The built-in warm-up prompt is a deterministic, voiced (periodic) signal, not noise or silence."""

from __future__ import annotations

import numpy as np
import pytest

from studio.runtime.warmup import WARMUP_SPEECH_TOKENS, synthetic_voice, warmup_request


def _pitch_hz(segment: np.ndarray, sr: int) -> float:
    segment = segment - segment.mean()
    corr = np.correlate(segment, segment, mode="full")[segment.size - 1 :]
    low, high = sr // 400, sr // 60  # search 60..400 Hz
    lag = low + int(np.argmax(corr[low:high]))
    return sr / lag


def test_synthetic_voice_is_voiced_at_its_pitch():
    sr = 16000
    wav = synthetic_voice(sr, 2.0, f0=120.0)
    assert wav.dtype == np.float32 and wav.shape == (32000,)
    assert np.max(np.abs(wav)) == pytest.approx(0.5, rel=1e-3)
    segment = wav[1000 : 1000 + 1600]  # 100 ms inside the first syllable
    assert 95 <= _pitch_hz(segment, sr) <= 150
    np.testing.assert_array_equal(wav, synthetic_voice(sr, 2.0, f0=120.0))


def test_synthetic_voice_rejects_bad_arguments():
    with pytest.raises(ValueError):
        synthetic_voice(4000, 1.0)


def test_warmup_request_is_bounded_and_streams():
    request = warmup_request()
    assert request.stream and request.exact_speech_tokens == WARMUP_SPEECH_TOKENS and request.seed == 0
