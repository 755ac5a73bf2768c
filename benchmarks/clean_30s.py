"""Time to clean a 30 s reference recording (48 kHz stereo, 24-bit WAV) into a prompt, on this machine.

Run: ``.venv/bin/python benchmarks/clean_30s.py [--repeat N]``. Prints the first (cold: imports included)
and the median warm time, with and without denoise. Target: under 1 s warm without denoise on the CPU.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TEXT = (
    "The quick brown fox jumps over the lazy dog. A voice studio needs a clean reference recording, "
    "trimmed and normalised, so that the model can copy the voice and not the room. "
    "Every step of the cleanup is written down in a report with figures before and after. "
    "The original recording is kept untouched beside the cleaned one. "
    "This paragraph is long enough to last about thirty seconds when it is spoken at a calm pace, "
    "which is the longest prompt the model accepts."
)


def make_recording(folder: Path, rate: int = 48000, target_s: float = 30.0) -> Path:
    """About ``target_s`` of speech (espeak-ng, else synthetic syllables) with 0.5 s of room noise around it."""
    import soundfile as sf
    import soxr

    if shutil.which("espeak-ng"):
        raw = folder / "espeak.wav"
        subprocess.run(["espeak-ng", "-s", "150", "-w", str(raw), TEXT], check=True, capture_output=True)
        speech, sr = sf.read(raw, dtype="float32")
        speech = soxr.resample(speech, sr, rate)
    else:
        t = np.arange(int(target_s * rate)) / rate
        speech = (0.5 * np.sin(2 * np.pi * 140 * t) * (np.sin(2 * np.pi * 2.5 * t) > 0)).astype(np.float32)
    speech = speech[: int((target_s - 1.0) * rate)]
    pad = np.zeros(int(0.5 * rate), dtype=np.float32)
    mono = np.concatenate([pad, 0.7 * speech, pad])
    mono += 0.002 * np.random.default_rng(0).standard_normal(len(mono)).astype(np.float32)
    stereo = np.stack([mono, 0.9 * mono], axis=1)
    path = folder / "recording.wav"
    sf.write(path, stereo, rate, subtype="PCM_24")
    return path


def time_clean(source: Path, folder: Path, denoise: bool, repeat: int) -> tuple[list[float], object]:
    from studio.audio.clean import CleanOptions, clean_file

    times, report = [], None
    for i in range(repeat):
        out = folder / f"prompt-{denoise}-{i}.wav"
        start = time.perf_counter()
        report = clean_file(source, out, CleanOptions(denoise=denoise))
        times.append(time.perf_counter() - start)
    return times, report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        source = make_recording(folder)
        import soundfile as sf

        info = sf.info(source)
        print(f"input: {info.duration:.1f} s, {info.samplerate} Hz, {info.channels} ch, {info.subtype}")
        for denoise in (False, True):
            times, report = time_clean(source, folder, denoise, args.repeat + 1)
            label = "clean + denoise" if denoise else "clean"
            print(
                f"{label:<16} cold {times[0]:.3f} s   warm median {statistics.median(times[1:]):.3f} s "
                f"(min {min(times[1:]):.3f} s, {args.repeat} runs)   prompt {report.after.duration_s:.2f} s"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
