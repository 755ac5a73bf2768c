"""The prompt frontend: prompt audio -> speech tokens, mel and speaker embedding (text: `text.py`).

`loader.load_frontend(model_dir, device)` builds one from a model folder of either family
(`CosyVoice-BlankEN/`, `campplus.onnx`, the family's speech tokenizer, with errors naming the file).
`Frontend.text` is the `TextFrontend`; `Frontend.prompt_features(wav, sr)` returns `PromptFeatures` aligned
as upstream does for both families (2 mel frames per speech token, both trimmed to the shorter).

The same prompt recording is usually used take after take, so `Frontend` keeps the features of recent
prompts in a small LRU keyed by the audio's content (`$STUDIO_PROMPT_FEATURES_CACHE` entries, default 32,
0 disables): a repeated take skips resampling, both ONNX models and the mel, tens of ms of first-chunk latency.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from studio import envs
from studio.recent import RecentlyUsed
from studio.request import MAX_PROMPT_SECONDS
from studio.tts.frontend.features import FLOW_MEL, flow_mel
from studio.tts.frontend.onnx_models import SpeakerEmbedder, SpeechTokenizer
from studio.tts.frontend.text import TextFrontend

ENV_CACHE_ENTRIES = envs.PROMPT_FEATURES_CACHE.name
DEFAULT_CACHE_ENTRIES = 32


@dataclass(frozen=True)
class PromptFeatures:
    """What the LLM and flow need from a prompt: tokens [1, N] int32, mel [1, 2N, 80], speaker [1, 192]."""

    speech_token: torch.Tensor
    speech_feat: torch.Tensor
    embedding: torch.Tensor
    token_ids: tuple[int, ...] = ()  # the speech tokens on the host (reading them off a GPU would sync it)

    def to(self, device: torch.device | str) -> PromptFeatures:
        ids = self.token_ids or tuple(int(i) for i in self.speech_token.reshape(-1).tolist())
        return PromptFeatures(
            self.speech_token.to(device), self.speech_feat.to(device), self.embedding.to(device), ids
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


def _audio_key(samples: np.ndarray, sr: int) -> tuple[str, int]:
    """The cache key of a prompt: a digest of its mono float32 samples (whatever form they came in) and rate."""
    return hashlib.blake2b(samples.tobytes(), digest_size=16).hexdigest(), int(sr)


def cache_entries() -> int:
    """``$STUDIO_PROMPT_FEATURES_CACHE`` (a number of prompts, 0 disables), else 32."""
    entries = envs.PROMPT_FEATURES_CACHE.count()
    return DEFAULT_CACHE_ENTRIES if entries is None else entries


def _resample(samples: np.ndarray, sr: int, target: int) -> torch.Tensor:
    import soxr

    out = samples if sr == target else soxr.resample(samples, sr, target, quality="HQ")
    return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32))


class Frontend:
    """Everything before the LLM: `text` (a TextFrontend) and the two ONNX models for prompt audio.

    Prompt features are cached per audio content (see the module docstring); `max_cached_prompts=None`
    reads ``$STUDIO_PROMPT_FEATURES_CACHE``. Cached `PromptFeatures` are shared between callers, who only
    read their tensors.
    """

    def __init__(
        self,
        text: TextFrontend,
        speaker_embedder: SpeakerEmbedder,
        speech_tokenizer: SpeechTokenizer,
        device: torch.device | str = "cpu",
        max_cached_prompts: int | None = None,
        flow_mel_fmax: float | None = FLOW_MEL["fmax"],
    ) -> None:
        self.text = text
        self.flow_mel_fmax = flow_mel_fmax  # the yaml's feat_extractor fmax (CosyVoice3: None)
        self.speaker_embedder = speaker_embedder
        self.speech_tokenizer = speech_tokenizer
        self.device = torch.device(device)
        self.max_cached_prompts = cache_entries() if max_cached_prompts is None else int(max_cached_prompts)
        self._cache: RecentlyUsed[PromptFeatures] = RecentlyUsed(self.max_cached_prompts)

    def prompt_cache_stats(self) -> dict:
        """Hits, misses, entries held and the bound of the prompt features cache."""
        cache = self._cache
        return {
            "hits": cache.hits,
            "misses": cache.misses,
            "entries": len(cache),
            "max_entries": cache.capacity,
        }

    def prompt_features(
        self, wav: np.ndarray | torch.Tensor | str | Path, sr: int | None = None
    ) -> PromptFeatures:
        """Speech tokens, flow mel and speaker embedding of a prompt (array at `sr`, or an audio file path).

        Bad audio raises every time: it is validated before the cache lookup, and a failed computation
        stores nothing.
        """
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
        if self.max_cached_prompts <= 0:
            return self._compute(samples, sr)
        # made outside the cache's lock: two first takes may both compute
        return self._cache.get(_audio_key(samples, sr), lambda: self._compute(samples, sr))

    def _compute(self, samples: np.ndarray, sr: int) -> PromptFeatures:
        # ordinary tensors even when the caller is in inference mode: a cached inference tensor would
        # break a later caller outside it ("Inference tensors cannot be saved for backward")
        with torch.inference_mode(False), torch.no_grad():
            seconds = samples.size / sr
            wav16k, wav24k = _resample(samples, sr, 16000), _resample(samples, sr, 24000)
            if wav16k.numel() < 16000 * 0.1:
                raise ValueError(
                    f"prompt audio is too short ({seconds:.2f} s); give at least a second of speech"
                )
            speech_token = self.speech_tokenizer.tokenize(wav16k)
            embedding = self.speaker_embedder.embed(wav16k)
            speech_feat = flow_mel(wav24k, self.flow_mel_fmax).squeeze(0).transpose(0, 1).unsqueeze(0)
            token_len = min(speech_feat.shape[1] // 2, speech_token.shape[1])
            if token_len == 0:
                raise ValueError(f"prompt audio is too short ({seconds:.2f} s) to yield speech tokens")
            features = PromptFeatures(
                speech_token=speech_token[:, :token_len].contiguous(),
                speech_feat=speech_feat[:, : 2 * token_len].contiguous(),
                embedding=embedding,
            )
            return features.to(self.device)
