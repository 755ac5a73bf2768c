"""Turn a reference recording into a clean CosyVoice2 prompt: 16 kHz mono, trimmed, at -3 dBFS peak.

Every step (clipping check, DC removal, resampling, optional denoise, trimming, length check, peak
normalisation) is recorded with its figures in a CleanReport, a dataclass that serialises to JSON. Over-long
prompts get cut offers at pauses rather than an error. ``clean_file`` never touches the original file.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from studio.audio import vad
from studio.audio.dsp import RESAMPLE_QUALITY, detect_clipping, resample
from studio.audio.errors import ExportError, NoSpeechError, PromptTooLongError, UnsupportedAudioError
from studio.audio.io import (
    MAX_SAMPLE_RATE,
    MIN_SAMPLE_RATE,
    load_audio,
    peak,
    probe,
    rms,
    sentence_start,
    to_dbfs,
    validate_samples,
)
from studio.audio.quality import assess_reference
from studio.request import MAX_PROMPT_SECONDS, PROMPT_LENGTH_ADVICE

PROMPT_RATE = vad.VAD_RATE
#: The first seed's prompt level, and the model's prompt length limits.
TARGET_PEAK_DBFS = -3.0
MIN_PROMPT_S = 3.0
MAX_PROMPT_S = MAX_PROMPT_SECONDS


@dataclass
class CleanOptions:
    """How to clean; ``cut`` is None (only offer cuts), ``"auto"`` (take the best offer) or seconds."""

    denoise: bool = False
    denoise_strength: float = 0.8  # see studio.audio.denoise.DEFAULT_STRENGTH
    target_peak_dbfs: float = TARGET_PEAK_DBFS
    min_s: float = MIN_PROMPT_S
    max_s: float = MAX_PROMPT_S
    cut: float | str | None = None
    edge_pad_s: float = vad.EDGE_PAD_S
    #: Longest part of a recording that clean_file reads (a 2-hour file costs no more than this).
    max_read_s: float = 120.0


@dataclass
class AudioStats:
    """Figures describing a signal, shown before and after cleaning."""

    sample_rate: int
    duration_s: float
    peak_dbfs: float | None
    rms_dbfs: float | None
    dc_offset: float

    @classmethod
    def measure(cls, samples: np.ndarray, sample_rate: int) -> AudioStats:
        return cls(
            sample_rate,
            round(len(samples) / sample_rate, 4),
            _db(peak(samples)),
            _db(rms(samples)),
            round(float(np.mean(samples, dtype=np.float64)), 6) if samples.size else 0.0,
        )

    def line(self) -> str:
        peak_text = "silent" if self.peak_dbfs is None else f"peak {self.peak_dbfs:.2f} dBFS"
        rms_text = "" if self.rms_dbfs is None else f", rms {self.rms_dbfs:.1f} dBFS"
        return (
            f"{self.sample_rate} Hz, {self.duration_s:.2f} s, {peak_text}{rms_text}, DC {self.dc_offset:+.5f}"
        )


@dataclass
class CleanStep:
    """One step of the cleanup: what it did, in a sentence, and its figures."""

    name: str
    summary: str
    figures: dict = field(default_factory=dict)


@dataclass
class CleanReport:
    """Everything cleaning did to a recording, with before/after figures; ``to_json()`` for files."""

    before: AudioStats
    after: AudioStats | None = None
    steps: list[CleanStep] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cut_offers: list[dict] = field(default_factory=list)
    input: dict | None = None
    output_path: str | None = None
    quality: dict | None = None  # studio.audio.quality.QualityReport.to_dict() of the recording as made

    def add(self, name: str, summary: str, **figures) -> None:
        self.steps.append(CleanStep(name, summary, figures))

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def text(self) -> str:
        """The report as lines for a terminal."""
        lines = []
        if self.input:
            lines.append(
                f"Input : {self.input['path']} ({self.input['format']} {self.input['subtype']}, "
                f"{self.input['channels']} ch, {self.input['duration_s']:.2f} s)"
            )
        lines.append(f"Before: {self.before.line()}")
        lines += [f"  {i}. {step.name:<10} {step.summary}" for i, step in enumerate(self.steps, 1)]
        if self.after is not None:
            lines.append(f"After : {self.after.line()}, mono")
        if self.output_path:
            lines.append(f"Output: {self.output_path} (the original is untouched)")
        lines += [f"Warning: {w}" for w in self.warnings]
        if self.quality is not None:
            lines.append(f"Reference quality: {self.quality['verdict']}")
            lines += [f"  - {p['figure']}: {p['advice']}" for p in self.quality["problems"]]
        return "\n".join(lines)


@dataclass
class CleanResult:
    """The cleaned prompt (float32 mono at 16 kHz) and the report of how it was made."""

    samples: np.ndarray
    sample_rate: int
    report: CleanReport
    quality: Any = None  # studio.audio.quality.QualityReport of the recording as made


def _db(value: float) -> float | None:
    return None if value <= 0 else round(to_dbfs(value), 3)


def _apply_length_rules(x: np.ndarray, report: CleanReport, options: CleanOptions) -> np.ndarray:
    duration = len(x) / PROMPT_RATE
    if duration < options.min_s:
        report.warnings.append(f"The speech lasts only {duration:.1f} s; {PROMPT_LENGTH_ADVICE}.")
    if duration <= options.max_s:
        report.add(
            "length",
            f"{duration:.2f} s of speech: within {options.min_s:g}-{options.max_s:g} s",
            duration_s=round(duration, 3),
        )
        return x
    offers = vad.propose_cuts(x, max_s=options.max_s, min_s=options.min_s)
    report.cut_offers = [asdict(offer) for offer in offers]
    if options.cut is None:
        best = offers[0]
        report.warnings.append(
            f"The speech lasts {duration:.1f} s; CosyVoice2 takes at most {options.max_s:g} s. "
            f"Cut at {best.time_s:.2f} s ({'a pause' if best.kind == 'pause' else 'a quiet spot'}) "
            "to use it as a prompt."
        )
        report.add(
            "length",
            f"{duration:.2f} s: too long, {len(offers)} cut(s) offered, not cut",
            duration_s=round(duration, 3),
        )
        return x
    if options.cut == "auto":
        best = offers[0]
        end_s = best.time_s - best.pause_s / 2 + options.edge_pad_s if best.kind == "pause" else best.time_s
    else:
        end_s = float(options.cut)
        if not 0 < end_s:
            raise ValueError(f"The cut must be a positive time in seconds, not {options.cut!r}")
    end_s = min(end_s, duration)
    if end_s < options.min_s:
        report.warnings.append(
            f"After the cut at {end_s:.1f} s the prompt is shorter than {options.min_s:g} s."
        )
    report.add(
        "cut",
        f"cut at {end_s:.2f} s (of {duration:.2f} s)",
        cut_s=round(end_s, 3),
        duration_before_s=round(duration, 3),
    )
    return x[: int(round(end_s * PROMPT_RATE))]


def clean_prompt(
    samples: np.ndarray, sample_rate: int, options: CleanOptions | None = None, *, name: str = "the recording"
) -> CleanResult:
    """Clean mono float samples into a prompt; raises SilentAudioError, NoSpeechError, InvalidSamplesError.

    ``name`` is what the messages call the recording: its file name, or a generic name ("the recording")."""
    options = options or CleanOptions()
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(
            f"clean_prompt expects mono samples, got shape {x.shape}; load files with load_audio"
        )
    sample_rate = int(sample_rate)
    if not MIN_SAMPLE_RATE <= sample_rate <= MAX_SAMPLE_RATE:
        raise UnsupportedAudioError(
            f"{sentence_start(name)} is sampled at {sample_rate} Hz; the studio cleans {MIN_SAMPLE_RATE}-{MAX_SAMPLE_RATE} Hz audio."
        )
    validate_samples(x, name=name)
    report = CleanReport(before=AudioStats.measure(x, sample_rate))
    quality = assess_reference(x, sample_rate)
    report.quality = quality.to_dict()

    clipped, places = detect_clipping(x)
    if places:
        report.warnings.append(
            f"{sentence_start(name)} is clipped in {places} places (distorted peaks); the cloned voice will copy that "
            "distortion. Record again with a lower input level if you can."
        )
    report.add(
        "clipping",
        f"{places} clipped places, {clipped} samples" if places else "none found",
        clipped_samples=clipped,
        clipped_places=places,
    )

    dc = float(np.mean(x, dtype=np.float64))
    x = x - np.float32(dc)
    report.add("dc", f"removed an offset of {dc:+.5f}", offset_removed=round(dc, 6))

    x = resample(x, sample_rate, PROMPT_RATE)
    report.add(
        "resample",
        f"{sample_rate} Hz -> {PROMPT_RATE} Hz (soxr {RESAMPLE_QUALITY})"
        if sample_rate != PROMPT_RATE
        else "already 16 kHz",
        rate_in=sample_rate,
        rate_out=PROMPT_RATE,
    )

    if options.denoise:
        from studio.audio.denoise import denoise_samples

        before_rms = rms(x)
        x = denoise_samples(x, PROMPT_RATE, strength=options.denoise_strength)
        change = to_dbfs(rms(x)) - to_dbfs(before_rms) if rms(x) > 0 and before_rms > 0 else 0.0
        report.add(
            "denoise",
            f"noisereduce, strength {options.denoise_strength:g}; level {change:+.1f} dB",
            strength=options.denoise_strength,
            rms_change_db=round(change, 2),
        )

    bounds = vad.speech_bounds(x, pad_s=options.edge_pad_s)
    if bounds is None:
        raise NoSpeechError(
            f"No speech was found in {name}; record someone speaking ({PROMPT_LENGTH_ADVICE})."
        )
    start_s, end_s = bounds
    total_s = len(x) / PROMPT_RATE
    x = x[int(round(start_s * PROMPT_RATE)) : int(round(end_s * PROMPT_RATE))]
    report.add(
        "trim",
        f"speech {start_s:.2f}-{end_s:.2f} s; cut {start_s:.2f} s before, {total_s - end_s:.2f} s after",
        speech_start_s=round(start_s, 3),
        speech_end_s=round(end_s, 3),
        trimmed_start_s=round(start_s, 3),
        trimmed_end_s=round(total_s - end_s, 3),
    )

    x = _apply_length_rules(x, report, options)
    if len(x) / PROMPT_RATE > options.max_s:  # not cut: graded as the prompt it would be, unusable
        quality.add_problem(
            "long", f"{len(x) / PROMPT_RATE:.1f} s of speech", f"cut it to at most {options.max_s:g} s"
        )
        report.quality = quality.to_dict()

    top = peak(x)
    gain = 10.0 ** (options.target_peak_dbfs / 20.0) / top if top > 0 else 1.0
    x = (x.astype(np.float64) * gain).astype(np.float32)
    report.add(
        "normalise",
        f"peak {to_dbfs(top):.2f} -> {options.target_peak_dbfs:.2f} dBFS ({20 * math.log10(gain):+.2f} dB)",
        gain_db=round(20 * math.log10(gain), 3),
    )
    report.after = AudioStats.measure(x, PROMPT_RATE)
    return CleanResult(x, PROMPT_RATE, report, quality)


def _output_format(path: Path):
    from studio.audio.export import ExportFormat

    formats = {".wav": ExportFormat.WAV_INT16, ".flac": ExportFormat.FLAC}
    try:
        return formats[path.suffix.lower()]
    except KeyError:
        raise ExportError(
            f"Save the cleaned prompt as .wav or .flac, not {path.suffix or 'no extension'}."
        ) from None


def clean_file(
    input_path: str | os.PathLike,
    output_path: str | os.PathLike,
    options: CleanOptions | None = None,
    *,
    overwrite: bool = False,
) -> CleanReport:
    """Clean ``input_path`` into a new file ``output_path`` (.wav int16 or .flac) and return the report.

    The input is never modified or replaced: an output naming the input raises ExportError. Recordings
    longer than ``options.max_read_s`` are read only that far (noted in the report).
    """
    from studio.audio.export import write_audio

    options = options or CleanOptions()
    source, target = Path(input_path), Path(output_path)
    info = probe(source)
    if target.resolve() == source.resolve() or (target.exists() and os.path.samefile(source, target)):
        raise ExportError(f"The cleaned prompt must go to a new file; {target} is the original recording.")
    fmt = _output_format(target)
    window_s = None if info.duration_s <= options.max_read_s else options.max_read_s
    audio = load_audio(source, duration_s=window_s, max_duration_s=None)
    result = clean_prompt(audio.samples, audio.sample_rate, options, name=source.name)
    report = result.report
    seconds = result.samples.size / result.sample_rate
    if seconds > min(options.max_s, MAX_PROMPT_SECONDS):  # synth and the studio would refuse the file
        offer = report.cut_offers[0]["time_s"] if report.cut_offers else None
        where = f" (the best cut is at {offer:.2f} s)" if offer is not None else ""
        raise PromptTooLongError(
            f"{source.name} has {seconds:.1f} s of speech; a prompt takes at most {MAX_PROMPT_SECONDS:g} s. "
            f"Cut it with --cut auto or --cut SECONDS{where}; nothing was written."
        )
    report.input = info.to_dict()
    load_summary = f"{info.format} {info.subtype}, {audio.downmix}"
    if window_s is not None:
        load_summary += f"; read the first {window_s:.0f} s of {info.duration_s:.0f} s"
        report.warnings.insert(
            0,
            f"{source.name} lasts {info.duration_s / 60:.1f} min; only its first {window_s:.0f} s were read.",
        )
    report.steps.insert(0, CleanStep("load", load_summary, {"read_s": round(audio.duration_s, 3)}))
    written = write_audio(target, result.samples, result.sample_rate, fmt, overwrite=overwrite)
    report.warnings += written.warnings
    report.output_path = str(target)
    return report
