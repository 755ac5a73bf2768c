"""Automatic transcripts of reference voices with Whisper (transformers), in the engine process or the CLI.

`resolve_model` turns a setting — a local folder or a hub id such as ``openai/whisper-large-v3-turbo`` —
into a folder on disk, downloading it once with progress and resume (huggingface_hub) when it is not
there yet. `Transcriber` loads it (GPU in fp16 when present, else CPU) and turns a reference recording
into a `Transcript` with its detected language. Every way this can fail is an `AsrError` with a sentence
a user can act on — no model, no network, a silent or too long recording, an unknown language, nothing
heard — never a silent empty transcript.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from studio.asr import DEFAULT_ASR_MODEL

ASR_RATE = 16000
MAX_SECONDS = 30.0  # Whisper hears 30 s at a time; a reference voice is at most that long
_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"]


class AsrError(Exception):
    """Transcription cannot be done as asked; the message says why and what to do instead."""


class AsrUnavailable(AsrError):
    """No ASR model can be had here (not on disk, cannot be downloaded): the user types the transcript."""


@dataclass(frozen=True)
class Transcript:
    """What the ASR heard: the text, the language (code and name), how long it took, and which model."""

    text: str
    language: str
    language_name: str
    seconds: float
    model: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def language_names() -> dict[str, str]:
    """Whisper's languages: code -> English name."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    return dict(LANGUAGES)


def resolve_model(spec: str, progress: Callable[[str], None] | None = None, download: bool = True) -> Path:
    """The folder of ASR model ``spec`` (a local folder, or a hub id fetched once and cached)."""
    spec = (spec or DEFAULT_ASR_MODEL).strip()
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise AsrUnavailable(f"{path} is not a Whisper model folder (it has no config.json)")
        return path
    if spec.startswith((".", "/", "~")) or "\\" in spec or spec.count("/") > 1:
        raise AsrUnavailable(f"the ASR model folder {path} does not exist; type the transcript instead")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(spec, allow_patterns=_FILES, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached yet: download below
        pass
    if not download:
        raise AsrUnavailable(f"the ASR model {spec} is not on this computer yet")
    if progress is not None:
        progress(f"downloading the ASR model {spec} (once; it resumes if cut)")
    bars = progress_bars(spec, progress) if progress is not None else None
    try:
        return Path(snapshot_download(spec, allow_patterns=_FILES, tqdm_class=bars))
    except Exception as exc:  # noqa: BLE001 - network, permissions, unknown id: all "unavailable"
        reason = _download_problem(exc)
        raise AsrUnavailable(
            f"the ASR model {spec} is not on this computer and could not be downloaded ({reason}); "
            "type the transcript, or choose a local Whisper folder in Settings"
        ) from exc


def _download_problem(exc: Exception) -> str:
    """A short cause for a failed download (the hub client's own messages run to a paragraph)."""
    text = str(exc)
    if "offline" in text.lower() or "HF_HUB_OFFLINE" in text:
        return "the studio has no access to the model hub"
    name = type(exc).__name__
    if "Connect" in name or "Timeout" in name or "connect" in text.lower():
        return "the model hub could not be reached"
    if "RepositoryNotFound" in name or "404" in text:
        return "no such model on the hub"
    first = text.split(". ")[0].splitlines()[0] if text else name
    return first[:120]


def progress_bars(spec: str, progress: Callable[[str], None], step: float = 0.05):
    """A tqdm class that also reports the download's progress as sentences, every ``step`` of the way."""
    from tqdm.auto import tqdm

    class Reporting(tqdm):
        _reported = -1.0

        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            if self.total:
                done = self.n / self.total
                if done - self._reported >= step or done >= 1.0 > self._reported:
                    self._reported = done
                    progress(f"downloading the ASR model {spec}: {done:.0%} of {self.total} files")
            return shown

    return Reporting


class Transcriber:
    """A loaded Whisper model. ``transcribe`` is thread-safe (one at a time)."""

    def __init__(self, model: str | Path, device: str | None = None):
        import threading

        import torch
        from transformers import WhisperForConditionalGeneration, WhisperProcessor

        self.model_dir = Path(model)
        self.name = self.model_dir.name
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        dtype = torch.float16 if self.device.type == "cuda" else torch.float32
        try:
            self.processor = WhisperProcessor.from_pretrained(str(self.model_dir))
            self.model = WhisperForConditionalGeneration.from_pretrained(str(self.model_dir), dtype=dtype)
        except (OSError, ValueError) as exc:
            raise AsrUnavailable(f"cannot load the ASR model in {self.model_dir}: {exc}") from exc
        self.model.to(self.device).eval()
        self._lock = threading.Lock()

    def transcribe(self, samples: np.ndarray, sample_rate: int, language: str | None = None) -> Transcript:
        """The transcript of a mono recording; ``language`` (a code like "en") skips detection."""
        import torch

        started = time.perf_counter()
        names = language_names()
        if language:
            language = language.strip().lower()
            code = next((c for c, n in names.items() if language in (c, n)), None)
            if code is None:
                raise AsrError(f"unknown language {language!r}; use a code such as en, zh, de, fr, ja")
            language = code
        audio = _prepare(samples, sample_rate)
        features = self.processor(audio, sampling_rate=ASR_RATE, return_tensors="pt").input_features
        features = features.to(self.device, self.model.dtype)
        budget = int(16 + 8 * audio.size / ASR_RATE)  # fast speech is ~4 tokens a second
        with self._lock, torch.inference_mode():
            if language is None:
                language = self._detect(features)
            ids = self.model.generate(
                features, language=language, task="transcribe", max_new_tokens=min(budget, 440)
            )
        text = self.processor.batch_decode(ids, skip_special_tokens=True)[0].strip()
        if not text:
            raise AsrError("the ASR model heard no words in the recording; type the transcript")
        return Transcript(
            text, language, names.get(language, language), time.perf_counter() - started, self.name
        )

    def _detect(self, features) -> str:
        if not getattr(self.model.generation_config, "is_multilingual", False):
            return "en"
        token = self.model.detect_language(features)
        code = self.processor.tokenizer.convert_ids_to_tokens(int(token.reshape(-1)[0]))
        return code.strip("<|>")


def _prepare(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """16 kHz mono float32; refuses what cannot be transcribed, saying why."""
    from studio.audio import vad
    from studio.audio.clean import resample

    audio = np.asarray(samples, dtype=np.float32).reshape(-1)
    if audio.size == 0 or not np.isfinite(audio).all():
        raise AsrError("the recording is empty or damaged: nothing to transcribe")
    seconds = audio.size / float(sample_rate)
    if seconds > MAX_SECONDS + 0.5:
        raise AsrError(
            f"the recording is {seconds:.0f} s long; transcription takes a reference of at most "
            f"{MAX_SECONDS:.0f} s (clean it first: the studio cuts it at a pause)"
        )
    audio = resample(audio, int(sample_rate), ASR_RATE) if sample_rate != ASR_RATE else audio
    if not vad.speech_segments(audio):
        raise AsrError("no speech found in the recording (silence or only noise): nothing to transcribe")
    return audio
