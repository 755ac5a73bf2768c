"""The flow's encoder over a window of new tokens, with the committed tokens' state cached (`Window`): the
attention keys/values of both Conformer stacks (`KVBuffer`), the projected relative-position table, and the
upsampling convolution's left context. The result equals the encoder run over the whole prefix, up to float
rounding (streaming attention is chunk-causal, so committed positions never change)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from studio.tts.flow.encoder import UpsampleConformerEncoder


class KVBuffer:
    """Growing key/value storage [B, H, capacity, d]; rows [0, length) belong to committed positions.

    Writing in place into spare capacity avoids concatenating the whole cache on every chunk. A `shared`
    buffer (tensors owned by the prompt cache) is copied on its first write, never written in place.
    """

    def __init__(self, k: torch.Tensor | None = None, v: torch.Tensor | None = None, shared: bool = False):
        self.k, self.v = k, v
        self.length = 0 if k is None else k.shape[2]
        self.shared = shared

    def extend(self, k: torch.Tensor, v: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v [B, H, n, d] at rows [start, start + n); return views of rows [0, start + n)."""
        end = start + k.shape[2]
        if self.k is None or self.shared or self.k.shape[2] < end or self.k.dtype != k.dtype:
            self.shared = False
            previous = 0 if self.k is None else self.k.shape[2]
            capacity = max(end, previous + previous // 2, 64)  # x1.5: amortised copies, at most 1/3 spare
            grown_k = k.new_empty(*k.shape[:2], capacity, k.shape[3])
            grown_v = v.new_empty(*v.shape[:2], capacity, v.shape[3])
            if self.k is not None and start > 0:
                grown_k[:, :, :start] = self.k[:, :, :start]
                grown_v[:, :, :start] = self.v[:, :, :start]
            self.k, self.v = grown_k, grown_v
        self.k[:, :, start:end] = k
        self.v[:, :, start:end] = v
        return self.k[:, :, :end], self.v[:, :, :end]


class Window:
    """The positions one call computes: [start, end) of a sequence whose first `commit` stay cached.

    With a `mark` (start <= mark <= end) the causal tails at the mark are also kept, under
    ``("mark", owner)``: with the K/V rows before it they are the state after the mark (prompt cache).
    """

    def __init__(self, start: int, end: int, commit: int, store: dict, mark: int | None = None):
        self.start, self.end, self.commit, self.store, self.mark = start, end, commit, store, mark

    def visible(self, chunk: int, device: torch.device) -> torch.Tensor:
        """Bool [end - start, end]: query i sees keys up to the end of its chunk (absolute positions)."""
        rows = torch.arange(self.start, self.end, device=device)
        chunk_end = (torch.div(rows, chunk, rounding_mode="trunc") + 1) * chunk
        return torch.arange(self.end, device=device).unsqueeze(0) < chunk_end.unsqueeze(1)

    def kv(self, owner: nn.Module) -> KVBuffer:
        buffer = self.store.get(owner)
        if buffer is None:
            buffer = self.store[owner] = KVBuffer()
        return buffer

    def causal(self, x: torch.Tensor, owner: nn.Module, left: int, scale: int = 1) -> torch.Tensor:
        """Prepend the cached `left` frames before x [B, C, n*scale] and keep those before `commit` for later."""
        tail = self.store.get(owner)
        if tail is None or tail.dtype != x.dtype:
            tail = x.new_zeros(x.shape[0], x.shape[1], left)  # the zero padding before position 0
        full = torch.cat([tail, x], dim=2)
        keep = (self.commit - self.start) * scale
        self.store[owner] = full[:, :, keep : keep + left].clone()  # a copy: a view would pin all of `full`
        if self.mark is not None:
            at = (self.mark - self.start) * scale
            self.store[("mark", owner)] = full[:, :, at : at + left].clone()
        return full


def finish_kv(window: Window, buffer: KVBuffer) -> None:
    buffer.length = window.commit


# -- the encoder over a window ---------------------------------------------------------------------------------------------
def _positions(w: Window, attn: nn.Module, pos_enc: nn.Module, q: torch.Tensor) -> torch.Tensor:
    """linear_pos of relative positions end-1 .. start-end+1 as [1, H, 2*end-1-start, d], cached per layer.

    The projected table covers positions +-(capacity-1) and grows by doubling, so each call slices it
    instead of projecting O(prefix) rows again; the rows equal the full path's (same table, same layer).
    """
    key = ("positions", attn)
    table = w.store.get(key)
    if table is None or table.shape[2] < 2 * w.end - 1 or table.dtype != q.dtype:
        capacity = max(w.end, 0 if table is None else table.shape[2] + 1, 128)
        pos_emb = pos_enc.position_encoding(capacity, 0, q)  # positions capacity-1 .. -(capacity-1)
        table = attn.linear_pos(pos_emb).view(1, -1, attn.h, attn.d_k).transpose(1, 2).to(q.dtype)
        w.store[key] = table
    first = table.shape[2] // 2 - (w.end - 1)  # the row of position end-1
    return table[:, :, first : first + 2 * w.end - 1 - w.start]


def _rel_layer(layer: nn.Module, x: torch.Tensor, pos_enc: nn.Module, visible: torch.Tensor, w: Window):
    """One Conformer layer for the window's queries over cached + new keys, with exact relative positions."""
    attn = layer.self_attn
    h = layer.norm_mha(x)
    b, n, _ = h.shape
    q = attn.linear_q(h).view(b, n, attn.h, attn.d_k)
    k = attn.linear_k(h).view(b, n, attn.h, attn.d_k).transpose(1, 2)
    v = attn.linear_v(h).view(b, n, attn.h, attn.d_k).transpose(1, 2)
    buffer = w.kv(attn)
    k_all, v_all = buffer.extend(k, v, w.start)
    end, start = w.end, w.start
    # Relative positions end-1 .. start-end+1 (the full path's pos_emb minus columns no query here needs):
    # query i against key j needs position i - j, i.e. column (end - 1 - i + j), which is what
    # rel_shift picks out of the full square.
    p = _positions(w, attn, pos_enc, q)
    width = p.shape[2]
    q_u = (q + attn.pos_bias_u).transpose(1, 2)
    q_v = (q + attn.pos_bias_v).transpose(1, 2)
    scores = torch.matmul(q_v, p.transpose(-2, -1)).contiguous()  # [b, H, n, width]
    hs = scores.shape[1]
    matrix_bd = scores.as_strided(
        (b, hs, n, end), (hs * n * width, n * width, width - 1, 1), scores.storage_offset() + end - 1 - start
    )
    bias = (matrix_bd / math.sqrt(attn.d_k)).masked_fill(~visible, float("-inf"))
    out = F.scaled_dot_product_attention(q_u, k_all, v_all, attn_mask=bias)
    x = x + attn.linear_out(out.transpose(1, 2).reshape(b, n, attn.h * attn.d_k))
    finish_kv(w, buffer)
    return x + layer.feed_forward(layer.norm_ff(x))


def encode_window(
    encoder: UpsampleConformerEncoder,
    emb: torch.Tensor,
    lo: int,
    context: torch.Tensor | None,
    first: Window,
    second: Window,
) -> torch.Tensor:
    """Encoder output [1, 2n, D] for tokens [first.start, first.end) given embeddings of tokens [lo, end)."""
    start = first.start
    embed = encoder.embed
    xs = embed.out(emb) * embed.pos_enc.xscale  # tokens [lo, end)
    pre = encoder.pre_lookahead_layer
    out = xs.transpose(1, 2)
    known = 0 if context is None else context.size(1)
    if known:
        out = torch.cat([out, (embed.out(context) * embed.pos_enc.xscale).transpose(1, 2)], dim=2)
    out = F.leaky_relu(pre.conv1(F.pad(out, (0, pre.pre_lookahead_len - known))))
    left = pre.conv2.kernel_size[0] - 1
    out = pre.conv2(F.pad(out, (left - (start - lo), 0)))  # zeros only before token 0, as the full path
    xs = out.transpose(1, 2) + xs[:, start - lo :]

    visible = first.visible(encoder.static_chunk_size, xs.device)
    for layer in encoder.encoders:
        xs = _rel_layer(layer, xs, embed.pos_enc, visible, first)

    up = encoder.up_layer
    upsampled = F.interpolate(xs.transpose(1, 2), scale_factor=float(up.stride), mode="nearest")
    xs = up.conv(first.causal(upsampled, up, up.stride * 2, scale=up.stride)).transpose(1, 2)

    embed = encoder.up_embed
    xs = embed.out(xs) * embed.pos_enc.xscale
    visible = second.visible(encoder.static_chunk_size * up.stride, xs.device)
    for layer in encoder.up_encoders:
        xs = _rel_layer(layer, xs, embed.pos_enc, visible, second)
    return encoder.after_norm(xs)
