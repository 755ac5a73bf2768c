"""How good a reference recording is for cloning: a verdict (good / usable / poor) with one concrete piece
of advice per problem, from cheap measures on the recording as made (before cleaning changes its level).

Measured: how much speech there is, the level of the voice, clipping, the noise floor (an SNR estimate from
the frames between words), the room's echo (how fast the voice dies away after words end: dry speech falls
tens of dB in 50 ms, a reverberant room only a few), and long pauses inside the speech. Numpy in, no Qt.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from studio.audio import vad
from studio.audio.dsp import detect_clipping, resample
from studio.request import PROMPT_LENGTH_ADVICE

GOOD, USABLE, POOR = "good", "usable", "poor"
_RANK = {GOOD: 0, USABLE: 1, POOR: 2}
#: thresholds: (usable below / poor below) or (usable above / poor above)
SPEECH_S = (5.0, 3.0)
SNR_DB = (25.0, 15.0)
SPEECH_RMS_DBFS = (-30.0, -40.0)
CLIPPED_PLACES = (1, 4)
ECHO_S = (0.45, 0.8)  # reverberation time estimate
LONG_PAUSE_S = 2.0
_HOP_S = 0.01


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the recording: what, how bad, the figure, and what to do."""

    code: str  # "short", "quiet", "clipped", "noisy", "echo", "pause", "long"
    severity: str  # USABLE or POOR
    figure: str
    advice: str


@dataclass
class QualityReport:
    """The verdict and its reasons; ``measures`` holds the raw figures (JSON-serialisable)."""

    verdict: str
    problems: list[Problem] = field(default_factory=list)
    measures: dict = field(default_factory=dict)

    def add_problem(self, code: str, figure: str, advice: str, severity: str = POOR) -> None:
        """Add a problem found beyond the recording's own measures; the verdict follows the worst."""
        self.problems.append(Problem(code, severity, figure, advice))
        self.verdict = max((self.verdict, severity), key=_RANK.__getitem__)

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        """The verdict and advice as lines (the ``clean`` command prints them)."""
        lines = [f"Reference quality: {self.verdict}"]
        lines += [f"  - {p.figure}: {p.advice}" for p in self.problems]
        return "\n".join(lines)


def _grade(value: float, usable: float, poor: float, *, low_is_bad: bool) -> str:
    if low_is_bad:
        return POOR if value < poor else USABLE if value < usable else GOOD
    return POOR if value > poor else USABLE if value > usable else GOOD


def _energy_db(samples16k: np.ndarray) -> np.ndarray:
    hop = int(vad.VAD_RATE * _HOP_S)
    n = len(samples16k) // hop
    frames = samples16k[: n * hop].astype(np.float64).reshape(n, hop)
    return 10.0 * np.log10(np.mean(frames * frames, axis=1) + 1e-12)


def _speech_mask(segments: list[vad.SpeechSegment], frames: int) -> np.ndarray:
    mask = np.zeros(frames, dtype=bool)
    for segment in segments:
        mask[int(segment.start_s / _HOP_S) : int(np.ceil(segment.end_s / _HOP_S))] = True
    return mask


def echo_seconds(energy: np.ndarray, floor_db: float) -> float:
    """A reverberation-time estimate (s to fall 60 dB) from the steepest sustained falls of the envelope.

    Word endings in a dry room fall as fast as the voice stops; in a reverberant one no faster than the room
    lets the sound die, so the fastest 50 ms falls (their 90th percentile) bound the decay rate.
    """
    span = int(round(0.05 / _HOP_S))
    if energy.size <= span:
        return 0.0
    falls = energy[:-span] - energy[span:]  # dB lost over 50 ms, from each frame
    loud = energy[:-span] > floor_db + 20.0  # falls that start well above the noise
    if np.count_nonzero(loud) < 5:
        return 0.0
    rate = float(np.percentile(falls[loud], 90)) / 0.05  # dB per second
    return 60.0 / rate if rate > 1e-3 else float("inf")


def assess_reference(samples: np.ndarray, sample_rate: int) -> QualityReport:
    """Grade a mono recording (any rate) as a cloning reference, with advice per problem."""
    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    x16 = resample(x, int(sample_rate), vad.VAD_RATE) if sample_rate != vad.VAD_RATE else x
    segments = vad.speech_segments(x16)
    speech_s = float(sum(s.end_s - s.start_s for s in segments))
    measures: dict = {"duration_s": round(x.size / sample_rate, 2), "speech_s": round(speech_s, 2)}
    if not segments:
        problem = Problem("short", POOR, "no speech found", "record yourself reading a few sentences aloud")
        return QualityReport(POOR, [problem], measures)
    problems: list[Problem] = []

    grade = _grade(speech_s, *SPEECH_S, low_is_bad=True)
    if grade != GOOD:
        problems.append(
            Problem(
                "short", grade, f"{speech_s:.1f} s of speech", f"record more speech: {PROMPT_LENGTH_ADVICE}"
            )
        )

    energy = _energy_db(x16)
    mask = _speech_mask(segments, energy.size)
    speech_db = float(np.median(energy[mask]))
    gaps = energy[~mask]
    noise_db = float(np.median(gaps)) if gaps.size >= 20 else float(np.percentile(energy, 5))
    snr = speech_db - noise_db
    measures.update(speech_rms_dbfs=round(speech_db, 1), noise_dbfs=round(noise_db, 1), snr_db=round(snr, 1))

    grade = _grade(speech_db, *SPEECH_RMS_DBFS, low_is_bad=True)
    if grade != GOOD:
        problems.append(
            Problem(
                "quiet", grade, f"voice at {speech_db:.0f} dBFS", "move closer to the mic or raise its gain"
            )
        )
    clipped, places = detect_clipping(x)
    measures.update(clipped_samples=clipped, clipped_places=places)
    grade = _grade(places, *CLIPPED_PLACES, low_is_bad=False) if places else GOOD
    if grade != GOOD:
        problems.append(
            Problem(
                "clipped", grade, f"{places} clipped place(s)", "lower the mic gain or move back a little"
            )
        )
    grade = _grade(snr, *SNR_DB, low_is_bad=True)
    if grade != GOOD:
        problems.append(
            Problem(
                "noisy",
                grade,
                f"noise {snr:.0f} dB below the voice",
                "record in a quieter room (or switch on Reduce noise)",
            )
        )
    echo = echo_seconds(energy, noise_db)
    measures["echo_s"] = round(echo, 2) if np.isfinite(echo) else None
    grade = _grade(echo, *ECHO_S, low_is_bad=False)
    if grade != GOOD:
        problems.append(
            Problem(
                "echo",
                grade,
                f"room echo ~{echo:.1f} s" if np.isfinite(echo) else "strong room echo",
                "record in a smaller, furnished room, closer to the mic",
            )
        )
    for before, after in zip(segments, segments[1:], strict=False):
        pause = after.start_s - before.end_s
        if pause >= LONG_PAUSE_S:
            problems.append(
                Problem(
                    "pause",
                    USABLE,
                    f"{pause:.1f} s pause at {before.end_s:.1f} s",
                    f"cut the {pause:.0f} s pause at {before.end_s:.1f} s",
                )
            )
    verdict = max((p.severity for p in problems), key=_RANK.__getitem__, default=GOOD)
    return QualityReport(verdict, problems, measures)
