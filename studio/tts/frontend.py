"""The CosyVoice2 frontend: text (normalise, split, tokenise) and prompt audio (speech tokens, mel, speaker).

`loader.load_frontend(model_dir, device)` builds one from a model folder (`CosyVoice-BlankEN/`,
`campplus.onnx`, `speech_tokenizer_v2.onnx`, with errors naming the file). `Frontend.text` is the
`TextFrontend`; `Frontend.prompt_features(wav, sr)` returns `PromptFeatures` aligned as upstream CosyVoice2
does (2 mel frames per speech token, both trimmed to the shorter).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from studio.tts.features import flow_mel
from studio.tts.onnx_models import SpeakerEmbedder, SpeechTokenizer
from studio.tts.text_normalize import TextNormalizer
from studio.tts.tokenizer_builder import COSYVOICE_SPECIAL_TOKENS

if TYPE_CHECKING:
    from collections.abc import Sequence

MAX_PROMPT_SECONDS = 30.0


class TextFrontend:
    """Qwen2 tokenizer with CosyVoice's special tokens, plus upstream's normalisation and sentence splitting."""

    def __init__(self, tokenizer_dir: str | Path) -> None:
        from transformers import AutoTokenizer

        tokenizer_dir = Path(tokenizer_dir)
        if not (tokenizer_dir / "tokenizer_config.json").is_file():
            raise FileNotFoundError(f"tokenizer folder {tokenizer_dir} has no tokenizer_config.json")
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        except (OSError, ValueError) as error:
            raise ValueError(f"cannot load the tokenizer in {tokenizer_dir}: {error}") from error
        self._tokenizer.add_special_tokens(
            {
                "eos_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
                "additional_special_tokens": list(COSYVOICE_SPECIAL_TOKENS),
            }
        )
        self._normalizer = TextNormalizer()

    def __len__(self) -> int:
        return len(self._tokenizer)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; every fine-grained tag ([breath], <strong>, <|endofprompt|>, ...) is one id."""
        return list(self._tokenizer(text)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=True)

    def split(self, text: str, text_frontend: bool = True) -> list[str]:
        """Normalise offline and cut into sentences of at most ~80 tokens (upstream's `text_normalize`).

        With `text_frontend=False`, or text holding `<|...|>` markup, the text is returned whole, as upstream.
        """
        text = _require_text(text)
        if not text_frontend or ("<|" in text and "|>" in text):
            return [text]
        pieces = self._normalizer.split(text, lambda piece: len(self.encode(piece)))
        if not pieces:
            raise ValueError(f"text has nothing to speak after normalisation (only punctuation?): {text!r}")
        return pieces

    def normalize(self, text: str, text_frontend: bool = True) -> str:
        """Normalise without splitting (upstream's `split=False`, used for prompt and instruction text)."""
        text = _require_text(text)
        if not text_frontend or ("<|" in text and "|>" in text):
            return text
        return self._normalizer.normalize(text)[0]


def _require_text(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("text is empty: give at least one word to synthesise")
    return text.strip()


@dataclass(frozen=True)
class PromptFeatures:
    """What the LLM and flow need from a prompt: tokens [1, N] int32, mel [1, 2N, 80], speaker [1, 192]."""

    speech_token: torch.Tensor
    speech_feat: torch.Tensor
    embedding: torch.Tensor

    def to(self, device: torch.device | str) -> PromptFeatures:
        return PromptFeatures(
            self.speech_token.to(device), self.speech_feat.to(device), self.embedding.to(device)
        )


def _mono_float(wav: np.ndarray | torch.Tensor) -> np.ndarray:
    """Mono float32 numpy samples from [N], [C, N] (torch convention) or [N, C] (soundfile convention)."""
    array = wav.detach().cpu().numpy() if isinstance(wav, torch.Tensor) else np.asarray(wav)
    if array.ndim == 2:
        array = array.mean(axis=0 if array.shape[0] < array.shape[1] else 1)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"prompt audio must be a non-empty mono or multichannel waveform, got {array.shape}")
    if np.issubdtype(array.dtype, np.integer):
        array = array / float(np.iinfo(array.dtype).max)
    array = array.astype(np.float32)
    if not np.isfinite(array).all():
        raise ValueError("prompt audio contains NaN or infinite samples")
    return array


def _resample(samples: np.ndarray, sr: int, target: int) -> torch.Tensor:
    import soxr

    out = samples if sr == target else soxr.resample(samples, sr, target, quality="HQ")
    return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32))


class Frontend:
    """Everything before the LLM: `text` (a TextFrontend) and the two ONNX models for prompt audio."""

    def __init__(
        self,
        text: TextFrontend,
        speaker_embedder: SpeakerEmbedder,
        speech_tokenizer: SpeechTokenizer,
        device: torch.device | str = "cpu",
    ) -> None:
        self.text = text
        self.speaker_embedder = speaker_embedder
        self.speech_tokenizer = speech_tokenizer
        self.device = torch.device(device)

    def prompt_features(
        self, wav: np.ndarray | torch.Tensor | str | Path, sr: int | None = None
    ) -> PromptFeatures:
        """Speech tokens, flow mel and speaker embedding of a prompt (array at `sr`, or an audio file path)."""
        if isinstance(wav, (str, Path)):
            import soundfile

            try:
                wav, sr = soundfile.read(str(wav), dtype="float32", always_2d=False)
            except (RuntimeError, soundfile.LibsndfileError) as error:
                raise ValueError(f"cannot read prompt audio {wav}: {error}") from error
        if not sr or sr <= 0:
            raise ValueError(f"prompt sample rate must be a positive integer, got {sr}")
        samples = _mono_float(wav)
        seconds = samples.size / sr
        if seconds > MAX_PROMPT_SECONDS:
            raise ValueError(
                f"prompt audio is {seconds:.1f} s long; at most {MAX_PROMPT_SECONDS:.0f} s is supported"
            )
        wav16k, wav24k = _resample(samples, sr, 16000), _resample(samples, sr, 24000)
        if wav16k.numel() < 16000 * 0.1:
            raise ValueError(f"prompt audio is too short ({seconds:.2f} s); give at least a second of speech")
        speech_token = self.speech_tokenizer.tokenize(wav16k)
        embedding = self.speaker_embedder.embed(wav16k)
        speech_feat = flow_mel(wav24k).squeeze(0).transpose(0, 1).unsqueeze(0)
        token_len = min(speech_feat.shape[1] // 2, speech_token.shape[1])
        if token_len == 0:
            raise ValueError(f"prompt audio is too short ({seconds:.2f} s) to yield speech tokens")
        features = PromptFeatures(
            speech_token=speech_token[:, :token_len].contiguous(),
            speech_feat=speech_feat[:, : 2 * token_len].contiguous(),
            embedding=embedding,
        )
        return features.to(self.device)
