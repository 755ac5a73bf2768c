"""Write takes and cleaned prompts to disk without ever losing or silently replacing audio.

Files are written to a temporary file in the target folder, flushed to disk (fsync) and then renamed into
place, so a crash, a full disk or a permission error leaves either the old state or the whole new file.
Names are made safe (no path escapes, no reserved names) and existing files are never overwritten unless
asked. Integer formats scale by full scale minus one (int16: x * 32767) and count the samples they clip.
"""

from __future__ import annotations

import enum
import os
import re
import tempfile
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from studio.atomic_files import disk_error, temp_prefix, umask_mode
from studio.audio.errors import ExportError, OutputExistsError, UnsafeFileNameError
from studio.audio.io import validate_samples
from studio.tags import strip_tags

TAKE_SAMPLE_RATE = 24000
_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL"} | {f"{p}{i}" for p in ("COM", "LPT") for i in range(1, 10)}
_UNSAFE_CHARS = re.compile(r'[\x00-\x1f\x7f<>:"/\\|?*]')
_MAX_NAME_BYTES = 200


class ExportFormat(enum.Enum):
    """Formats a take can be exported in: (container, libsndfile subtype, suffix, full-scale integer).

    The lossy ones (MP3, Ogg Vorbis, Opus) are encoded by libsndfile itself (>= 1.1): no ffmpeg."""

    WAV_INT16 = ("WAV", "PCM_16", ".wav", 32767)
    WAV_FLOAT32 = ("WAV", "FLOAT", ".wav", None)
    FLAC = ("FLAC", "PCM_24", ".flac", 8388607)
    MP3 = ("MP3", "MPEG_LAYER_III", ".mp3", None)
    OGG_VORBIS = ("OGG", "VORBIS", ".ogg", None)
    OPUS = ("OGG", "OPUS", ".opus", None)

    @property
    def container(self) -> str:
        return self.value[0]

    @property
    def subtype(self) -> str:
        return self.value[1]

    @property
    def suffix(self) -> str:
        return self.value[2]

    @property
    def full_scale(self) -> int | None:
        return self.value[3]

    @property
    def lossy(self) -> bool:
        return self in (ExportFormat.MP3, ExportFormat.OGG_VORBIS, ExportFormat.OPUS)

    def check_rate(self, sample_rate: int) -> None:
        """Opus and MP3 take only some rates; say which before anything is encoded."""
        allowed = _RATES.get(self)
        if allowed and sample_rate not in allowed:
            rates = ", ".join(str(rate) for rate in allowed)
            raise ExportError(f"{self.label} needs a sample rate of {rates} Hz, not {sample_rate} Hz.")

    @property
    def label(self) -> str:
        return {
            "WAV_INT16": "WAV (16-bit)",
            "WAV_FLOAT32": "WAV (32-bit float)",
            "FLAC": "FLAC",
            "MP3": "MP3",
            "OGG_VORBIS": "Ogg Vorbis",
            "OPUS": "Opus",
        }[self.name]

    @classmethod
    def parse(cls, name: str) -> ExportFormat:
        """Accept ``wav16``/``int16``, ``wav32f``/``float32``, ``flac``, ``mp3``, ``ogg``/``vorbis`` and
        ``opus`` (any case)."""
        aliases = {
            "wav": cls.WAV_INT16,
            "wav16": cls.WAV_INT16,
            "int16": cls.WAV_INT16,
            "wav_int16": cls.WAV_INT16,
            "wav32f": cls.WAV_FLOAT32,
            "float32": cls.WAV_FLOAT32,
            "wav_float32": cls.WAV_FLOAT32,
            "flac": cls.FLAC,
            "mp3": cls.MP3,
            "ogg": cls.OGG_VORBIS,
            "vorbis": cls.OGG_VORBIS,
            "ogg_vorbis": cls.OGG_VORBIS,
            "opus": cls.OPUS,
        }
        try:
            return aliases[name.strip().lower()]
        except KeyError:
            raise ExportError(
                f"Unknown export format {name!r}; use wav16, wav32f, flac, mp3, ogg or opus."
            ) from None


_RATES = {
    ExportFormat.OPUS: (8000, 12000, 16000, 24000, 48000),
    ExportFormat.MP3: (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000),
}
OUTPUT_RATES = (16000, 22050, 24000, 44100, 48000)  # the rates offered for export (soxr resamples)


