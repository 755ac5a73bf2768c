"""Speech-token decoding with plain PyTorch + transformers: the reference-exact backend that runs anywhere.

Decodes with a transformers `DynamicCache` (upstream's HF loop garbles on transformers 5), a per-request
`torch.Generator` and a cancel event; implements `studio.tts.llm.backend.TokenBackend`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import torch

from studio.tts.llm.backend import check_prompt_embeds
from studio.tts.llm.model import Qwen2LM
from studio.tts.llm.sampling import RasSampling


class TorchDecodeSession:
    """One request's decoding state on the PyTorch backend: KV cache and the next-token log-probs."""

    def __init__(self, lm: Qwen2LM, prompt_embeds: torch.Tensor) -> None:
        check_prompt_embeds(prompt_embeds, lm.llm_input_size)
        self.lm = lm
        self.cache = lm.llm.new_cache()
        self._pending = prompt_embeds.unsqueeze(0)

    @torch.inference_mode()
    def logp(self) -> torch.Tensor:
        """Feed what is pending through the backbone and return the next-token log-probs [V] (float32)."""
        hidden = self.lm.llm.step(self._pending, self.cache)
        return self.lm.speech_logp(hidden)[0]

    @torch.inference_mode()
    def feed(self, token: int) -> None:
        """Queue a decoded speech token as the next input position."""
        self._pending = self.lm.speech_embedding.weight[token].reshape(1, 1, -1)


class TorchTokenBackend:
    """Speech-token decoding with plain PyTorch + transformers (the reference-exact, any-device backend)."""

    def __init__(self, llm: Qwen2LM) -> None:
        self.llm = llm

    def start(self, prompt_embeds: torch.Tensor) -> TorchDecodeSession:
        return TorchDecodeSession(self.llm, prompt_embeds)

    def generate(
        self,
        prompt_embeds: torch.Tensor,
        *,
        min_len: int,
        max_len: int,
        sampling: RasSampling,
        seed: int | None,
        cancel: threading.Event,
        ignore_stop: bool = False,
    ) -> Iterator[int]:
        """Yield speech token ids until a stop id (after `min_len`), `max_len` tokens, or `cancel` is set."""
        session = self.start(prompt_embeds)
        generator = torch.Generator(device=prompt_embeds.device)
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(int(seed))
        stop_ids = self.llm.stop_token_ids
        decoded: list[int] = []
        for step in range(max_len):
            if cancel.is_set():
                return
            logp = session.logp()
            if ignore_stop or step < min_len:
                token = sampling.sample_avoiding(logp, decoded, stop_ids, generator)
            else:
                token = sampling.sample(logp, decoded, generator)
            if token in stop_ids:
                return
            if cancel.is_set():
                return
            yield token
            decoded.append(token)
            session.feed(token)
