"""The unsaved reference: a recording or import not saved as a voice yet. It is written to the data folder
as it arrives (the original, the cleaned prompt, the transcript), so quitting, a crash or picking a saved
voice loses nothing: the next start shows it again, until it is saved as a voice, discarded or replaced by
a new recording. No Qt here: the voice panel calls `DraftStore.save` from its background jobs and at close."""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from studio.atomic_files import atomic_write_bytes, ensure_folder, remove_leftover_parts

log = logging.getLogger("studio.gui")
MANIFEST = "draft.json"
_DRAFT_ID = re.compile(r"[0-9a-f]{12}")


def _original_file(draft_id: str) -> str:
    return f"{draft_id}.original.wav"


def _cleaned_file(draft_id: str, generation: int) -> str:
    return f"{draft_id}.cleaned-{generation}.wav"


@dataclass(eq=False)
class ReferenceDraft:
    """The unsaved reference as the panel shows it; ``cleaned`` is None until cleaning finishes."""

    original: tuple[np.ndarray, int]
    cleaned: tuple[np.ndarray, int] | None = None
    transcript: str = ""
    origin: str = ""  # an imported file's name; "" for a recording
    report: str = ""  # the cleanup summary the panel shows (rich text)
    quality: str = ""  # the quality verdict the panel shows (rich text)
    draft_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    cleaned_generation: int = 0  # counts cleanings ("Reduce noise" cleans again): names its file

    @property
    def duration_s(self) -> float:
        audio, rate = self.cleaned or self.original
        return audio.size / rate

    def set_cleaned(self, samples: np.ndarray, sample_rate: int, report: str, quality: str) -> None:
        self.cleaned = (samples, int(sample_rate))
        self.cleaned_generation += 1
        self.report, self.quality = report, quality

    def files(self) -> dict[str, tuple[np.ndarray, int]]:
        """The audio files that hold this draft, by file name."""
        files = {_original_file(self.draft_id): self.original}
        if self.cleaned is not None:
            files[_cleaned_file(self.draft_id, self.cleaned_generation)] = self.cleaned
        return files

    def manifest(self) -> dict:
        """What `DraftStore.load` reads back besides the audio (``cleaned``: 0 while not cleaned)."""
        return {
            "id": self.draft_id,
            "cleaned": self.cleaned_generation if self.cleaned is not None else 0,
            "transcript": self.transcript,
            "origin": self.origin,
            "report": self.report,
            "quality": self.quality,
        }


class DraftStore:
    """The one unsaved reference in ``folder`` (None: kept in memory only, as in the panel's tests).

    ``save`` is safe from any thread: it writes what is missing of the current draft (audio files once,
    the manifest when it changed), the manifest last, then removes the files of drafts no longer current.
    A draft that is no longer current (replaced, saved as a voice, discarded) is never written.
    """

    def __init__(self, folder: str | Path | None):
        self.folder = Path(folder) if folder is not None else None
        self._lock = threading.Lock()
        self._current: ReferenceDraft | None = None
        self._written: set[str] = set()
        self._manifest: dict | None = None

    def track(self, draft: ReferenceDraft) -> None:
        """``draft`` is the unsaved reference from now on (the one before it is not written any more)."""
        with self._lock:
            self._current = draft

    def save(self, draft: ReferenceDraft) -> None:
        """Write ``draft`` if it is the current one; raises `DiskError` when the disk refuses."""
        if self.folder is None:
            return
        with self._lock:
            if draft is not self._current:
                return
            ensure_folder(self.folder)
            from studio.audio.export import encode_audio

            for name, (samples, rate) in draft.files().items():
                if name not in self._written:
                    atomic_write_bytes(self.folder / name, encode_audio(samples, rate, "WAV", "FLOAT"))
                    self._written.add(name)
            manifest = draft.manifest()
            if manifest != self._manifest:
                atomic_write_bytes(self.folder / MANIFEST, json.dumps(manifest, ensure_ascii=False).encode())
                self._manifest = manifest
            self._remove_other_files(set(draft.files()))

    def discard(self) -> None:
        """No unsaved reference any more: its files are removed (a failure is logged, never raised)."""
        with self._lock:
            self._current, self._manifest = None, None
            if self.folder is not None:
                self._remove_other_files(set())

    def load(self) -> ReferenceDraft | None:
        """The draft kept in the folder (then the current one), or None; an unreadable one is logged."""
        if self.folder is None or not (self.folder / MANIFEST).exists():
            return None
        import soundfile as sf

        try:
            manifest = json.loads((self.folder / MANIFEST).read_text(encoding="utf-8"))
            draft_id, generation = str(manifest["id"]), int(manifest["cleaned"])
            if not _DRAFT_ID.fullmatch(draft_id):
                raise ValueError(f"{MANIFEST} names no draft ({draft_id!r})")
            original, rate = sf.read(self.folder / _original_file(draft_id), dtype="float32")
            cleaned = None
            if generation:
                samples, cleaned_rate = sf.read(
                    self.folder / _cleaned_file(draft_id, generation), dtype="float32"
                )
                cleaned = (samples, int(cleaned_rate))
            draft = ReferenceDraft(
                (original, int(rate)),
                cleaned,
                transcript=str(manifest.get("transcript", "")),
                origin=str(manifest.get("origin", "")),
                report=str(manifest.get("report", "")),
                quality=str(manifest.get("quality", "")),
                draft_id=draft_id,
                cleaned_generation=generation,
            )
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:  # RuntimeError: soundfile
            log.warning("the unsaved recording in %s cannot be read: %s", self.folder, exc)
            return None
        with self._lock:
            self._current, self._written = draft, set(draft.files())
            self._manifest = draft.manifest()
        return draft

    def _remove_other_files(self, keep: set[str]) -> None:
        try:
            entries = list(self.folder.iterdir())
        except OSError:
            return
        if not keep:
            entries.sort(key=lambda path: path.name != MANIFEST)  # the manifest first: no half draft is read
        for path in entries:
            if path.name in keep or (keep and path.name == MANIFEST) or not path.is_file():
                continue
            try:
                path.unlink()
            except OSError as exc:
                log.warning("could not remove %s: %s", path, exc)
        self._written &= keep
        remove_leftover_parts(self.folder)
