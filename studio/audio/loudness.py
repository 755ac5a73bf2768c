"""Integrated loudness (EBU R128 / ITU-R BS.1770, through pyloudnorm) and normalisation to a target with a
true-peak ceiling: the gain that reaches the target, lowered if the 4x-oversampled peak would pass the ceiling."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BLOCK_S = 0.4  # BS.1770's gating block: shorter audio is measured over repeats of itself
TRUE_PEAK_OVERSAMPLING = 4
DEFAULT_CEILING_DBTP = -1.0


@dataclass(frozen=True)
class Normalised:
    samples: np.ndarray
    gain_db: float
    loudness_before: float  # LUFS; -inf for silence
    loudness_after: float
    peak_limited: bool  # the ceiling, not the target, set the gain

    def note(self, target: float) -> str:
        if self.peak_limited:
            return (
                f"reached {self.loudness_after:.1f} LUFS, not {target:.1f}: louder would pass the "
                f"true-peak ceiling"
            )
        return ""


def integrated_loudness(samples: np.ndarray, sample_rate: int) -> float:
    """Integrated loudness in LUFS (-inf for silence)."""
    import pyloudnorm

    samples = np.asarray(samples, dtype=np.float64)
    if samples.size == 0 or not np.any(samples):
        return float("-inf")
    block = int(BLOCK_S * sample_rate) + 1
    if samples.size < block:  # one gating block at least; repeats keep the level of the clip
        samples = np.tile(samples, block // samples.size + 1)
    return float(pyloudnorm.Meter(sample_rate).integrated_loudness(samples))


def true_peak_dbtp(samples: np.ndarray) -> float:
    """The peak of the signal oversampled 4x (BS.1770 annex 2), in dB of full scale."""
    from scipy.signal import resample_poly

    if samples.size == 0:
        return float("-inf")
    upsampled = resample_poly(np.asarray(samples, dtype=np.float64), TRUE_PEAK_OVERSAMPLING, 1)
    peak = max(float(np.max(np.abs(upsampled))), float(np.max(np.abs(samples))))
    return 20 * np.log10(peak) if peak > 0 else float("-inf")


def normalise(
    samples: np.ndarray, sample_rate: int, target_lufs: float, ceiling_dbtp: float = DEFAULT_CEILING_DBTP
) -> Normalised:
    """``samples`` scaled to ``target_lufs`` integrated loudness, never past ``ceiling_dbtp`` true peak.
    Silence is returned as it is."""
    before = integrated_loudness(samples, sample_rate)
    if not np.isfinite(before):
        return Normalised(np.asarray(samples, dtype=np.float32), 0.0, before, before, False)
    gain_db = target_lufs - before
    headroom = ceiling_dbtp - true_peak_dbtp(samples)
    limited = gain_db > headroom
    gain_db = min(gain_db, headroom)
    out = (np.asarray(samples, dtype=np.float64) * 10 ** (gain_db / 20)).astype(np.float32)
    return Normalised(out, gain_db, before, before + gain_db, limited)


def master(
    samples: np.ndarray,
    rate: int,
    to_rate: int = 0,
    loudness_lufs: float | None = None,
    ceiling_dbtp: float = DEFAULT_CEILING_DBTP,
) -> tuple[np.ndarray, int, list[str]]:
    """An export's last step: resampled to ``to_rate`` (0: as it is, soxr), then normalised to
    ``loudness_lufs`` (None: as it is) under the true-peak ceiling; (samples, rate, notes for the user)."""
    from studio.audio.export import resample

    out_rate = to_rate or rate
    samples = resample(np.asarray(samples, dtype=np.float32), rate, out_rate)
    notes = []
    if loudness_lufs is not None:
        level = normalise(samples, out_rate, loudness_lufs, ceiling_dbtp)
        samples = level.samples
        if level.peak_limited:
            notes.append(level.note(loudness_lufs))
    return samples, out_rate, notes
