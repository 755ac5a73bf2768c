"""Per-voice cache of CosyVoice3's streamed-flow state over the prompt, so a voice's later takes skip it.

A streamed take's DiT keys and values of a chunk are final once the chunk is complete (flow_stream.py).
The prompt's leading chunks are complete before the take's first token, and what they depend on is the
voice's alone: their tokens' features and lookahead tokens are all prompt tokens (chunks ending at least
`pre_lookahead_len` tokens before the prompt's end), their prompt mel, the speaker vector, the noise
(fixed, indexed by frame), the flow's weights and the Euler schedule. So every take of a voice computes
the same keys and values for them at every step, block and CFG row, and the same position-convolution
inputs at their end. `DiTPromptCache` keeps those per voice (`PromptEntry`), least recently used first
out, bounded in bytes: at the official width 3.6 MB per frame in fp32 (1.8 MB in fp16), so a 10 s prompt
(500 frames, 450 of them cached) costs 0.8 GB in fp16.

Entries are keyed by the flow module, its device and compute dtype (autocast included), the Euler steps,
and the content of the prompt tokens, prompt mel and speaker embedding (`prompt_key`). They assume the
flow's weights stay as they were: `clear()` after changing them. Takes copy an entry into their own
buffers, so a cached tensor is never written.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from studio.recent import RecentlyUsedBytes
from studio.tts.device.cuda_graphs import autocast_dtype
from studio.tts.device.prompt_caches import CachePerDevice, contents_digest, module_number


@dataclass(frozen=True)
class PromptEntry:
    """A voice's streamed-flow state over its prompt's first `frames` frames (never written)."""

    frames: int
    keys: torch.Tensor  # [steps, blocks, CFG rows, heads, frames, dim_head]
    values: torch.Tensor
    position_left: (
        torch.Tensor
    )  # [steps, 2, CFG rows, dim, kernel - 1]: the convolutions' inputs before `frames`

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.keys, self.values, self.position_left))


def cached_prompt_frames(prompt_tokens: int, lookahead: int, token_mel_ratio: int, chunk: int) -> int:
    """Frames of the prompt's whole chunks whose tokens and lookahead are all prompt tokens (0 if none,
    or when a chunk is not a whole number of tokens)."""
    if chunk % token_mel_ratio:
        return 0
    return max(0, (prompt_tokens - lookahead) * token_mel_ratio) // chunk * chunk


def prompt_key(
    flow: torch.nn.Module,
    n_timesteps: int,
    prompt_token: torch.Tensor,
    prompt_feat: torch.Tensor,
    embedding: torch.Tensor,
) -> tuple:
    """What a voice's cached prompt state depends on: the flow module, its device, its compute dtype
    (the weights' and autocast's, as now), the Euler steps, and the prompt's content."""
    weight = flow.decoder.estimator.proj_out.weight
    device_type = weight.device.type
    autocast = str(autocast_dtype(device_type))
    content = contents_digest(prompt_token.long(), prompt_feat, embedding)
    return (module_number(flow), str(weight.device), str(weight.dtype), autocast, int(n_timesteps), content)


class DiTPromptCache(RecentlyUsedBytes[PromptEntry]):
    """Thread-safe LRU of `PromptEntry`s bounded by `max_bytes`; counts hits, misses, evictions and
    entries refused for being larger than the whole budget."""


_defaults: CachePerDevice[DiTPromptCache] = CachePerDevice(DiTPromptCache)


def default_prompt_cache(device: torch.device | str) -> DiTPromptCache | None:
    """The process's CosyVoice3 prompt cache for a device type (sized on first use); None when the
    budget is 0."""
    return _defaults.get(device)
