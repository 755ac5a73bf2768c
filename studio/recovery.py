"""The recovery folder: where audio goes when it cannot be saved where the user asked (a full or missing
disk), so a finished or broken-off take is never lost. It is a take store of its own in the data folder."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from studio.atomic_files import DiskError
from studio.takes import Take, TakeError, TakeStore


def recovery_store() -> TakeStore:
    """``<data folder>/recovery`` (created on the first take kept there)."""
    from studio.settings import data_dir

    return TakeStore(data_dir(create=False) / "recovery")


@dataclass
class KeptTake:
    """Audio the studio could not save where asked: kept in memory, and in the recovery folder if it could."""

    audio: np.ndarray
    sample_rate: int
    meta: dict[str, Any]  # the keyword arguments of TakeStore.add (text, voice, mode, ...)
    problem: str  # why it was not saved where asked, one sentence
    recovered: Take | None = None  # its copy in the recovery folder, when that worked
    recovery_folder: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return self.audio.size / float(self.sample_rate)

    def message(self) -> str:
        """What to tell the user, in plain words."""
        where = f"kept in {self.recovery_folder}" if self.recovered is not None else "kept in memory only"
        return f"{self.problem} The {self.duration_s:.0f} s take is {where}: save it elsewhere."


def store_or_keep(
    store: TakeStore, audio: np.ndarray, sample_rate: int, recovery: TakeStore | None = None, **meta: Any
) -> Take | KeptTake:
    """Save a take in ``store``; when the disk refuses it, keep it (recovery folder, else memory) and say why."""
    try:
        return store.add(audio, sample_rate, **meta)
    except DiskError as exc:
        problem = exc.explain("the take was not saved there")
    except TakeError as exc:
        problem = f"The take could not be saved: {exc}."
    kept = KeptTake(np.asarray(audio, dtype=np.float32), int(sample_rate), dict(meta), problem)
    recovery = recovery if recovery is not None else recovery_store()
    if recovery.folder != store.folder:
        try:
            kept.recovered = recovery.add(audio, sample_rate, **meta)
            kept.recovery_folder = str(recovery.folder)
        except (DiskError, TakeError) as exc:
            kept.notes.append(f"the recovery folder {recovery.folder} refused it too: {exc}")
    return kept
