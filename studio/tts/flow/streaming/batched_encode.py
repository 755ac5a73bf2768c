"""The flow encoder of many takes' chunks at once: each take's whole token prefix, recomputed in one batch.

The incremental encoder (`IncrementalFlow`, incremental.py) keeps every take's encoder keys/values and
computes only its new tokens, but it launches ~250 small kernels per chunk and take. On a GPU those
launches are the cost, not the arithmetic: in the H200's 64-take trace each chunk's encoder held the
chunk scheduler's thread for 21.6 ms, and the thread was busy the whole time. `encode_prefixes` instead
runs the encoder once for all of a tick's chunks: each take's prefix (prompt and target tokens) padded to
the longest, the streaming chunk masks, each take's own lookahead tokens, as upstream's full-prefix
path computes one take (`UpsampleConformerEncoder.forward`). That costs arithmetic a GPU has to spare
(32 takes of 200 tokens: well under a GFLOP per layer) and keeps no per-take encoder state at all.

Batches are split so that no attention score tensor grows past `SCORE_BUDGET` elements (long prefixes
go in smaller batches); prefixes are grouped by length, so padding stays small.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from studio.tts.device.transfer import to_device
from studio.tts.flow.masks import make_pad_mask

# batch x heads x frames x 2 frames: the up-sampled stack's relative-position scores (fp16: 128 MB at most)
SCORE_BUDGET = 64 * 1024 * 1024


@dataclass
class Prefix:
    """One take's chunk: its token ids from the first prompt token on, of which the first `end` are
    encoded and the rest (at most the lookahead) are only seen by the pre-lookahead convolution."""

    ids: list[int]
    end: int


def _groups(flow: nn.Module, prefixes: list[Prefix]) -> list[list[int]]:
    """Indices of `prefixes` in batches, shortest first, each within `SCORE_BUDGET`."""
    heads = flow.encoder.up_encoders[0].self_attn.h
    ratio = flow.encoder.up_layer.stride
    order = sorted(range(len(prefixes)), key=lambda i: prefixes[i].end)
    groups: list[list[int]] = []
    for i in order:
        frames = ratio * prefixes[i].end  # the longest so far: the group is sorted
        if groups and (len(groups[-1]) + 1) * heads * frames * (2 * frames) <= SCORE_BUDGET:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _encode(flow: nn.Module, prefixes: list[Prefix]) -> torch.Tensor:
    """Encoder output [B, ratio * max end, D] (after the final norm) for one batch of prefixes."""
    encoder = flow.encoder
    pre = encoder.pre_lookahead_layer
    device = flow.input_embedding.weight.device
    width = max(len(p.ids) for p in prefixes)
    ids = torch.zeros(len(prefixes), width, dtype=torch.long)
    for row, prefix in enumerate(prefixes):
        ids[row, : len(prefix.ids)] = torch.tensor(prefix.ids, dtype=torch.long)
    sizes = torch.tensor([[len(p.ids), p.end] for p in prefixes])
    ids, sizes = to_device(ids, device).clamp_min(0), to_device(sizes, device)
    xs, _ = encoder.embed(flow.input_embedding(ids))
    # each row's tokens and lookahead; zeros after them, as the single-take path pads its lookahead
    xs = xs * (~make_pad_mask(sizes[:, 0], width)).unsqueeze(-1).to(xs.dtype)
    out = F.leaky_relu(pre.conv1(F.pad(xs.transpose(1, 2), (0, pre.pre_lookahead_len))))
    longest = max(p.end for p in prefixes)
    ends = sizes[:, 1]
    out = out[:, :, :longest] * (~make_pad_mask(ends, longest)).unsqueeze(1).to(out.dtype)
    out = pre.conv2(F.pad(out, (pre.conv2.kernel_size[0] - 1, 0)))
    xs = out.transpose(1, 2) + xs[:, :longest]
    h, _ = encoder.stacks(xs, ends, streaming=True)
    return h


def encode_prefixes(flow: nn.Module, prefixes: list[Prefix], starts: list[int]) -> list[torch.Tensor]:
    """Per prefix, `flow.encoder_proj` of its frames from token `starts[i]` to its end: [1, 80, n] each."""
    ratio = flow.encoder.up_layer.stride
    mus: list[torch.Tensor | None] = [None] * len(prefixes)
    for group in _groups(flow, prefixes):
        projected = flow.encoder_proj(_encode(flow, [prefixes[i] for i in group]))  # [b, frames, 80]
        for row, i in enumerate(group):
            part = projected[row : row + 1, ratio * starts[i] : ratio * prefixes[i].end]
            mus[i] = part.transpose(1, 2).contiguous()
    return mus
