"""The Euler solve of CosyVoice3's streamed flow over the new frames of one or several takes at once.

A take's call (`FramePlan`) brings the frames it computes (its noise, conditions, rotary angles and chunk
mask) and its state (`DiTStreamState`: the kept keys and values it attends to). `solve_plans` runs every
plan's frames through each Euler step and DiT block together: the projections, modulated norms and
feed-forwards see all plans' frames as one sequence (larger matrix products, one kernel launch per layer
instead of one per take), the position convolutions run per plan over its own left frames, and attention
runs per plan against its own keys and values, one SDPA call each. Attention stays per plan because each
take's keys live in its own buffers: one call over all of them would first gather every kept key of every
take at each block and step, a copy as large as the attention's own reads. All plans share the flow and
the Euler schedule (the same steps, so the same time modulations); the modulation rows are taken from the
first plan's state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from studio.tts.cosyvoice3.dit import DiT, DiTBlock

CFG_ROWS = 2  # the conditional row, then the unconditional one (no tokens, prompt or speaker)


@dataclass
class DiTStreamState:
    """One take's streamed-flow state (all on the flow's device, in its dtype)."""

    #: [steps, blocks, CFG rows, heads, capacity, dim_head]: rotated keys, and values, of frames
    #: 0..`kept` (final) and of the frames after them that the last call computed (recomputed next call)
    keys: torch.Tensor
    values: torch.Tensor
    #: [steps, 2, CFG rows, dim, kernel - 1]: the inputs of the position embedding's two convolutions
    #: over the frames just before `kept` (zeros before frame 0)
    position_left: torch.Tensor
    #: [steps, blocks, 6, 1, dim]: each block's AdaLN modulation of each step's time
    block_modulation: torch.Tensor
    #: [steps, 2, 1, dim]: the output norm's modulation of each step's time
    final_modulation: torch.Tensor
    #: [steps]: each Euler step's time increment, as the CFM computes it
    step_sizes: torch.Tensor
    #: [CFG rows, 1, 80]: the projected speaker vector, zeros for the unconditional row
    speaker: torch.Tensor
    kept: int = 0  # frames whose chunks are complete: their keys and values are final
    returned: int = 0  # frames (prompt included) up to which mel has been returned
    tokens: int = 0  # speech tokens of the take seen so far

    @property
    def nbytes(self) -> int:
        tensors = (
            self.keys,
            self.values,
            self.position_left,
            self.block_modulation,
            self.final_modulation,
            self.step_sizes,
            self.speaker,
        )
        return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


@dataclass
class FramePlan:
    """Frames start..frames of one take to solve; afterwards its chunks before `kept` are final."""

    state: DiTStreamState
    start: int  # a chunk boundary: the first frame whose keys and values are not final
    frames: int
    kept: int
    x: torch.Tensor  # [1, F, 80]: the starting noise of the frames
    conditions: torch.Tensor  # [CFG rows, F, 240]: prompt mel, token features, speaker
    angles: torch.Tensor  # [F, dim_head]: rotary angles of the frames' positions
    mask: torch.Tensor | None  # [F, frames] bool: the chunk mask's rows (None: every key visible)

    @property
    def count(self) -> int:
        return self.frames - self.start


def _join(tensors: Sequence[torch.Tensor], dim: int) -> torch.Tensor:
    """torch.cat, without the copy when there is one tensor."""
    return tensors[0] if len(tensors) == 1 else torch.cat(list(tensors), dim=dim)


def solve_plans(estimator: DiT, plans: Sequence[FramePlan], cfg_rate: float) -> list[torch.Tensor]:
    """Run every plan's frames through the Euler solve -> each plan's frames [1, 80, F] in the flow's
    dtype; writes each plan's keys, values and position-convolution context into its state and sets its
    `kept`."""
    if not plans:
        return []
    bounds, offset = [], 0
    for plan in plans:
        bounds.append((offset, offset + plan.count))
        offset += plan.count
    x = _join([plan.x for plan in plans], dim=1)
    conditions = _join([plan.conditions for plan in plans], dim=1)
    angles = _join([plan.angles for plan in plans], dim=0)
    step_sizes = plans[0].state.step_sizes
    for step in range(step_sizes.shape[0]):
        velocity = _velocity(estimator, plans, bounds, step, x, conditions, angles)
        x = x + step_sizes[step] * ((1.0 + cfg_rate) * velocity[:1] - cfg_rate * velocity[1:])
    for plan in plans:
        plan.state.kept = plan.kept
    return [x[:, begin:end].transpose(1, 2) for begin, end in bounds]


def _velocity(
    estimator: DiT,
    plans: Sequence[FramePlan],
    bounds: list[tuple[int, int]],
    step: int,
    x: torch.Tensor,
    conditions: torch.Tensor,
    angles: torch.Tensor,
) -> torch.Tensor:
    """The DiT over every plan's frames for both CFG rows at one Euler step -> velocity [2, S, 80]."""
    projected = estimator.input_embed.proj(torch.cat([x.expand(CFG_ROWS, -1, -1), conditions], dim=2))
    convolutions = estimator.input_embed.conv_pos_embed
    positions = []
    for plan, (begin, end) in zip(plans, bounds, strict=True):
        left = plan.state.position_left[step]
        embedded, inputs = convolutions.continued(projected[:, begin:end], (left[0], left[1]))
        if plan.kept > plan.start:  # the convolutions' inputs just before the new kept boundary
            width, offset = left.shape[-1], plan.kept - plan.start
            for index, conv_input in enumerate(inputs):
                left[index] = conv_input[:, :, offset : offset + width]
        positions.append(embedded)
    h = _join(positions, dim=1) + projected
    first = plans[0].state
    for index, block in enumerate(estimator.transformer_blocks):

        def attention(normed: torch.Tensor, block: DiTBlock = block, index: int = index) -> torch.Tensor:
            return _attention(block, plans, bounds, step, index, angles, normed)

        h = block.run(h, tuple(first.block_modulation[step, index]), attention)
    return estimator.proj_out(estimator.norm_out.modulate(h, tuple(first.final_modulation[step])))


def _attention(
    block: DiTBlock,
    plans: Sequence[FramePlan],
    bounds: list[tuple[int, int]],
    step: int,
    index: int,
    angles: torch.Tensor,
    normed: torch.Tensor,
) -> torch.Tensor:
    """Each plan's frames attend over every frame of its take before its `frames`: their keys and values
    are written into the take's buffers ([rows, heads, capacity, dim_head]) and read from there."""
    query, key, value = block.attn.project(normed, angles)
    attended = []
    for plan, (begin, end) in zip(plans, bounds, strict=True):
        keys, values = plan.state.keys[step, index], plan.state.values[step, index]
        keys[:, :, plan.start : plan.frames] = key[:, :, begin:end]
        values[:, :, plan.start : plan.frames] = value[:, :, begin:end]
        attended.append(
            F.scaled_dot_product_attention(
                query[:, :, begin:end],
                keys[:, :, : plan.frames],
                values[:, :, : plan.frames],
                attn_mask=plan.mask,
            )
        )
    return block.attn.merge_heads(_join(attended, dim=2))
