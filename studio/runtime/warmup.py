"""The built-in warm-up prompt: a synthetic voiced signal made in code (no file), with a fixed text.

``synthetic_voice()`` is a glottal pulse train with a moving pitch, shaped by vowel formants into
syllables; speech-like enough to exercise the speaker embedding, the speech tokenizer and the flow's
prompt path. The engine warms up with it; tests and the benchmark use it as a neutral prompt.
"""

from __future__ import annotations

import numpy as np

WARMUP_TEXT = "Hello, this is a short warm-up sentence for the studio."
WARMUP_PROMPT_TEXT = "A calm voice reads a few plain words aloud."
WARMUP_SPEECH_TOKENS = 40  # bounds the warm-up (random weights rarely stop): 1.6 s of audio, 2 chunks

# (F1, F2, F3) in Hz for a few vowels
_VOWEL_FORMANTS = (
    (730, 1090, 2440),
    (530, 1840, 2480),
    (270, 2290, 3010),
    (570, 840, 2410),
    (300, 870, 2240),
)


def _resonator(signal: np.ndarray, freq: float, bandwidth: float, sr: int) -> np.ndarray:
    from scipy.signal import lfilter

    r = np.exp(-np.pi * bandwidth / sr)
    theta = 2 * np.pi * freq / sr
    a = [1.0, -2 * r * np.cos(theta), r * r]
    return lfilter([1.0 - r], a, signal)


def synthetic_voice(
    sample_rate: int = 16000, seconds: float = 3.0, f0: float = 120.0, seed: int = 0
) -> np.ndarray:
    """A deterministic voiced, syllabic signal (float32 mono, peak 0.5) of the given length."""
    if sample_rate < 8000 or seconds <= 0:
        raise ValueError("sample_rate must be >= 8000 and seconds > 0")
    rng = np.random.default_rng(seed)
    n = int(round(sample_rate * seconds))
    t = np.arange(n) / sample_rate
    pitch = f0 * (1.0 + 0.12 * np.sin(2 * np.pi * 0.7 * t) + 0.02 * np.sin(2 * np.pi * 5.5 * t))
    phase = np.cumsum(pitch / sample_rate)
    pulses = np.diff(np.floor(phase), prepend=0.0)  # one impulse per glottal period
    source = np.convolve(pulses, np.hanning(max(3, sample_rate // 400)), mode="same")
    source += 0.01 * rng.standard_normal(n)  # aspiration noise
    syllable_len = int(0.25 * sample_rate)
    out = np.zeros(n)
    for start in range(0, n, syllable_len):
        stop = min(n, start + syllable_len)
        f1, f2, f3 = _VOWEL_FORMANTS[(start // syllable_len) % len(_VOWEL_FORMANTS)]
        seg = source[start:stop]
        voiced = _resonator(seg, f1, 80, sample_rate) + 0.6 * _resonator(seg, f2, 100, sample_rate)
        voiced += 0.3 * _resonator(seg, f3, 150, sample_rate)
        out[start:stop] = voiced * np.hanning(stop - start)  # syllable envelope
    out /= max(1e-9, float(np.max(np.abs(out))))
    return (0.5 * out).astype(np.float32)


def warmup_request():
    """The fixed warm-up take: streaming, seeded, bounded to WARMUP_SPEECH_TOKENS speech tokens."""
    from studio.engine.protocol import Synthesize

    return Synthesize(
        WARMUP_TEXT,
        prompt_wav=synthetic_voice(16000, 3.0),
        prompt_sr=16000,
        prompt_text=WARMUP_PROMPT_TEXT,
        stream=True,
        seed=0,
        exact_speech_tokens=WARMUP_SPEECH_TOKENS,
        request_id="warmup",
    )
