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

On CUDA the encoder's ~400 kernels are launch-bound too: eagerly they held the scheduler's thread for
11.6 ms at one take and 39.5 ms a tick at sixteen (H200 traces), the GPU idle meanwhile. With graphs
attached (`attach_encoder_graphs`), a batch is padded to a bucket (prefix width to `TOKEN_BUCKET` tokens,
rows by `bucket_batch`; padded rows repeat the first one) and replayed from a CUDA graph per bucket once
the bucket recurs (`ShapeGraphs`). Padding changes no valid frame: tokens past a row's end are masked out
of every attention, the convolutions after the lookahead are causal and the positions are relative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from studio.tts.device.cuda_graphs import (
    ShapeGraphs,
    autocast_context,
    autocast_dtype,
    bucket_batch,
    capture_graph,
)
from studio.tts.device.transfer import to_device
from studio.tts.flow.masks import make_pad_mask

# batch x heads x frames x 2 frames: the up-sampled stack's relative-position scores (fp16: 128 MB at most)
SCORE_BUDGET = 64 * 1024 * 1024
TOKEN_BUCKET = 32  # graphed widths: prefixes padded to a multiple of this many tokens
ENCODER_GRAPHS_KEPT = 48  # buckets (rows x width x precision) kept captured


@dataclass
class Prefix:
    """One take's chunk: its token ids from the first prompt token on, of which the first `end` are
    encoded and the rest (at most the lookahead) are only seen by the pre-lookahead convolution."""

    ids: list[int]
    end: int


def _padded(rows: int, width: int, graphed: bool) -> tuple[int, int]:
    """(rows, width) of a batch as run: bucketed when graphed."""
    if not graphed:
        return rows, width
    return bucket_batch(rows), TOKEN_BUCKET * math.ceil(width / TOKEN_BUCKET)


def _groups(flow: nn.Module, prefixes: list[Prefix], graphed: bool = False) -> list[list[int]]:
    """Indices of `prefixes` in batches, shortest first, each within `SCORE_BUDGET` as run."""
    heads = flow.encoder.up_encoders[0].self_attn.h
    ratio = flow.encoder.up_layer.stride
    order = sorted(range(len(prefixes)), key=lambda i: prefixes[i].end)
    groups: list[list[int]] = []
    for i in order:
        group = groups[-1] + [i] if groups else [i]
        if graphed:  # the lookahead tokens are encoded too, in a bucketed width
            rows, tokens = _padded(len(group), max(len(prefixes[j].ids) for j in group), True)
        else:  # the longest end so far: the group is sorted
            rows, tokens = len(group), prefixes[i].end
        frames = ratio * tokens
        if groups and rows * heads * frames * (2 * frames) <= SCORE_BUDGET:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _rows(prefixes: list[Prefix], rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Host tensors: ids [rows, width] (zeros after each prefix) and sizes [rows, 2] (ids, end); rows past
    the prefixes repeat the first one."""
    ids = torch.zeros(rows, width, dtype=torch.long)
    sizes = torch.empty(rows, 2, dtype=torch.long)
    for row in range(rows):
        prefix = prefixes[row] if row < len(prefixes) else prefixes[0]
        ids[row, : len(prefix.ids)] = torch.tensor(prefix.ids, dtype=torch.long)
        sizes[row, 0], sizes[row, 1] = len(prefix.ids), prefix.end
    return ids, sizes


def encode_rows(flow: nn.Module, ids: torch.Tensor, sizes: torch.Tensor, longest: int) -> torch.Tensor:
    """`flow.encoder_proj` of the encoder's output [B, ratio * longest, 80] for ids [B, W] and sizes [B, 2]
    (tokens, end) on the flow's device; reads nothing back to the host (it can be captured)."""
    encoder = flow.encoder
    pre = encoder.pre_lookahead_layer
    width = ids.shape[1]
    xs, _ = encoder.embed(flow.input_embedding(ids.clamp_min(0)))
    # each row's tokens and lookahead; zeros after them, as the single-take path pads its lookahead
    xs = xs * (~make_pad_mask(sizes[:, 0], width)).unsqueeze(-1).to(xs.dtype)
    out = F.leaky_relu(pre.conv1(F.pad(xs.transpose(1, 2), (0, pre.pre_lookahead_len))))
    ends = sizes[:, 1]
    out = out[:, :, :longest] * (~make_pad_mask(ends, longest)).unsqueeze(1).to(out.dtype)
    out = pre.conv2(F.pad(out, (pre.conv2.kernel_size[0] - 1, 0)))
    xs = out.transpose(1, 2) + xs[:, :longest]
    h, _ = encoder.stacks(xs, ends, streaming=True)
    return flow.encoder_proj(h)


def _encode(flow: nn.Module, prefixes: list[Prefix], graphs: ShapeGraphs | None) -> torch.Tensor:
    """`encode_rows` of one batch of prefixes: [>= len(prefixes), ratio * >= longest end, 80]."""
    device = flow.input_embedding.weight.device
    rows, width = _padded(len(prefixes), max(len(p.ids) for p in prefixes), graphs is not None)
    ids, sizes = _rows(prefixes, rows, width)
    ids, sizes = to_device(ids, device), to_device(sizes, device)
    if graphs is None:
        return encode_rows(flow, ids, sizes, max(p.end for p in prefixes))
    weights = flow.input_embedding.weight
    dtype = autocast_dtype()
    key = (device, rows, width, weights.dtype, dtype)
    (projected,) = graphs(
        key, (weights.data_ptr(), weights.dtype), (ids, sizes), context=lambda: autocast_context(dtype)
    )
    return projected


def encode_prefixes(flow: nn.Module, prefixes: list[Prefix], starts: list[int]) -> list[torch.Tensor]:
    """Per prefix, `flow.encoder_proj` of its frames from token `starts[i]` to its end: [1, 80, n] each."""
    ratio = flow.encoder.up_layer.stride
    graphs = getattr(flow, "encoder_graphs", None)  # attached on CUDA only (`attach_encoder_graphs`)
    mus: list[torch.Tensor | None] = [None] * len(prefixes)
    for group in _groups(flow, prefixes, graphs is not None):
        projected = _encode(flow, [prefixes[i] for i in group], graphs)  # [b, frames, 80]
        for row, i in enumerate(group):
            part = projected[row : row + 1, ratio * starts[i] : ratio * prefixes[i].end]
            mus[i] = part.transpose(1, 2).contiguous()
    return mus


def attach_encoder_graphs(flow: nn.Module, enabled: bool = True, capture=capture_graph) -> None:
    """Replay `encode_prefixes` batches as CUDA graphs (a flow on CUDA; or stop, with ``enabled=False``)."""
    if not enabled:
        flow.encoder_graphs = None
        return

    def run(inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor]:
        ids, sizes = inputs
        return (encode_rows(flow, ids, sizes, ids.shape[1]),)

    flow.encoder_graphs = ShapeGraphs(
        "flow encoder",
        run,
        max_graphs=ENCODER_GRAPHS_KEPT,
        eager_first=1,
        capture=capture,
        capture_when_paid=True,
    )
