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

import hashlib
import itertools
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import torch

from studio import envs

DEFAULT_BUDGET_MB = {"cuda": 1024, "cpu": 256}


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


_flow_numbers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_flow_counter = itertools.count(1)
_flow_numbers_lock = threading.Lock()


def _flow_number(flow: torch.nn.Module) -> int:
    """A number that stands for this flow module as long as the process lives (`id()` is reused)."""
    with _flow_numbers_lock:
        number = _flow_numbers.get(flow)
        if number is None:
            number = _flow_numbers[flow] = next(_flow_counter)
        return number


def _content_digest(*tensors: torch.Tensor) -> str:
    """A digest of the tensors' dtypes, shapes and values (a GPU tensor is read back to the host)."""
    digest = hashlib.blake2b(digest_size=16)
    for tensor in tensors:
        host = tensor.detach().to("cpu").contiguous()
        digest.update(repr((host.dtype, tuple(host.shape))).encode())
        digest.update(host.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


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
    autocast = str(torch.get_autocast_dtype(device_type)) if torch.is_autocast_enabled(device_type) else None
    content = _content_digest(prompt_token.long(), prompt_feat, embedding)
    return (_flow_number(flow), str(weight.device), str(weight.dtype), autocast, int(n_timesteps), content)


class DiTPromptCache:
    """Thread-safe LRU of `PromptEntry`s bounded by `max_bytes`; counts hits, misses, evictions and
    entries refused for being larger than the whole budget."""

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self._entries: OrderedDict[tuple, PromptEntry] = OrderedDict()
        self._lock = threading.Lock()
        self.nbytes = 0
        self.hits = self.misses = self.evictions = self.rejected = 0

    def __len__(self) -> int:
        return len(self._entries)

    def stats(self) -> dict:
        with self._lock:
            return {
                "entries": len(self._entries),
                "bytes": self.nbytes,
                "max_bytes": self.max_bytes,
                "hits": self.hits,
                "misses": self.misses,
                "evictions": self.evictions,
                "rejected": self.rejected,
            }

    def __contains__(self, key: tuple) -> bool:
        """Whether `key` has an entry (no hit or miss counted, the order unchanged)."""
        with self._lock:
            return key in self._entries

    def get(self, key: tuple) -> PromptEntry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry

    def fits(self, nbytes: int) -> bool:
        """Whether an entry of `nbytes` could be kept at all (counts a refusal when not)."""
        if nbytes <= self.max_bytes:
            return True
        with self._lock:
            self.rejected += 1
        return False

    def put(self, key: tuple, entry: PromptEntry) -> bool:
        """Keep `entry` as the most recent, evicting the least recently used until the bytes fit; False
        (nothing kept) when it alone exceeds the budget."""
        if not self.fits(entry.nbytes):
            return False
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self.nbytes -= previous.nbytes
            self._entries[key] = entry
            self.nbytes += entry.nbytes
            while self.nbytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self.nbytes -= evicted.nbytes
                self.evictions += 1
            return True

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.nbytes = 0


_defaults: dict[str, DiTPromptCache | None] = {}
_defaults_lock = threading.Lock()


def budget_bytes(device_type: str) -> int:
    """``$STUDIO_PROMPT_CACHE_MB`` (0 disables), else 1024 MB on CUDA and 256 MB elsewhere."""
    megabytes = envs.PROMPT_CACHE_MB.number()
    if megabytes is None:
        megabytes = DEFAULT_BUDGET_MB.get(device_type, DEFAULT_BUDGET_MB["cpu"])
    return max(0, int(megabytes * 2**20))


def default_prompt_cache(device: torch.device | str) -> DiTPromptCache | None:
    """The process's CosyVoice3 prompt cache for a device type (sized on first use); None when the
    budget is 0."""
    device_type = torch.device(device).type
    with _defaults_lock:
        if device_type not in _defaults:
            budget = budget_bytes(device_type)
            _defaults[device_type] = DiTPromptCache(budget) if budget > 0 else None
        return _defaults[device_type]
