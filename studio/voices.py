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

from studio.atomic_files import disk_error, ensure_folder


class VoiceError(Exception):
    """A voice cannot be saved, found or read; the message says which and why."""


class VoiceExistsError(VoiceError):
    """A voice of that name is already saved (save again with ``overwrite=True`` to replace it)."""


@dataclass(frozen=True)
class Voice:
    """One saved voice: its name, the folder it lives in and its transcript."""

    name: str
    slug: str
    transcript: str
    created: float
    sample_rate: int
    duration_s: float


def same_name(a: str, b: str) -> bool:
    """Two voice names name one voice when they differ only in case and spacing."""
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def slugify(name: str) -> str:
    """A folder name from a voice name: letters, digits, '-' and '_' only (never empty, never a path)."""
    slug = re.sub(r"[^\w-]+", "-", name.strip(), flags=re.UNICODE).strip("-_.").lower()
    return slug[:64] or "voice"


class VoiceLibrary:
    """Saved voices in one folder (``data_dir()/voices`` in the studio)."""

    def __init__(self, folder: str | os.PathLike[str]):
        self.folder = Path(folder).expanduser()  # created by the first save

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
        """Store a voice (atomically: written to a temp folder, then renamed into place).

        A voice of the same name (`same_name`) raises `VoiceExistsError` unless ``overwrite``, which
        replaces that voice and no other; a new name whose folder name is taken by another voice gets a
        folder of its own (``anna-studio-mic-2``). Disk failures raise `DiskError` naming the folder.
        """
        from studio.audio.export import encode_audio

        name = name.strip()
        if not name:
            raise VoiceError("a voice needs a name")
        prompt = np.asarray(prompt, dtype=np.float32).reshape(-1)
        if prompt.size == 0:
            raise VoiceError("a voice needs prompt audio")
        existing = next((v for v in self.list() if same_name(v.name, name)), None)
        if existing is not None and not overwrite:
            raise VoiceExistsError(f"a voice named {existing.name!r} already exists")
        slug = existing.slug if existing is not None else self._free_slug(slugify(name))
        target = self.folder / slug
        voice = Voice(
            name, slug, transcript.strip(), time.time(), int(sample_rate), prompt.size / sample_rate
        )
        files = {"prompt.wav": encode_audio(prompt, sample_rate, "WAV", "FLOAT")}
        if original is not None:
            original = np.asarray(original, dtype=np.float32).reshape(-1)
            files["original.wav"] = encode_audio(original, original_rate or sample_rate, "WAV", "FLOAT")
        files["voice.json"] = json.dumps(asdict(voice), indent=2, ensure_ascii=False).encode()
        staging = None
        try:
            ensure_folder(self.folder)
            staging = Path(tempfile.mkdtemp(prefix=f".{slug}.", dir=self.folder))
            for file_name, payload in files.items():
                (staging / file_name).write_bytes(payload)
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        except OSError as exc:
            raise disk_error(exc, self.folder) from exc
        finally:
            if staging is not None and staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        return voice

    def _free_slug(self, slug: str) -> str:
        """``slug``, or ``slug-2``, ``slug-3``, ... when another voice's folder has that name."""
        candidate, number = slug, 1
        while (self.folder / candidate).exists():
            number += 1
            candidate = f"{slug[:60]}-{number}"
        return candidate

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

    def load_original(self, slug: str) -> tuple[np.ndarray, int] | None:
        """The recording a saved voice was made from (float32, its rate), or None if it was not kept."""
        import soundfile as sf

        path = self.folder / self.get(slug).slug / "original.wav"
        if not path.is_file():
            return None
        try:
            audio, rate = sf.read(path, dtype="float32", always_2d=False)
        except (OSError, RuntimeError) as exc:
            raise VoiceError(f"cannot read the original recording of {slug!r}: {exc}") from exc
        return audio, int(rate)

    def delete(self, slug: str) -> None:
        voice = self.get(slug)
        shutil.rmtree(self.folder / voice.slug)


def saved_prompt(voice_id: str) -> tuple[np.ndarray, int, str] | None:
    """A voice of the studio's library (``data_dir()/voices``): (prompt audio, rate, transcript), or None."""
    from studio.settings import data_dir

    try:
        return VoiceLibrary(data_dir() / "voices").load_prompt(voice_id)
    except VoiceError:
        return None
