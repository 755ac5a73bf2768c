"""Signals for the audio tests: speech with known bounds, synthetic voiced syllables."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Speech:
    """A mono float32 signal whose speech occupies [start_s, end_s]."""

    samples: np.ndarray
    sample_rate: int
    start_s: float
    end_s: float

    def padded(self, lead_s: float, trail_s: float, noise: float = 0.0, seed: int = 0) -> Speech:
        """The same speech with ``lead_s``/``trail_s`` of silence (or white noise of rms ``noise``) around it."""
        sr = self.sample_rate
        body = self.samples[int(self.start_s * sr) : int(np.ceil(self.end_s * sr))]
        signal = np.concatenate([np.zeros(int(lead_s * sr)), body, np.zeros(int(trail_s * sr))])
        signal += noise * np.random.default_rng(seed).standard_normal(len(signal))
        start = int(lead_s * sr) / sr
        return Speech(signal.astype(np.float32), sr, start, start + len(body) / sr)


def speech_bounds_by_level(samples: np.ndarray, sample_rate: int, rel: float = 0.01) -> tuple[float, float]:
    """First and last sample above ``rel`` of the peak, in seconds (where the voice starts and stops)."""
    loud = np.flatnonzero(np.abs(samples) > rel * np.max(np.abs(samples)))
    return loud[0] / sample_rate, (loud[-1] + 1) / sample_rate


def synthetic_speech(sample_rate: int, syllables: list[tuple[float, float]], f0: float = 130.0) -> np.ndarray:
    """A voiced, speech-like signal: harmonics of ``f0`` shaped by two formants, on at each (start, end)."""
    total = max(end for _, end in syllables) + 0.5
    t = np.arange(int(total * sample_rate)) / sample_rate
    vibrato = f0 * (1 + 0.03 * np.sin(2 * np.pi * 5 * t))
    phase = 2 * np.pi * np.cumsum(vibrato) / sample_rate
    voice = np.zeros_like(t)
    for k in range(1, 30):
        freq = k * f0
        if freq > sample_rate / 2 - 200:
            break
        weight = np.exp(-(((freq - 700) / 250) ** 2)) + 0.6 * np.exp(-(((freq - 1200) / 300) ** 2)) + 0.05 / k
        voice += weight * np.sin(k * phase)
    envelope = np.zeros_like(t)
    for start, end in syllables:
        inside = (t >= start) & (t < end)
        envelope[inside] = np.sin(np.pi * (t[inside] - start) / (end - start)) ** 0.5
    signal = voice * envelope
    return (0.5 * signal / np.max(np.abs(signal))).astype(np.float32)


def sparse_long_wav(path, hours: float, head: np.ndarray, rate: int) -> None:
    """A 16-bit WAV whose header and size say ``hours`` long, with ``head`` at the start (sparse on disk)."""
    frames = int(hours * 3600 * rate)
    data_bytes = frames * 2
    header = b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVE"
    header += b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
    header += b"data" + struct.pack("<I", data_bytes)
    with open(path, "wb") as f:
        f.write(header)
        f.write((np.clip(head, -1, 1) * 32767).astype("<i2").tobytes())
        f.truncate(len(header) + data_bytes)
