"""The voice library: named reference voices (cleaned prompt audio, original recording, transcript), Qt-free.

Each voice is a folder ``<slug>/`` holding ``prompt.wav`` (the cleaned prompt the engine gets),
``original.wav`` (the recording as made, kept untouched) and ``voice.json`` (name, transcript, created).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


class VoiceError(Exception):
    """A voice cannot be saved, found or read; the message says which and why."""


@dataclass(frozen=True)
class Voice:
    """One saved voice: its name, the folder it lives in and its transcript."""

    name: str
    slug: str
    transcript: str
    created: float
    sample_rate: int
    duration_s: float


def slugify(name: str) -> str:
    """A folder name from a voice name: letters, digits, '-' and '_' only (never empty, never a path)."""
    slug = re.sub(r"[^\w-]+", "-", name.strip(), flags=re.UNICODE).strip("-_.").lower()
    return slug[:64] or "voice"


class VoiceLibrary:
    """Saved voices in one folder (``data_dir()/voices`` in the studio)."""

    def __init__(self, folder: str | os.PathLike[str]):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def save(
        self,
        name: str,
        prompt: np.ndarray,
        sample_rate: int,
        transcript: str = "",
        original: np.ndarray | None = None,
        original_rate: int | None = None,
        overwrite: bool = False,
    ) -> Voice:
        """Store a voice (atomically: written to a temp folder, then renamed into place)."""
        import soundfile as sf

        name = name.strip()
        if not name:
            raise VoiceError("a voice needs a name")
        prompt = np.asarray(prompt, dtype=np.float32).reshape(-1)
        if prompt.size == 0:
            raise VoiceError("a voice needs prompt audio")
        slug = slugify(name)
        target = self.folder / slug
        if target.exists() and not overwrite:
            raise VoiceError(f"a voice named {name!r} already exists")
        voice = Voice(
            name, slug, transcript.strip(), time.time(), int(sample_rate), prompt.size / sample_rate
        )
        staging = Path(tempfile.mkdtemp(prefix=f".{slug}.", dir=self.folder))
        try:
            sf.write(staging / "prompt.wav", prompt, sample_rate, subtype="FLOAT")
            if original is not None:
                sf.write(
                    staging / "original.wav",
                    np.asarray(original, dtype=np.float32).reshape(-1),
                    original_rate or sample_rate,
                    subtype="FLOAT",
                )
            (staging / "voice.json").write_text(json.dumps(asdict(voice), indent=2, ensure_ascii=False))
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return voice

    def list(self) -> list[Voice]:
        """Saved voices by name; damaged folders are skipped."""
        voices = []
        for meta in self.folder.glob("*/voice.json"):
            if meta.parent.name.startswith("."):
                continue
            try:
                voices.append(Voice(**json.loads(meta.read_text())))
            except (ValueError, TypeError, OSError):
                continue
        return sorted(voices, key=lambda v: v.name.lower())

    def get(self, slug: str) -> Voice:
        try:
            return Voice(**json.loads((self.folder / slugify(slug) / "voice.json").read_text()))
        except FileNotFoundError:
            raise VoiceError(f"no saved voice {slug!r}") from None
        except (ValueError, TypeError) as exc:
            raise VoiceError(f"the saved voice {slug!r} is damaged: {exc}") from exc

    def load_prompt(self, slug: str) -> tuple[np.ndarray, int, str]:
        """(prompt audio float32, its sample rate, transcript) of a saved voice."""
        import soundfile as sf

        voice = self.get(slug)
        try:
            audio, rate = sf.read(self.folder / voice.slug / "prompt.wav", dtype="float32", always_2d=False)
        except (OSError, RuntimeError) as exc:
            raise VoiceError(f"cannot read the prompt of {voice.name!r}: {exc}") from exc
        return audio, int(rate), voice.transcript

    def delete(self, slug: str) -> None:
        voice = self.get(slug)
        shutil.rmtree(self.folder / voice.slug)
