"""Read audio files into float32 mono numpy arrays, checking the header first so hours are never loaded.

Anything libsndfile reads (WAV, FLAC, OGG Vorbis/Opus, MP3, AIFF, ...) at any bit depth and channel
count comes out as float32 mono in [-1, 1]; every failure is a specific ``AudioError``.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from studio.audio.errors import (
    AudioFileNotFoundError,
    AudioTooLongError,
    EmptyAudioError,
    InvalidSamplesError,
    NotAudioError,
    SilentAudioError,
    UnreadableAudioError,
    UnsupportedAudioError,
)

MIN_SAMPLE_RATE = 8000
MAX_SAMPLE_RATE = 384000
#: Longest recording load_audio reads whole unless the caller asks for more (or for a part).
DEFAULT_MAX_DURATION_S = 600.0
#: Peak below which a recording counts as silent (-60 dBFS).
SILENCE_PEAK = 1e-3
_BLOCK_FRAMES = 1 << 16
#: A mixed-down signal this much quieter than its channels means they cancel (opposite polarity).
_CANCEL_RATIO = 0.25


@dataclass(frozen=True)
class AudioInfo:
    """What the file header says: enough to decide how (and whether) to read it."""

    path: str
    format: str
    subtype: str
    sample_rate: int
    channels: int
    frames: int

    @property
    def duration_s(self) -> float:
        return self.frames / self.sample_rate if self.sample_rate else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "duration_s": round(self.duration_s, 4)}


@dataclass
class Audio:
    """Samples read from a file: float32 mono, plus where they came from and how they were mixed down."""

    samples: np.ndarray
    sample_rate: int
    info: AudioInfo
    offset_s: float = 0.0
    downmix: str = "mono"

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate


def _soundfile():
    import soundfile

    return soundfile


def _check_path(path: Path) -> None:
    if not path.exists():
        raise AudioFileNotFoundError(f"The audio file {path} does not exist.")
    if not path.is_file():
        raise AudioFileNotFoundError(f"{path} is a folder or a device, not an audio file.")
    if path.stat().st_size == 0:
        raise EmptyAudioError(f"The file {path.name} is empty (0 bytes): there is no audio in it.")
    if not os.access(path, os.R_OK):
        raise UnreadableAudioError(f"No permission to read {path}.")


def _open_error(path: Path, exc: Exception) -> Exception:
    """libsndfile failed to open a regular, readable file: it is not audio it knows, or it is damaged."""
    if "permission" in str(exc).lower():
        return UnreadableAudioError(f"No permission to read {path}.")
    return NotAudioError(
        f"{path.name} is not an audio file the studio can read, or it is damaged "
        "(WAV, FLAC, OGG, MP3 and AIFF work)."
    )


def probe(path: str | os.PathLike) -> AudioInfo:
    """Read only the header of ``path``; raises a specific AudioError for missing, empty or non-audio files."""
    path = Path(path)
    _check_path(path)
    sf = _soundfile()
    try:
        raw = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError, OSError) as exc:
        raise _open_error(path, exc) from exc
    info = AudioInfo(
        str(path), raw.format, raw.subtype, int(raw.samplerate), int(raw.channels), int(raw.frames)
    )
    if info.channels < 1:
        raise NotAudioError(f"{path.name} has no audio channels.")
    if not MIN_SAMPLE_RATE <= info.sample_rate <= MAX_SAMPLE_RATE:
        raise UnsupportedAudioError(
            f"{path.name} is sampled at {info.sample_rate} Hz; the studio reads {MIN_SAMPLE_RATE} Hz to "
            f"{MAX_SAMPLE_RATE} Hz. Convert it to 16-48 kHz first."
        )
    if info.frames <= 0:
        raise EmptyAudioError(f"{path.name} holds no audio samples.")
    return info


def _read_mono(
    path: Path, start: int, count: int, channel: int | None
) -> tuple[np.ndarray, np.ndarray, float]:
    """Read ``count`` frames from ``start`` block by block, mixing channels down as it goes.

    Returns the mono samples, each channel's energy and the mono energy (to spot channels that cancel).
    Memory stays at one block of all channels plus the mono result.
    """
    sf = _soundfile()
    out = np.empty(count, dtype=np.float32)
    filled = 0
    with sf.SoundFile(str(path)) as f:
        if start:
            f.seek(start)
        channel_energy = np.zeros(f.channels, dtype=np.float64)
        mono_energy = 0.0
        while filled < count:
            block = f.read(min(_BLOCK_FRAMES, count - filled), dtype="float32", always_2d=True)
            if len(block) == 0:
                break
            channel_energy += np.einsum("ij,ij->j", block, block, dtype=np.float64)
            mono = block[:, channel] if channel is not None else block.mean(axis=1, dtype=np.float32)
            mono_energy += float(np.dot(mono, mono))
            out[filled : filled + len(block)] = mono
            filled += len(block)
    return out[:filled], channel_energy, mono_energy


def load_audio(
    path: str | os.PathLike,
    *,
    offset_s: float = 0.0,
    duration_s: float | None = None,
    max_duration_s: float | None = DEFAULT_MAX_DURATION_S,
    allow_silent: bool = False,
) -> Audio:
    """Load ``path`` (or the part from ``offset_s`` lasting ``duration_s``) as float32 mono.

    The header is checked first: a recording longer than ``max_duration_s`` raises AudioTooLongError
    unless a ``duration_s`` window within the limit is asked for. Channels are averaged; when they cancel
    each other (one wired in opposite polarity) the loudest channel is taken instead.
    """
    path = Path(path)
    info = probe(path)
    start = max(0, int(round(offset_s * info.sample_rate)))
    if start >= info.frames:
        raise EmptyAudioError(
            f"{path.name} lasts {info.duration_s:.1f} s; there is nothing to read from {offset_s:.1f} s on."
        )
    available = info.frames - start
    count = available if duration_s is None else min(available, int(round(duration_s * info.sample_rate)))
    if count <= 0:
        raise EmptyAudioError(f"Nothing to read from {path.name}: the requested duration is zero.")
    if max_duration_s is not None and count > max_duration_s * info.sample_rate:
        raise AudioTooLongError(
            f"{path.name} lasts {_hms(info.duration_s)}; the limit is {_hms(max_duration_s)}. "
            "Read a part of it (an offset and a duration) instead.",
            duration_s=info.duration_s,
            limit_s=max_duration_s,
        )
    try:
        samples, channel_energy, mono_energy = _read_mono(path, start, count, channel=None)
        downmix = "mono" if info.channels == 1 else f"mean of {info.channels} channels"
        if info.channels > 1 and mono_energy < _CANCEL_RATIO * float(channel_energy.mean()):
            loudest = int(np.argmax(channel_energy))
            samples, _, _ = _read_mono(path, start, count, channel=loudest)
            downmix = f"channel {loudest + 1} of {info.channels} (the channels cancel when mixed)"
    except MemoryError as exc:
        raise AudioTooLongError(
            f"{path.name} is too long to load into memory; read a shorter part of it.",
            duration_s=info.duration_s,
            limit_s=count / info.sample_rate,
        ) from exc
    except (RuntimeError, OSError) as exc:
        raise UnreadableAudioError(
            f"{path.name} cannot be read to the end; the file may be damaged ({exc})."
        ) from exc
    if len(samples) == 0:
        raise EmptyAudioError(f"{path.name} holds no audio samples.")
    validate_samples(samples, name=path.name, allow_silent=allow_silent)
    return Audio(samples, info.sample_rate, info, offset_s=start / info.sample_rate, downmix=downmix)


def sentence_start(name: str) -> str:
    """``name`` as the first words of a sentence: a generic name ("the recording") capitalised, a file name
    ("notes.wav") as it is written."""
    return name[:1].upper() + name[1:] if name.startswith("the ") else name


def validate_samples(samples: np.ndarray, *, name: str = "the audio", allow_silent: bool = False) -> None:
    """Raise InvalidSamplesError for NaN/inf, EmptyAudioError for no samples, SilentAudioError for silence.

    ``name`` is what the messages call the samples: a file name, or a generic name such as "the recording"."""
    subject = sentence_start(name)
    if samples.size == 0:
        raise EmptyAudioError(f"{subject} holds no audio samples.")
    finite = np.isfinite(samples)
    if not finite.all():
        bad = int(samples.size - np.count_nonzero(finite))
        raise InvalidSamplesError(
            f"{subject} contains {bad} invalid samples (NaN or infinity); the file is damaged or was written "
            "by a faulty program."
        )
    if not allow_silent and peak(samples) < SILENCE_PEAK:
        raise SilentAudioError(
            f"{subject} is silent (peak {to_dbfs(peak(samples)):.0f} dBFS): check the microphone and record again."
        )


def peak(samples: np.ndarray) -> float:
    """Largest absolute sample value (0.0 for no samples)."""
    return float(np.max(np.abs(samples))) if samples.size else 0.0


def rms(samples: np.ndarray) -> float:
    """Root mean square of the samples (0.0 for no samples)."""
    return float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))) if samples.size else 0.0


def to_dbfs(value: float) -> float:
    """Amplitude to dB relative to full scale; -inf for zero."""
    return 20.0 * math.log10(value) if value > 0 else -math.inf


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return (
        f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"
    )
