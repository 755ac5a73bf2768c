"""Conformer pieces of the flow encoder: ESPnet relative positions, relative-position attention, linear embed.

State-dict names follow upstream (`linear_q`, `pos_bias_u`, `out.0`, ...). Dropout is left out: these
modules are for inference only and behave the same in train and eval mode.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class RelPositionEncoding(nn.Module):
    """ESPnet-style relative positional encoding: scales the input and returns [1, 2T-1, D] positions."""

    def __init__(self, d_model: int, max_len: int = 5000):
        super().__init__()
        self.d_model = d_model
        self.xscale = math.sqrt(d_model)
        self._max_len = max_len
        # float32 master table [1, 2*max_len-1, D] (relative position +max..-max) and per-device copies
        self._master = self._build_table(max_len)
        self._copies: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}

    def _build_table(self, max_len: int) -> torch.Tensor:
        position = torch.arange(0, max_len, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(
            torch.arange(0, self.d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / self.d_model)
        )
        positive = torch.zeros(max_len, self.d_model)
        negative = torch.zeros(max_len, self.d_model)
        positive[:, 0::2] = torch.sin(position * div_term)
        positive[:, 1::2] = torch.cos(position * div_term)
        negative[:, 0::2] = torch.sin(-1 * position * div_term)
        negative[:, 1::2] = torch.cos(-1 * position * div_term)
        return torch.cat([torch.flip(positive, [0]), negative[1:]], dim=0).unsqueeze(0)

    def position_encoding(self, size: int, offset: int, like: torch.Tensor) -> torch.Tensor:
        needed = size + offset
        if self._master.size(1) < 2 * needed - 1:
            self._master = self._build_table(needed)
            self._copies = {}
        key = (like.device, like.dtype)
        table = self._copies.get(key)
        if table is None or table.size(1) != self._master.size(1):
            table = self._copies[key] = self._master.to(device=like.device, dtype=like.dtype)
        center = table.size(1) // 2
        return table[:, center - needed + 1 : center + needed]

    def forward(self, x: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        return x * self.xscale, self.position_encoding(x.size(1), offset, x)


class LinearEmbed(nn.Module):
    """Linear + LayerNorm input layer followed by the relative positional encoding (upstream 'linear')."""

    def __init__(self, idim: int, odim: int):
        super().__init__()
        self.out = nn.Sequential(nn.Linear(idim, odim), nn.LayerNorm(odim, eps=1e-5))
        self.pos_enc = RelPositionEncoding(odim)

    def forward(self, x: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pos_enc(self.out(x), offset)


class RelPositionMultiHeadedAttention(nn.Module):
    """Multi-head self-attention with Transformer-XL relative positions (pos_bias_u/v, rel_shift)."""

    def __init__(self, n_head: int, n_feat: int, key_bias: bool = True):
        super().__init__()
        if n_feat % n_head:
            raise ValueError(f"attention width {n_feat} is not divisible by {n_head} heads")
        self.d_k = n_feat // n_head
        self.h = n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat, bias=key_bias)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)
        self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(self.h, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.empty(self.h, self.d_k))
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    @staticmethod
    def rel_shift(x: torch.Tensor) -> torch.Tensor:
        """Turn scores against relative positions [B, H, T, 2T-1] into scores against keys [B, H, T, T]."""
        b, h, t1, t2 = x.shape
        padded = F.pad(x, (1, 0)).view(b, h, t2 + 1, t1)
        return padded[:, :, 1:].reshape(b, h, t1, t2)[:, :, :, : t2 // 2 + 1]

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor) -> torch.Tensor:
        """x [B, T, D]; mask bool [B, 1|T, T] (True = visible); pos_emb [1, 2T-1, D]."""
        b, t, _ = x.shape
        q = self.linear_q(x).view(b, t, self.h, self.d_k)
        k = self.linear_k(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        p = self.linear_pos(pos_emb).view(pos_emb.size(0), -1, self.h, self.d_k).transpose(1, 2)
        q_u = (q + self.pos_bias_u).transpose(1, 2)
        q_v = (q + self.pos_bias_v).transpose(1, 2)
        matrix_bd = torch.matmul(q_v, p.transpose(-2, -1))
        if matrix_bd.size(-1) != t:
            matrix_bd = self.rel_shift(matrix_bd)
        bias = (matrix_bd / math.sqrt(self.d_k)).masked_fill(~mask.unsqueeze(1), float("-inf"))
        out = F.scaled_dot_product_attention(q_u, k, v, attn_mask=bias)
        return self.linear_out(out.transpose(1, 2).reshape(b, t, self.h * self.d_k))
