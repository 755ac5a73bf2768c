"""Signal operations the prompt cleaner and the reference's quality check both build on: high-quality
resampling (soxr) and the detection of clipped, flat-topped peaks."""

from __future__ import annotations

import numpy as np

#: soxr's "very high quality" preset: linear phase, 175 dB stop-band, negligible cost at these lengths.
RESAMPLE_QUALITY = "VHQ"


def detect_clipping(samples: np.ndarray) -> tuple[int, int]:
    """(clipped samples, clipped places): runs of 3+ equal samples at the signal's peak (flat tops)."""
    magnitude = np.abs(samples)
    top = float(magnitude.max()) if samples.size else 0.0
    if top <= 0.0:
        return 0, 0
    flat = (magnitude[1:] >= 0.999 * top) & (samples[1:] == samples[:-1])
    edges = np.flatnonzero(np.diff(np.concatenate(([0], flat.view(np.int8), [0]))))
    lengths = edges[1::2] - edges[0::2]  # pairs of equal neighbours; a run of n pairs is n+1 samples
    runs = lengths[lengths >= 2]
    return int(np.sum(runs + 1)), int(len(runs))


def resample(samples: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """High-quality resampling with soxr (float32 in, float32 out)."""
    if rate_in == rate_out:
        return samples.astype(np.float32, copy=False)
    import soxr

    return soxr.resample(samples, rate_in, rate_out, quality=RESAMPLE_QUALITY).astype(np.float32, copy=False)
