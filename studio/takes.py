"""The take store: every finished take as a float32 WAV plus a JSON sidecar, written at once, Qt-free.

A take is written the moment it finishes, as one unit: its WAV and sidecar are both written in full
under temporary names, then renamed into place with the sidecar last, so a crash or a full disk leaves
the whole take or nothing. The store lists, replays (loads), renames, deletes and exports takes; a
denoised copy may sit beside the original. The folder is created on the first write, so a store on an
unplugged or read-only drive can be opened (and says what is wrong) without failing the studio. Take
ids are checked: a sidecar can never make the store touch a file outside its folder.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from studio.atomic_files import atomic_write_bytes, ensure_folder, remove_leftover_parts, write_new_files
from studio.tags import name_from_text

SIDECAR_VERSION = 1
TRASH_FOLDER = ".trash"  # the takes of the last discard, until the next one (undo)
#: what a take id may look like: a file-name stem, never a path
_TAKE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$")


class TakeError(Exception):
    """A take cannot be stored, found or read; the message says which and why."""


@dataclass(frozen=True)
class Take:
    """What the sidecar holds about one take (the audio lives in ``<id>.wav`` beside it)."""

    id: str
    name: str
    created: float
    sample_rate: int
    duration_s: float
    text: str = ""
    voice: str = ""
    mode: str = ""
    seed: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    denoised: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"version": SIDECAR_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Take:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def _wav_bytes(audio: np.ndarray, sample_rate: int) -> bytes:
    from studio.audio.export import encode_audio

    return encode_audio(audio, sample_rate, "WAV", "FLOAT")


def check_take_id(take_id: str) -> str:
    """``take_id`` when it is a plain id (letters, digits, '-', '_'); a TakeError otherwise."""
    if not isinstance(take_id, str) or not _TAKE_ID.match(take_id):
        raise TakeError(f"{take_id!r} is not a take id")
    return take_id


def _as_mono_float32(audio: np.ndarray) -> np.ndarray:
    array = np.asarray(audio, dtype=np.float32)
    if array.ndim != 1:
        raise TakeError(f"a take must be mono 1-D audio, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise TakeError("a take's audio holds NaN or infinite samples")
    return array


def _sidecar_bytes(take: Take) -> bytes:
    return json.dumps(take.to_json(), indent=2, ensure_ascii=False).encode()


class TakeStore:
    """Takes of one user, in one folder: ``<id>.wav``, ``<id>.json`` and optionally ``<id>.denoised.wav``."""

    def __init__(self, folder: str | os.PathLike[str]):
        self.folder = Path(folder).expanduser()
        remove_leftover_parts(self.folder)  # the studio's start: files a killed save or export left

    def check_writable(self) -> None:
        """Create the folder if needed and prove a file can be written there; a `DiskError` says why not."""
        ensure_folder(self.folder)
        atomic_write_bytes(self.folder / ".write-check", b"")
        (self.folder / ".write-check").unlink(missing_ok=True)

    # -- paths -------------------------------------------------------------------------------------
    def wav_path(self, take_id: str) -> Path:
        return self.folder / f"{check_take_id(take_id)}.wav"

    def sidecar_path(self, take_id: str) -> Path:
        return self.folder / f"{check_take_id(take_id)}.json"

    def denoised_path(self, take_id: str) -> Path:
        return self.folder / f"{check_take_id(take_id)}.denoised.wav"

    # -- writing -----------------------------------------------------------------------------------
    def add(
        self,
        audio: np.ndarray,
        sample_rate: int,
        *,
        text: str = "",
        voice: str = "",
        mode: str = "",
        seed: int | None = None,
        settings: Mapping[str, Any] | None = None,
        stats: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> Take:
        """Write a finished take (WAV and sidecar as one unit) and return it.

        Raises TakeError for audio that cannot be a take, `studio.atomic_files.DiskError` (naming the
        folder and the cause) when the disk refuses it; either way nothing is left half-written.
        """
        samples = _as_mono_float32(audio)
        if sample_rate <= 0:
            raise TakeError(f"sample rate must be positive, got {sample_rate}")
        created = time.time()
        take_id = time.strftime("%Y%m%d-%H%M%S", time.localtime(created)) + "-" + secrets.token_hex(3)
        take = Take(
            id=take_id,
            name=name or name_from_text(text) or take_id,
            created=created,
            sample_rate=int(sample_rate),
            duration_s=len(samples) / float(sample_rate),
            text=text,
            voice=voice,
            mode=mode,
            seed=seed,
            settings=dict(settings or {}),
            stats=dict(stats or {}),
        )
        wav = _wav_bytes(samples, sample_rate)
        ensure_folder(self.folder)
        write_new_files([(self.wav_path(take_id), wav), (self.sidecar_path(take_id), _sidecar_bytes(take))])
        return take

    def _write_sidecar(self, take: Take) -> None:
        atomic_write_bytes(self.sidecar_path(take.id), _sidecar_bytes(take))

    def save_denoised(self, take_id: str, audio: np.ndarray) -> Take:
        """Keep a denoised copy beside the original and mark the take; the original stays untouched."""
        take = self.get(take_id)
        atomic_write_bytes(self.denoised_path(take_id), _wav_bytes(_as_mono_float32(audio), take.sample_rate))
        updated = replace(take, denoised=True)
        self._write_sidecar(updated)
        return updated

    def rename(self, take_id: str, name: str) -> Take:
        name = name.strip()
        if not name:
            raise TakeError("a take's name cannot be empty")
        updated = replace(self.get(take_id), name=name)
        self._write_sidecar(updated)
        return updated

    def delete(self, take_id: str) -> None:
        """Remove a take's files for good (the studio discards instead: see `discard`)."""
        self.get(take_id)  # a clear error for an unknown id
        for path in (self.denoised_path(take_id), self.wav_path(take_id), self.sidecar_path(take_id)):
            path.unlink(missing_ok=True)

    # -- discard and undo --------------------------------------------------------------------------
    @property
    def trash(self) -> Path:
        return self.folder / TRASH_FOLDER

    def discard(self, take_ids: Iterable[str]) -> list[str]:
        """Move takes into the trash, where `restore_discarded` finds them until the next discard.

        Each sidecar moves first (the take leaves the list at once), then its audio. The previous
        discard's takes are removed for good: one level of undo, as in the studio.
        """
        ids = [self.get(take_id).id for take_id in take_ids]  # all known, or nothing moves
        self.empty_trash()
        ensure_folder(self.trash)
        for take_id in ids:
            for path in (self.sidecar_path(take_id), self.wav_path(take_id), self.denoised_path(take_id)):
                if path.exists():
                    os.replace(path, self.trash / path.name)
        return ids

    def restore_discarded(self) -> list[str]:
        """Put the last discard's takes back (audio first, sidecar last); their ids."""
        restored = []
        for sidecar in sorted(self.trash.glob("*.json")):
            take_id = check_take_id(sidecar.stem)
            for path in (self.wav_path(take_id), self.denoised_path(take_id)):
                if (self.trash / path.name).exists():
                    os.replace(self.trash / path.name, path)
            os.replace(sidecar, self.sidecar_path(take_id))
            restored.append(take_id)
        return restored

    def empty_trash(self) -> None:
        if not self.trash.is_dir():
            return
        for path in self.trash.iterdir():
            if path.is_file() and (path.suffix in (".json", ".wav")):
                path.unlink(missing_ok=True)

    # -- reading -----------------------------------------------------------------------------------
    def get(self, take_id: str) -> Take:
        path = self.sidecar_path(take_id)
        try:
            take = Take.from_json(json.loads(path.read_text()))
        except FileNotFoundError:
            raise TakeError(f"no take {take_id!r} in {self.folder}") from None
        except (ValueError, TypeError) as exc:
            raise TakeError(f"the sidecar {path} is damaged: {exc}") from exc
        if take.id != take_id:  # a copied or crafted sidecar: its file name is the id that counts
            raise TakeError(f"the sidecar {path} names another take ({take.id!r})")
        return take

    def list(self) -> list[Take]:
        """All readable takes, oldest first; damaged sidecars and sidecars without audio are skipped."""
        takes = []
        for sidecar in self.folder.glob("*.json"):  # a missing folder lists nothing
            try:
                take = self.get(sidecar.stem)
            except TakeError:
                continue
            if self.wav_path(take.id).exists():
                takes.append(take)
        return sorted(takes, key=lambda t: (t.created, t.id))

    def audio_path(self, take_id: str, prefer_denoised: bool = True) -> Path:
        take = self.get(take_id)
        if prefer_denoised and take.denoised and self.denoised_path(take_id).exists():
            return self.denoised_path(take_id)
        return self.wav_path(take_id)

    def load_audio(self, take_id: str, prefer_denoised: bool = True) -> tuple[np.ndarray, int]:
        import soundfile as sf

        path = self.audio_path(take_id, prefer_denoised)
        try:
            audio, rate = sf.read(path, dtype="float32", always_2d=False)
        except (OSError, RuntimeError) as exc:
            raise TakeError(f"cannot read {path}: {exc}") from exc
        return audio, int(rate)

    # -- export ------------------------------------------------------------------------------------
    def export(
        self,
        take_ids: Iterable[str],
        folder: str | os.PathLike[str],
        fmt: str = "wav16",
        prefer_denoised: bool = True,
        sample_rate: int = 0,
        loudness_lufs: float | None = None,
    ) -> list:
        """Export takes through the audio core (atomic; a free name instead of overwriting).

        ``fmt`` is the audio core's format name (``wav16``, ``wav32f``, ``flac``, ``mp3``, ``ogg``, ``opus``);
        ``sample_rate`` (0: the take's own) and ``loudness_lufs`` (None: as made) master the copy.
        Returns the audio core's ExportResult per take (path, clipped-sample and loudness warnings).
        """
        from studio.audio.export import export_take

        remove_leftover_parts(folder)
        results = []
        for take_id in take_ids:
            take = self.get(take_id)
            audio, rate, notes = self._mastered(take_id, prefer_denoised, sample_rate, loudness_lufs)
            results.append(export_take(audio, Path(folder), take.name, fmt=fmt, sample_rate=rate))
            results[-1].warnings[:0] = notes
        return results

    def export_as(
        self,
        take_id: str,
        path: str | os.PathLike[str],
        fmt: str = "wav16",
        prefer_denoised: bool = True,
        sample_rate: int = 0,
        loudness_lufs: float | None = None,
    ):
        """Export one take to the file the user named (replacing it: the save dialog asked); its ExportResult."""
        from studio.audio.export import export_take

        target = Path(path)
        remove_leftover_parts(target.parent)
        audio, rate, notes = self._mastered(take_id, prefer_denoised, sample_rate, loudness_lufs)
        stem = target.name[: -len(target.suffix)] if target.suffix else target.name
        result = export_take(audio, target.parent, stem, fmt=fmt, sample_rate=rate, on_conflict="overwrite")
        result.warnings[:0] = notes
        return result

    def _mastered(self, take_id: str, prefer_denoised: bool, sample_rate: int, loudness_lufs: float | None):
        from studio.audio.loudness import master

        audio, rate = self.load_audio(take_id, prefer_denoised)
        return master(audio, rate, sample_rate, loudness_lufs)
