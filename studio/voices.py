"""The voice library: named reference voices (cleaned prompt audio, original recording, transcript), Qt-free.

Each voice is a folder ``<slug>/`` holding ``prompt.wav`` (the cleaned prompt the engine gets),
``original.wav`` (the recording as made, kept untouched) and ``voice.json`` (name, transcript, created,
aliases: other names a request may use, e.g. OpenAI's ``alloy``; unique in the library, case-insensitive).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from studio.atomic_files import atomic_write_bytes, disk_error, ensure_folder


class VoiceError(Exception):
    """A voice cannot be saved, found or read; the message says which and why."""


class VoiceExistsError(VoiceError):
    """A voice of that name is already saved (save again with ``overwrite=True`` to replace it)."""


class VoiceNotFoundError(VoiceError):
    """No saved voice has that id."""


class AliasTakenError(VoiceError):
    """An alias is another voice's id or alias."""


class VoiceBusyError(VoiceError):
    """Another save of a voice of that name held its claim for longer than `CLAIM_WAIT_S`."""


MAX_NAME_CHARS = 100
MAX_ALIASES = 32
CLAIM_WAIT_S = 10.0  # how long a save waits for a concurrent save of the same name
STALE_CLAIM_S = 60.0  # a claim this old was left by a process that died while saving
ALIASES_CLAIM = "\x00aliases"  # the claim key of alias changes (no voice name holds a NUL)
_VOICE_ID = re.compile(r"[^\W_][\w-]{0,79}")  # what slugify makes (and "-2" suffixes): never a path


@dataclass(frozen=True)
class Voice:
    """One saved voice: its name, the folder it lives in and its transcript."""

    name: str
    slug: str
    transcript: str
    created: float
    sample_rate: int
    duration_s: float
    aliases: tuple[str, ...] = ()  # other names (`alias_key` form); old sidecars have none


def folded(name: str) -> str:
    """``name`` as names compare: case and spacing do not matter."""
    return " ".join(name.split()).casefold()


def same_name(a: str, b: str) -> bool:
    """Two voice names name one voice when they differ only in case and spacing."""
    return folded(a) == folded(b)


def check_name(name: str, what: str = "voice name") -> str:
    """``name`` stripped; a `VoiceError` when it is empty, too long or holds control characters."""
    name = (name or "").strip()
    if not name:
        raise VoiceError(f"a {what} cannot be empty")
    if len(name) > MAX_NAME_CHARS:
        raise VoiceError(f"a {what} has at most {MAX_NAME_CHARS} characters (this one has {len(name)})")
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in name):
        raise VoiceError(f"a {what} cannot hold control characters")
    return name


