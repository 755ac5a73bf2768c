"""An audio file written block by block (a joined script of any length in bounded memory), as safely as
`studio.audio.export.write_audio`: into a temp file in the target folder, fsynced, then renamed into place.
Samples are scaled, rounded and clipped like exported takes; clipped samples are counted."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from studio.atomic_files import temp_prefix, umask_mode
from studio.audio.errors import ExportError
from studio.audio.export import ExportFormat, _fsync_folder, _os_error, _place, to_fixed_point


class StreamingAudioWriter:
    """``with StreamingAudioWriter(path, rate, fmt) as out: out.write(block) ...``; the file appears only
    when the block ends without an exception (then any old file at ``path`` is replaced)."""

    def __init__(self, path: str | os.PathLike, sample_rate: int, fmt: ExportFormat):
        fmt.check_rate(sample_rate)
        self.path, self.sample_rate, self.fmt = Path(path), sample_rate, fmt
        self.frames = 0
        self.clipped_samples = 0
        self._temp: Path | None = None
        self._file = None

    def __enter__(self) -> StreamingAudioWriter:
        import soundfile as sf

        try:
            fd, name = tempfile.mkstemp(prefix=temp_prefix(self.path), suffix=".part", dir=self.path.parent)
            os.close(fd)
            self._temp = Path(name)
            self._file = sf.SoundFile(
                name, "w", self.sample_rate, 1, self.fmt.subtype, format=self.fmt.container
            )
        except OSError as exc:
            self._discard()
            raise _os_error(exc, self.path) from exc
        except (sf.LibsndfileError, RuntimeError) as exc:
            self._discard()
            raise ExportError(f"Could not start {self.path.name} as {self.fmt.label}: {exc}.") from exc
        return self

    def write(self, samples: np.ndarray) -> None:
        samples = np.asarray(samples, dtype=np.float32)
        if samples.size == 0:
            return
        if self.fmt.full_scale is not None:
            data, clipped = to_fixed_point(samples, self.fmt.full_scale)
            if self.fmt.subtype == "PCM_24":
                data = data * np.int32(256)  # libsndfile takes the top 24 bits of int32 samples
        else:
            clipped = int(np.count_nonzero(np.abs(samples) > 1.0)) if self.fmt.lossy else 0
            data = np.clip(samples, -1.0, 1.0) if self.fmt.lossy else samples
        self.clipped_samples += clipped
        try:
            self._file.write(data)
        except (OSError, RuntimeError) as exc:
            if isinstance(exc, OSError):
                raise _os_error(exc, self.path) from exc
            raise ExportError(f"Could not write {self.path.name}: {exc} (is the disk full?).") from exc
        self.frames += samples.size

    def __exit__(self, kind, exc, traceback) -> None:
        if kind is not None:
            self._discard()
            return
        try:
            self._file.close()
            self._file = None
            with open(self._temp, "rb+") as handle:
                os.fsync(handle.fileno())
            os.chmod(self._temp, umask_mode())
            _place(self._temp, self.path, overwrite=True)
            self._temp = None
            _fsync_folder(self.path.parent)
        except OSError as exc:
            self._discard()
            raise _os_error(exc, self.path) from exc
        except RuntimeError as exc:
            self._discard()
            raise ExportError(f"Could not finish {self.path.name}: {exc}.") from exc

    def _discard(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except Exception:  # noqa: BLE001 - the file is thrown away anyway
                pass
            self._file = None
        if self._temp is not None:
            self._temp.unlink(missing_ok=True)
            self._temp = None
