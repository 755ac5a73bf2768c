"""What a render made, kept beside it as ``script.json``: per line its text, voice, seed, file, length, cue
and a key (a hash of everything that shapes its audio), so ``--resume`` renders only what changed."""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from studio.atomic_files import atomic_write_bytes
from studio.script.parse import ScriptLine

MANIFEST_NAME = "script.json"
VERSION = 1


@dataclass(frozen=True)
class RenderSettings:
    """Everything besides the line itself that shapes a line's file."""

    format: str = "wav16"  # an ExportFormat alias
    sample_rate: int = 0  # 0: the model's own
    gap_s: float = 0.25  # between lines (0: a short crossfade)
    paragraph_s: float = 0.75  # where a blank line was
    loudness_lufs: float | None = None  # None: as the model made it
    ceiling_dbtp: float = -1.0
    seed: int | None = (
        None  # a line's seed follows from it and its text; None: a fresh one, kept in the manifest
    )
    speed: float = 1.0

    def shaping(self) -> dict[str, Any]:
        """The settings a line's audio depends on (the gaps only shape the joined file)."""
        from studio.audio.export import ExportFormat

        return {
            "format": ExportFormat.parse(self.format).name,
            "sample_rate": self.sample_rate,
            "loudness_lufs": self.loudness_lufs,
            "ceiling_dbtp": self.ceiling_dbtp,
            "speed": self.speed,
            "seed": self.seed,
        }


@dataclass(frozen=True)
class VoicePrompt:
    name: str
    samples: np.ndarray
    sample_rate: int
    transcript: str = ""
    voice_id: str = ""  # a saved voice's id, when it came from the library

    @cached_property
    def fingerprint(self) -> str:
        digest = hashlib.sha256(np.ascontiguousarray(self.samples, dtype=np.float32).tobytes())
        digest.update(f"{self.sample_rate}\0{self.transcript}".encode())
        return digest.hexdigest()[:16]


def line_key(line: ScriptLine, voice: VoicePrompt, settings: RenderSettings) -> str:
    """Changes when anything that shapes this line's audio changes (its text, voice, instruction, settings);
    not with its place in the script, so inserting a line leaves the others' files as they are."""
    payload = json.dumps(
        [line.text, line.instruction, voice.fingerprint, settings.shaping()],
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


@dataclass
class LineRecord:
    number: int
    voice: str
    text: str
    instruction: str = ""
    paragraph_before: bool = False
    seed: int | None = None
    key: str = ""
    file: str = ""
    seconds: float = 0.0
    status: str = "pending"  # pending | rendered | reused | failed
    error: str = ""
    start_s: float | None = None  # in the joined file
    end_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.status in ("rendered", "reused")


def line_seed(line: ScriptLine, base: int) -> int:
    """The seed of a line under ``--seed base``: from the base and the line's words, not its number."""
    words = f"{line.voice.casefold()}\0{line.text}\0{line.instruction}".encode()
    return (base * 1_000_003 + zlib.crc32(words)) % 2**31


def save_manifest(
    folder: Path, settings: RenderSettings, records: list[LineRecord], extra: dict[str, Any]
) -> Path:
    target = folder / MANIFEST_NAME
    payload = {
        "version": VERSION,
        "settings": asdict(settings),
        **extra,
        "lines": [asdict(r) for r in records],
    }
    atomic_write_bytes(target, json.dumps(payload, indent=1, ensure_ascii=False).encode("utf-8"))
    return target


def load_manifest(folder: Path) -> list[LineRecord]:
    """The lines of an earlier render in ``folder`` (none when there is no readable manifest)."""
    try:
        payload = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
        if payload.get("version") != VERSION:
            return []
        return [LineRecord(**entry) for entry in payload.get("lines", [])]
    except (OSError, ValueError, TypeError):
        return []
