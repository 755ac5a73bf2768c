"""Voice activity detection for trimming prompts and finding pauses to cut at.

The detector is WebRTC's (the ``webrtcvad-wheels`` package: a small compiled library with wheels for
Linux, macOS and Windows, no torch, no model file). Silero's VAD is more accurate but its package pulls in
torch and torchaudio, whose compiled part does not load beside the CPU torch here. WebRTC decisions are
smoothed (short blips dropped, short gaps filled) and gated by a relative energy floor so steady hum or
hiss is not taken for speech.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: WebRTC's VAD runs at 16 kHz on 10, 20 or 30 ms frames of int16 audio.
VAD_RATE = 16000
FRAME_MS = 30
FRAME = VAD_RATE * FRAME_MS // 1000
#: 0 (lenient) .. 3 (aggressive about calling frames non-speech).
AGGRESSIVENESS = 3
#: Frames quieter than the loudest frame by more than this are never speech.
ENERGY_FLOOR_DB = 45.0
#: Frames must also stand this far above the noise floor (the 10th percentile of frame energies).
NOISE_MARGIN_DB = 6.0
MIN_SPEECH_S = 0.09
#: Edge refinement: how far from the detector's edge to look, and what counts as sound there.
EDGE_SEARCH_S = 0.2
EDGE_NOISE_MARGIN_DB = 10.0
EDGE_FLOOR_DB = 50.0
#: Silence kept before and after the speech so onsets and decays are not clipped.
EDGE_PAD_S = 0.04
MAX_GAP_S = 0.3


@dataclass(frozen=True)
class SpeechSegment:
    """One stretch of speech, in seconds from the start of the analysed signal."""

    start_s: float
    end_s: float


@dataclass(frozen=True)
class CutPoint:
    """A proposed end for an over-long prompt: the middle of a pause (or, failing that, a quiet spot)."""

    time_s: float
    pause_s: float
    kind: str  # "pause" or "quietest"


def _frame_energy_db(frames: np.ndarray) -> np.ndarray:
    power = np.mean(np.square(frames, dtype=np.float64), axis=1)
    return 10.0 * np.log10(power + 1e-12)


def voiced_frames(samples16k: np.ndarray) -> np.ndarray:
    """One bool per 30 ms frame of 16 kHz float audio: does it hold speech?

    The signal is scaled to a fixed peak first so the decision does not depend on the recording level.
    """
    import webrtcvad

    n_frames = len(samples16k) // FRAME
    if n_frames == 0:
        return np.zeros(0, dtype=bool)
    frames = samples16k[: n_frames * FRAME].reshape(n_frames, FRAME)
    top = float(np.max(np.abs(frames)))
    if top <= 0:
        return np.zeros(n_frames, dtype=bool)
    pcm = np.clip(frames * (0.7 / top) * 32767.0, -32768, 32767).astype("<i2")
    vad = webrtcvad.Vad(AGGRESSIVENESS)
    decisions = np.fromiter(
        (vad.is_speech(row.tobytes(), VAD_RATE) for row in pcm), dtype=bool, count=n_frames
    )
    energy = _frame_energy_db(frames)
    gate = max(energy.max() - ENERGY_FLOOR_DB, np.percentile(energy, 10) + NOISE_MARGIN_DB)
    return decisions & (energy > gate)


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) frame index pairs of the True runs in ``flags``."""
    padded = np.concatenate(([False], flags, [False]))
    edges = np.flatnonzero(np.diff(padded.astype(np.int8)))
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True))


def speech_segments(samples16k: np.ndarray) -> list[SpeechSegment]:
    """Smoothed stretches of speech: gaps under 0.3 s are bridged, blips under 90 ms dropped."""
    runs = _runs(voiced_frames(samples16k))
    max_gap = int(round(MAX_GAP_S * 1000 / FRAME_MS))
    merged: list[list[int]] = []
    for start, end in runs:
        if merged and start - merged[-1][1] <= max_gap:
            merged[-1][1] = end
        else:
            merged.append([start, end])
    min_frames = int(round(MIN_SPEECH_S * 1000 / FRAME_MS))
    seconds = FRAME_MS / 1000
    return [SpeechSegment(s * seconds, e * seconds) for s, e in merged if e - s >= min_frames]


def propose_cuts(
    samples16k: np.ndarray,
    *,
    max_s: float = 30.0,
    min_s: float = 3.0,
    segments: list[SpeechSegment] | None = None,
    limit: int = 5,
) -> list[CutPoint]:
    """Where to end an over-long prompt so it lasts between ``min_s`` and ``max_s``: best first.

    Candidates are the middles of pauses between speech segments, ranked by pause length (capped at 1 s)
    with a small bonus for keeping more speech. With no pause in range, the quietest 30 ms before
    ``max_s`` is offered instead.
    """
    duration = len(samples16k) / VAD_RATE
    if duration <= max_s:
        return []
    if segments is None:
        segments = speech_segments(samples16k)
    candidates = []
    for before, after in zip(segments, segments[1:], strict=False):
        middle = (before.end_s + after.start_s) / 2
        if min_s <= middle <= max_s:
            candidates.append(CutPoint(round(middle, 3), round(after.start_s - before.end_s, 3), "pause"))
    candidates.sort(key=lambda c: min(c.pause_s, 1.0) + 0.02 * c.time_s, reverse=True)
    if candidates:
        return candidates[:limit]
    lo = int(max(min_s, max_s - 2.0) * VAD_RATE) // FRAME
    hi = int(max_s * VAD_RATE) // FRAME
    frames = samples16k[lo * FRAME : hi * FRAME].reshape(-1, FRAME)
    quietest = lo + int(np.argmin(_frame_energy_db(frames)))
    return [CutPoint(round((quietest + 0.5) * FRAME / VAD_RATE, 3), 0.0, "quietest")]


def _energy_10ms(samples16k: np.ndarray) -> np.ndarray:
    hop = VAD_RATE // 100
    n = len(samples16k) // hop
    return _frame_energy_db(samples16k[: n * hop].reshape(n, hop)) if n else np.zeros(0)


def speech_bounds(samples16k: np.ndarray, *, pad_s: float = EDGE_PAD_S) -> tuple[float, float] | None:
    """(start_s, end_s) of the speech in a 16 kHz signal, edges refined to 10 ms and padded; None if none.

    WebRTC's 30 ms decisions lag at the edges (it holds speech on for a few frames after it ends), so each
    edge is moved to the outermost 10 ms frame within ``EDGE_SEARCH_S`` that rises clearly above the noise.
    """
    segments = speech_segments(samples16k)
    if not segments:
        return None
    energy = _energy_10ms(samples16k)
    threshold = max(np.percentile(energy, 10) + EDGE_NOISE_MARGIN_DB, energy.max() - EDGE_FLOOR_DB)
    loud = energy > threshold
    search = int(round(EDGE_SEARCH_S * 100))
    first = int(round(segments[0].start_s * 100))
    last = int(round(segments[-1].end_s * 100))  # exclusive
    window = loud[max(0, first - search) : first + search]
    start = max(0, first - search) + int(np.argmax(window)) if window.any() else first
    window = loud[max(0, last - search) : last + search]
    end = max(0, last - search) + len(window) - int(np.argmax(window[::-1])) if window.any() else last
    duration = len(samples16k) / VAD_RATE
    return max(0.0, start / 100 - pad_s), min(duration, end / 100 + pad_s)
