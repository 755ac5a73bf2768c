"""CosyVoice3's streamed-flow solve with static shapes over a work arena: what `DiTGraphSolver` runs and
captures (flow_graphs.py).

A padded batch of takes' calls (2 CFG rows each) solves every Euler step over the arena's keys and values: each
row writes its new frames' keys and values at its own absolute frames and attends through its own additive
bias (its chunk mask, nothing at or after its last real frame); its position convolutions continue from its
left inputs in the arena, which it replaces with the inputs before its new kept boundary. The result equals
`solve_plans` for every real frame (the convolutions are causal; the norms and feed-forward work per frame).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from studio.tts.cosyvoice3.dit import DiT, DiTAttention
from studio.tts.cosyvoice3.flow_solve import CFG_ROWS
from studio.tts.flow.masks import mask_to_bias


@dataclass
class DiTSolveInputs:
    """A padded batch of R takes' calls (2R CFG rows, F frames, `cap` context frames); all tensors, so a
    captured graph reads them by address."""

    x: torch.Tensor  # [R, F, 80]: each take's starting noise (zeros past its frames)
    conditions: torch.Tensor  # [2R, F, 240]: prompt mel, token features and speaker per CFG row
    angles: torch.Tensor  # [2R, F, dim_head]: rotary angles of each row's frames
    write: torch.Tensor  # [2R, F] int64: each query's absolute frame (where its key and value go)
    limit: torch.Tensor  # [2R, F] int64: each query sees the keys before this frame
    left_columns: torch.Tensor  # [2R, kernel - 1] int64: the convolution inputs kept as the next left
    context: torch.Tensor  # [cap] int64: the arena view's frames 0..cap-1 (its length is the view's context)
    block_modulation: torch.Tensor  # [steps, blocks, 6, 1, dim]
    final_modulation: torch.Tensor  # [steps, 2, 1, dim]
    step_sizes: torch.Tensor  # [steps]


@dataclass
class DiTArena:
    kv: torch.Tensor  # [steps, blocks, 2 (keys, values), 2R, heads, cap, dim_head]
    left: torch.Tensor  # [steps, 2 convolutions, 2R, dim, kernel - 1]


def solve_static(estimator: DiT, cfg_rate: float, arena: DiTArena, io: DiTSolveInputs) -> torch.Tensor:
    """Every Euler step of the batch's rows -> x [R, F, 80]; writes each row's keys, values and position
    convolutions' left inputs into the arena (what `solve_plans` writes into the takes' states)."""
    x = io.x
    visible = io.context < io.limit[:, None, :, None]  # [2R, 1, F, cap]
    bias = mask_to_bias(visible, arena.kv.dtype)
    for step in range(io.step_sizes.shape[0]):
        velocity = _velocity(estimator, arena, io, bias, step, x).unflatten(0, (-1, CFG_ROWS))
        x = x + io.step_sizes[step] * ((1.0 + cfg_rate) * velocity[:, 0] - cfg_rate * velocity[:, 1])
    return x


def _velocity(estimator: DiT, arena: DiTArena, io: DiTSolveInputs, bias, step: int, x) -> torch.Tensor:
    """The DiT over every row at one Euler step -> velocity [2R, F, 80] (conditional, unconditional)."""
    embed = estimator.input_embed
    projected = embed.proj(torch.cat([x.repeat_interleave(CFG_ROWS, dim=0), io.conditions], dim=2))
    left = arena.left[step]
    positions, inputs = embed.conv_pos_embed.continued(projected, (left[0], left[1]))
    for index, conv_input in enumerate(inputs):  # the inputs just before each row's new kept boundary
        where = io.left_columns[:, None, :].expand(-1, conv_input.shape[1], -1)
        left[index] = conv_input.gather(2, where)
    h = positions + projected
    kv = arena.kv[step]
    for index, block in enumerate(estimator.transformer_blocks):

        def attention(normed: torch.Tensor, attn: DiTAttention = block.attn, cache=kv[index]) -> torch.Tensor:
            return _attend(attn, cache, io, bias, normed)

        h = block.run(h, tuple(io.block_modulation[step, index]), attention)
    return estimator.proj_out(estimator.norm_out.modulate(h, tuple(io.final_modulation[step])))


def _attend(attn: DiTAttention, cache: torch.Tensor, io: DiTSolveInputs, bias, normed) -> torch.Tensor:
    """Write the rows' keys and values at their frames in `cache` ([2, 2R, heads, cap, dim_head]), then
    attend over it through the bias."""
    query, key, value = attn.project(normed, io.angles)
    where = io.write[None, :, None, :, None].expand(2, -1, attn.heads, -1, attn.dim_head)
    cache.scatter_(3, where, torch.stack([key, value]).to(cache.dtype))
    keys, values = cache[0].to(query.dtype), cache[1].to(query.dtype)  # no copy when the dtypes agree
    bias = bias if bias.dtype == query.dtype else bias.to(query.dtype)  # autocast: the compute dtype
    return attn.merge_heads(F.scaled_dot_product_attention(query, keys, values, attn_mask=bias))
