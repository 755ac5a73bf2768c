"""Padding and chunk masks shared by the flow encoder and the estimator (upstream's mask semantics)."""

from __future__ import annotations

import torch


def make_pad_mask(lengths: torch.Tensor, max_len: int = 0) -> torch.Tensor:
    """Bool mask [B, max_len] that is True on padded positions (at or beyond each length)."""
    max_len = max_len if max_len > 0 else int(lengths.max().item())
    positions = torch.arange(max_len, dtype=torch.int64, device=lengths.device)
    return positions.unsqueeze(0) >= lengths.unsqueeze(-1)


def chunk_mask(size: int, chunk_size: int, device: torch.device) -> torch.Tensor:
    """Bool mask [size, size]: position i sees every position up to the end of its own chunk."""
    positions = torch.arange(size, device=device)
    chunk_end = (torch.div(positions, chunk_size, rounding_mode="trunc") + 1) * chunk_size
    return positions.unsqueeze(0) < chunk_end.unsqueeze(1)


def attention_mask(pad_masks: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """Combine a [B, 1, T] validity mask with a static chunk mask (chunk_size > 0) into [B, 1|T, T].

    Rows that would see nothing are opened fully, as upstream does, so softmax never sees an empty row.
    """
    masks = pad_masks
    if chunk_size > 0:
        masks = pad_masks & chunk_mask(pad_masks.size(-1), chunk_size, pad_masks.device).unsqueeze(0)
    empty_rows = ~masks.any(dim=-1, keepdim=True)
    return masks | empty_rows


def mask_to_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive attention bias: 0 where visible, -1e10 where masked (upstream's constant)."""
    return (1.0 - mask.to(dtype)) * -1.0e10