def resample(samples: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """``samples`` at ``to_rate`` (soxr, high quality); the same array when the rates agree."""
    if from_rate == to_rate:
        return samples
    import soxr

    return soxr.resample(np.asarray(samples, dtype=np.float32), from_rate, to_rate, quality="HQ").astype(
        np.float32
    )


@dataclass
class ExportResult:
    """Where a take went, in which format, and what the user should know about it."""

    path: Path
    format: ExportFormat
    sample_rate: int
    clipped_samples: int = 0
    warnings: list[str] = field(default_factory=list)


def to_fixed_point(samples: np.ndarray, full_scale: int) -> tuple[np.ndarray, int]:
    """Scale float samples by ``full_scale`` and round; values past full scale are clipped and counted."""
    scaled = np.rint(np.asarray(samples, dtype=np.float64) * full_scale)
    clipped = int(np.count_nonzero(np.abs(scaled) > full_scale))
    np.clip(scaled, -full_scale, full_scale, out=scaled)
    dtype = np.int16 if full_scale <= 32767 else np.int32
    return scaled.astype(dtype), clipped


def safe_filename(name: str, suffix: str) -> str:
    """Turn a user-given take name into one file name in one folder, ending in ``suffix``.

    CosyVoice2's tags ([breath], <strong>...</strong>) are left out: they shape the speech, not the name.
    Path parts ``.`` and ``..`` are dropped and separators become ``_``, as do characters Windows forbids;
    leading dots and trailing dots or spaces are dropped; reserved device names (CON, NUL, COM1, ...) get a ``_`` prefix.
    """
    name = strip_tags(unicodedata.normalize("NFC", str(name)))
    if name.lower().endswith(suffix.lower()):
        name = name[: -len(suffix)]
    parts = [part for part in re.split(r"[/\\]", name) if part.strip(" .")]  # drops "", ".", ".." parts
    name = _UNSAFE_CHARS.sub("_", "_".join(parts)).strip().strip(".").strip()
    name = re.sub(r"_{2,}", "_", name) or "take"
    if name.split(".")[0].upper() in _WINDOWS_RESERVED:
        name = "_" + name
    encoded = name.encode("utf-8")[:_MAX_NAME_BYTES]
    name = encoded.decode("utf-8", errors="ignore").rstrip(" .") or "take"
    return name + suffix


def _os_error(exc: OSError, target: Path) -> ExportError:
    return ExportError(disk_error(exc, target.parent).explain(f"{target.name} was not saved"))


def encode_audio(samples: np.ndarray, sample_rate: int, container: str, subtype: str) -> bytes:
    """The bytes of an audio file, encoded in memory: disk errors then come from the plain write that
    follows, with their errno (libsndfile writing to disk itself reports a full disk as "System error")."""
    import io

    import soundfile as sf

    buffer = io.BytesIO()
    sf.write(buffer, samples, sample_rate, format=container, subtype=subtype)
    return buffer.getvalue()


def _fsync_folder(folder: Path) -> None:
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on folders; the file itself is already on disk
    finally:
        os.close(fd)


def _place(temp: Path, target: Path, overwrite: bool) -> None:
    """Move the finished temp file to ``target``; without ``overwrite`` a file appearing meanwhile wins."""
    if overwrite:
        os.replace(temp, target)
        return
    try:
        os.link(temp, target)  # atomic and fails if target exists, even if it appeared after our check
    except FileExistsError:
        raise OutputExistsError(
            f"{target.name} already exists in {target.parent}; it was not overwritten."
        ) from None
    except OSError:
        if target.exists():  # no hard links here (FAT, some network disks): check, then rename
            raise OutputExistsError(
                f"{target.name} already exists in {target.parent}; it was not overwritten."
            ) from None
        os.replace(temp, target)
        return
    os.unlink(temp)


def write_audio(
    path: str | os.PathLike,
    samples: np.ndarray,
    sample_rate: int,
    fmt: ExportFormat,
    *,
    overwrite: bool = False,
) -> ExportResult:
    """Atomically write mono float ``samples`` to ``path`` in ``fmt``; never leaves a partial file.

    Raises OutputExistsError when ``path`` exists and ``overwrite`` is false, ExportError for disk or
    permission failures, InvalidSamplesError for NaN/inf samples.
    """
    import soundfile as sf

    target = Path(path)
    samples = np.asarray(samples, dtype=np.float32)
    if samples.ndim != 1:
        raise ExportError(f"Expected mono samples (one dimension), got an array of shape {samples.shape}.")
    validate_samples(samples, name="The take", allow_silent=True)
    if target.exists() and not overwrite:
        raise OutputExistsError(f"{target.name} already exists in {target.parent}; it was not overwritten.")
    result = ExportResult(target, fmt, sample_rate)
    fmt.check_rate(sample_rate)
    if fmt.lossy:  # encoders clip at full scale anyway; clip here so the count is ours
        over = int(np.count_nonzero(np.abs(samples) > 1.0))
        data = np.clip(samples, -1.0, 1.0)
        result.clipped_samples = over
        if over:
            result.warnings.append(f"{over} samples were past full scale and were clipped in {target.name}.")
    elif fmt.full_scale is None:
        data = samples
        over = int(np.count_nonzero(np.abs(samples) > 1.0))
        if over:
            result.warnings.append(f"{over} samples exceed full scale; kept as they are in the float file.")
    else:
        data, result.clipped_samples = to_fixed_point(samples, fmt.full_scale)
        if fmt.subtype == "PCM_24":
            data = data * np.int32(256)  # libsndfile takes the top 24 bits of int32 samples
        if result.clipped_samples:
            result.warnings.append(
                f"{result.clipped_samples} samples were past full scale and were clipped in {target.name}."
            )
    temp: Path | None = None
    try:
        fd, temp_name = tempfile.mkstemp(prefix=temp_prefix(target), suffix=".part", dir=target.parent)
        temp = Path(temp_name)
        with os.fdopen(fd, "w+b") as handle:
            handle.write(encode_audio(data, sample_rate, fmt.container, fmt.subtype))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, umask_mode())  # an exported file is shared like any other, not private
        _place(temp, target, overwrite)
        temp = None
        _fsync_folder(target.parent)
    except ExportError:
        raise
    except OSError as exc:
        raise _os_error(exc, target) from exc
    except (sf.LibsndfileError, RuntimeError) as exc:
        raise ExportError(f"Could not encode {target.name} as {fmt.container} {fmt.subtype}: {exc}.") from exc
    finally:
        if temp is not None:
            temp.unlink(missing_ok=True)
    return result


