"""What the voice panel runs on the audio core, off the GUI thread: reading an imported file, cleaning a
recording into a prompt, and the few lines of the cleanup report the panel shows."""

from __future__ import annotations

import numpy as np

AUDIO_FILTER = "Audio (*.wav *.flac *.ogg *.opus *.mp3 *.aif *.aiff);;All files (*)"


def clean_recording(samples: np.ndarray, sample_rate: int, denoise: bool, name: str = "the recording"):
    """Run the audio core's prompt cleanup (worker thread): a CleanResult (16 kHz samples + report).

    Over-long recordings are cut at the best pause the audio core offers (the model takes at most 30 s).
    ``name`` is what error messages call the recording (an imported file's name).
    """
    from studio.audio.clean import CleanOptions, clean_prompt

    return clean_prompt(samples, sample_rate, CleanOptions(denoise=denoise, cut="auto"), name=name)


def summarise_report(report) -> str:
    """A few lines for the panel: before -> after, the steps that changed something, and warnings."""
    before, after = report.before, report.after
    lines = [
        f"{before.duration_s:.1f} s → {after.duration_s:.1f} s, peak "
        f"{before.peak_dbfs if before.peak_dbfs is not None else -99:.1f} → {after.peak_dbfs:.1f} dBFS"
    ]
    lines += [
        f"{step.name}: {step.summary}" for step in report.steps if step.name in ("trim", "cut", "denoise")
    ]
    lines += [f"<span style='color:#ffb74d'>⚠ {w}</span>" for w in report.warnings]
    return "<br>".join(lines)


def load_file(path: str):
    from studio.audio.io import load_audio

    return load_audio(path, max_duration_s=120.0)
