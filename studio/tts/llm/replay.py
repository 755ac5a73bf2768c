"""A token backend that decodes nothing: it replays a fixed pseudo-random run of speech tokens.

The warm-up that runs beside vLLM's start drives the text frontend, the prompt features, the flow and
HiFT with it while the LM is not ready yet; it honours the protocol's lengths and cancel like the real
backends (`TorchTokenBackend`, `VllmTokenBackend`), so the pipeline cannot tell the difference.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import torch

from studio.tts.llm.sampling import RasSampling

SPEECH_TOKENS = 6561  # ids below the stop ids


class ReplayTokens:
    """Yields `max_len` tokens when told to ignore stops, else `min_len` (at least one), seeded."""

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
        draws = random.Random(seed)
        for _ in range(max_len if ignore_stop else max(1, min(min_len, max_len))):
            if cancel.is_set():
                return
            yield draws.randrange(SPEECH_TOKENS)