def unique_path(folder: Path, filename: str) -> Path:
    """``folder/filename`` if free, else ``name (2).ext``, ``name (3).ext``, ..."""
    candidate = folder / filename
    stem, suffix = os.path.splitext(filename)
    number = 2
    while candidate.exists():
        candidate = folder / f"{stem} ({number}){suffix}"
        number += 1
    return candidate


def export_take(
    samples: np.ndarray,
    folder: str | os.PathLike,
    name: str,
    *,
    fmt: ExportFormat | str = ExportFormat.WAV_INT16,
    sample_rate: int = TAKE_SAMPLE_RATE,
    on_conflict: str = "unique",
) -> ExportResult:
    """Export a take into ``folder`` under a safe version of ``name``.

    ``on_conflict`` says what happens when the file exists: ``"unique"`` (default) picks ``name (2)``,
    ``"error"`` raises OutputExistsError, ``"overwrite"`` replaces it atomically.
    """
    if isinstance(fmt, str):
        fmt = ExportFormat.parse(fmt)
    if on_conflict not in ("unique", "error", "overwrite"):
        raise ValueError(f"on_conflict must be 'unique', 'error' or 'overwrite', not {on_conflict!r}")
    folder = Path(folder)
    if not folder.is_dir():
        raise ExportError(f"The folder {folder} does not exist: the take was not saved.")
    filename = safe_filename(name, fmt.suffix)
    target = folder / filename
    if target.resolve().parent != folder.resolve():
        raise UnsafeFileNameError(f"The name {name!r} would save outside {folder}; choose another name.")
    for _attempt in range(100):
        if on_conflict == "unique":
            target = unique_path(folder, filename)
        try:
            return write_audio(target, samples, sample_rate, fmt, overwrite=on_conflict == "overwrite")
        except OutputExistsError:
            if on_conflict != "unique":
                raise
    raise ExportError(f"Could not find a free name for {filename} in {folder}.")