def alias_key(alias: str) -> str:
    """An alias checked as a voice name is (`check_name`) and folded: case and spacing do not matter."""
    return folded(check_name(alias, "voice alias"))


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

        name = check_name(name)
        prompt = np.asarray(prompt, dtype=np.float32).reshape(-1)
        if prompt.size == 0:
            raise VoiceError("a voice needs prompt audio")
        files = {"prompt.wav": encode_audio(prompt, sample_rate, "WAV", "FLOAT")}
        if original is not None:
            original = np.asarray(original, dtype=np.float32).reshape(-1)
            files["original.wav"] = encode_audio(original, original_rate or sample_rate, "WAV", "FLOAT")
        try:
            ensure_folder(self.folder)
            with (
                self._claim(name) as existing,
                self._hold(ALIASES_CLAIM, "the voice aliases are being changed"),
            ):
                if existing is not None and not overwrite:
                    raise VoiceExistsError(f"a voice named {existing.name!r} already exists")
                slug = existing.slug if existing is not None else self._reserve_slug(slugify(name))
                kept = self._kept_aliases(existing)  # a replaced voice keeps its aliases
                voice = Voice(
                    name,
                    slug,
                    transcript.strip(),
                    time.time(),
                    int(sample_rate),
                    prompt.size / sample_rate,
                    kept,
                )
                files["voice.json"] = json.dumps(asdict(voice), indent=2, ensure_ascii=False).encode()
                try:
                    self._write(slug, files)
                except OSError:
                    if existing is None:
                        shutil.rmtree(self.folder / slug, ignore_errors=True)  # the folder reserved for it
                    raise
        except OSError as exc:
            raise disk_error(exc, self.folder) from exc
        return voice

    def _write(self, slug: str, files: dict[str, bytes]) -> None:
        """The voice's files into its folder: written to a staging folder, the old folder moved aside and the
        new one renamed into place (``voice.json`` of a half-made folder never exists)."""
        target, staging, old = self.folder / slug, None, None
        try:
            staging = Path(tempfile.mkdtemp(prefix=f".{slug}.", dir=self.folder))
            for file_name, payload in files.items():
                (staging / file_name).write_bytes(payload)
            old = Path(tempfile.mkdtemp(prefix=f".{slug}.old.", dir=self.folder))
            try:
                os.replace(target, old / "voice")  # the reserved (empty) folder, or the voice replaced
            except FileNotFoundError:
                pass  # deleted meanwhile: saved anew
            os.replace(staging, target)
        finally:
            for leftover in (staging, old):
                if leftover is not None and leftover.exists():
                    shutil.rmtree(leftover, ignore_errors=True)

    @contextmanager
    def _claim(self, name: str) -> Iterator[Voice | None]:
        """Hold the claim on ``name`` (an exclusively created file, so concurrent saves of one name, in this
        process or another, take turns) and yield the saved voice of that name, if any."""
        with self._hold(folded(name), f"the voice {name!r} is being saved"):
            yield next((v for v in self.list() if same_name(v.name, name)), None)

    @contextmanager
    def _hold(self, key: str, what: str) -> Iterator[None]:
        """Hold the claim file of ``key`` (exclusively created: holders in this process or another take
        turns); `VoiceBusyError` naming ``what`` after `CLAIM_WAIT_S`."""
        path = self.folder / f".claim-{hashlib.sha256(key.encode()).hexdigest()[:32]}"
        deadline = time.monotonic() + CLAIM_WAIT_S
        while True:
            try:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                break
            except FileExistsError:
                if _age(path) > STALE_CLAIM_S:
                    path.unlink(missing_ok=True)
                elif time.monotonic() > deadline:
                    raise VoiceBusyError(f"{what} by another request") from None
                else:
                    time.sleep(0.02)
        try:
            yield
        finally:
            path.unlink(missing_ok=True)

    def _reserve_slug(self, slug: str) -> str:
        """``slug``, or ``slug-2``, ``slug-3``, ... when another voice's folder has that name; the folder is
        created (exclusively) so that no concurrent save takes it too."""
        candidate, number = slug, 1
        while True:
            try:
                (self.folder / candidate).mkdir()
                return candidate
            except FileExistsError:
                number += 1
                candidate = f"{slug[:60]}-{number}"

    def list(self) -> list[Voice]:
        """Saved voices by name; damaged folders are skipped."""
        voices = []
        for meta in self.folder.glob("*/voice.json"):
            if meta.parent.name.startswith("."):
                continue
            try:
                voices.append(_voice(meta.read_text()))
            except (ValueError, TypeError, OSError):
                continue
        return sorted(voices, key=lambda v: v.name.lower())

    def get(self, slug: str) -> Voice:
        """The voice whose id is exactly ``slug`` (no case folding, no slug resolution)."""
        if not _VOICE_ID.fullmatch(slug or ""):
            raise VoiceNotFoundError(f"no saved voice {slug!r}")
        try:
            voice = _voice((self.folder / slug / "voice.json").read_text())
        except FileNotFoundError:
            raise VoiceNotFoundError(f"no saved voice {slug!r}") from None
        except (ValueError, TypeError) as exc:
            raise VoiceError(f"the saved voice {slug!r} is damaged: {exc}") from exc
        if voice.slug != slug:  # a case-insensitive file system found another spelling
            raise VoiceNotFoundError(f"no saved voice {slug!r}")
        return voice

    def by_alias(self, alias: str) -> Voice | None:
        """The voice that has ``alias`` (any case and spacing), or None."""
        key = folded(alias or "")
        return next((v for v in self.list() if key in v.aliases), None) if key else None

    def set_aliases(self, slug: str, aliases: list[str]) -> Voice:
        """Replace the aliases of the voice whose id is exactly ``slug`` (its sidecar rewritten atomically, under
        the library's alias claim so that two voices never take one alias). `VoiceNotFoundError` for an
        unknown id, `AliasTakenError` for an alias that is another voice's id or alias, `VoiceError` for a
        malformed one."""
        keys = tuple(dict.fromkeys(alias_key(alias) for alias in aliases))
        if len(keys) > MAX_ALIASES:
            raise VoiceError(f"a voice has at most {MAX_ALIASES} aliases")
        self.get(slug)
        try:
            with self._hold(ALIASES_CLAIM, "the voice aliases are being changed"):
                others = [v for v in self.list() if v.slug != slug]
                for key in keys:
                    owner = next((v for v in others if key == v.slug or key in v.aliases), None)
                    if owner is not None:
                        what = "the id" if key == owner.slug else "an alias"
                        raise AliasTakenError(f"the alias {key!r} is {what} of the voice {owner.slug!r}")
                voice = replace(self.get(slug), aliases=keys)
                payload = json.dumps(asdict(voice), indent=2, ensure_ascii=False).encode()
                atomic_write_bytes(self.folder / slug / "voice.json", payload)
        except FileNotFoundError:
            raise VoiceNotFoundError(f"no saved voice {slug!r}") from None
        return voice

    def _kept_aliases(self, existing: Voice | None) -> tuple[str, ...]:
        try:
            return self.get(existing.slug).aliases if existing is not None else ()
        except VoiceError:
            return ()

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
        """Remove the voice whose id is exactly ``slug`` (moved aside first: a concurrent reader sees it
        whole or not at all)."""
        voice = self.get(slug)
        old = None
        try:
            with self._hold(
                ALIASES_CLAIM, "the voice aliases are being changed"
            ):  # not while its aliases are being set
                old = Path(tempfile.mkdtemp(prefix=f".{slug}.old.", dir=self.folder))
                os.replace(self.folder / voice.slug, old / "voice")
        except FileNotFoundError:
            raise VoiceNotFoundError(f"no saved voice {slug!r}") from None
        except OSError as exc:
            raise disk_error(exc, self.folder) from exc
        finally:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)


def _voice(sidecar: str) -> Voice:
    """A `Voice` from its ``voice.json`` text (aliases a tuple; none in sidecars written before them)."""
    fields = json.loads(sidecar)
    fields["aliases"] = tuple(fields.get("aliases") or ())
    return Voice(**fields)


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def saved_prompt(voice_id: str) -> tuple[np.ndarray, int, str] | None:
    """A voice of the studio's library (``data_dir()/voices``): (prompt audio, rate, transcript), or None."""
    from studio.settings import data_dir

    try:
        return VoiceLibrary(data_dir() / "voices").load_prompt(voice_id)
    except VoiceError:
        return None
