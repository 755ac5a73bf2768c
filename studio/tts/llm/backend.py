"""The token-backend protocol: what the pipeline asks of an LM backend (PyTorch or vLLM), and its input check."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Protocol

import torch

from studio.tts.device.transfer import on_host_apart
from studio.tts.llm.sampling import RasSampling


class TokenBackend(Protocol):
    """Decodes speech tokens from a prompt; `TorchTokenBackend` and `VllmTokenBackend` implement it."""

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
        """Yield speech token ids (< 6561) as decoded; stop at a stop id (after `min_len`, unless
        `ignore_stop`), at `max_len`, or once `cancel` is set. Randomness only from `seed`."""
        ...


def check_prompt_embeds(prompt_embeds: torch.Tensor, hidden_size: int) -> None:
    """Refuse anything but the token-backend protocol's [L, hidden_size] prompt, before any decoding."""
    if prompt_embeds.dim() != 2 or prompt_embeds.shape[1] != hidden_size:
        raise ValueError(f"prompt_embeds must be [L, {hidden_size}], got {tuple(prompt_embeds.shape)}")


def prompt_embeds_for(
    backend: object, make: Callable[[], torch.Tensor], device: torch.device, key: tuple | None = None
) -> torch.Tensor:
    """`make()`'s prompt embeddings where `backend` reads them: on the host, made on a CUDA stream apart from
    the flow's queued work, for a backend whose ``prompt_embeds_on_host`` is true (vLLM), and kept in its
    `host_embeds` (a `RecentlyUsed`) by `key` when given; else on the device."""
    with torch.inference_mode():
        if getattr(backend, "prompt_embeds_on_host", False):
            cache = getattr(backend, "host_embeds", None)
            if key is None or cache is None:
                return on_host_apart(make, device)
            return cache.get(key, lambda: on_host_apart(make, device))
        return make()
