"""CosyVoice3's flow-matching estimator: a diffusion transformer (DiT) over mel frames (plain torch).

Reproduces upstream `cosyvoice/flow/DiT/dit.py` (F5-TTS's DiT with a causal convolutional position
embedding) at inference: sinusoidal time embedding, input projection of (x, cond, mu, speaker), rotary
self-attention in AdaLN-zero blocks, final AdaLN and projection to 80 mels. Submodule names follow
upstream so `flow.pt`'s `decoder.estimator.*` keys load strictly. Dropout is left out (inference only);
where upstream keeps a dropout inside a `Sequential`, an `Identity` holds its index so keys still match.

Streaming (`forward(..., streaming=True)`) masks attention in static chunks of `static_chunk_size` frames
counted from frame 0 (`chunked_attention_mask`); with the causal position embedding, a frame then depends
on no frame after the end of its own chunk. The pieces are exposed (`CausalConvPositionEmbedding.continued`,
`DiTAttention.project` / `attend`, `DiTBlock.run`, the norms' `modulation`) so the incremental flow stream
(cosyvoice3/flow_stream.py) can compute new frames against cached keys and values.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from studio.tts.flow.estimator import sinusoidal_embedding

TIME_FREQUENCY_DIM = 256
TIME_SCALE = 1000.0
ROTARY_BASE = 10000.0
POSITION_KERNEL = 31
POSITION_GROUPS = 16
NORM_EPS = 1e-6
#: upstream's DiT builds its streaming mask with every left chunk visible, whatever the yaml's
#: `num_decoding_left_chunks` says (the value is kept on the module but unused, as upstream's is)
STREAMING_LEFT_CHUNKS = -1


def static_chunk_mask(
    frames: int,
    chunk_size: int,
    left_chunks: int = -1,
    device: torch.device | None = None,
    first_row: int = 0,
) -> torch.Tensor:
    """Bool [frames - first_row, frames], True where query frame i (rows first_row..frames-1) may attend to
    key frame j (upstream's `subsequent_chunk_mask`): j lies in i's chunk or in one of the `left_chunks`
    chunks before it (every chunk before it when `left_chunks` < 0). Chunks are `chunk_size` frames
    counted from frame 0."""
    if chunk_size < 1:
        raise ValueError(f"a chunk mask needs a chunk size of at least 1 frame, got {chunk_size}")
    keys = torch.arange(frames, device=device)
    chunk = torch.div(keys[first_row:], chunk_size, rounding_mode="floor")
    end = (chunk + 1) * chunk_size
    visible = keys.unsqueeze(0) < end.unsqueeze(1)
    if left_chunks >= 0:
        start = (chunk - left_chunks).clamp(min=0) * chunk_size
        visible &= keys.unsqueeze(0) >= start.unsqueeze(1)
    return visible


def chunked_attention_mask(valid: torch.Tensor, chunk_size: int, left_chunks: int = -1) -> torch.Tensor:
    """valid [B, T] bool (True = a real frame) -> attention mask [B, T, T] (upstream's
    `add_optional_chunk_mask` with a static chunk): key j visible to query i when j is valid and in i's
    window (`static_chunk_mask`); a query row that would see nothing is opened fully, as upstream does.
    A chunk size below 1 gives the offline mask (every valid key), repeated per query."""
    frames = valid.size(1)
    if chunk_size > 0:
        mask = valid.unsqueeze(1) & static_chunk_mask(frames, chunk_size, left_chunks, valid.device)
    else:
        mask = valid.unsqueeze(1).expand(-1, frames, -1)
    return mask | ~mask.any(dim=-1, keepdim=True)


class TimestepEmbedding(nn.Module):
    """Flow time t [B] -> [B, dim]: sinusoids of 1000 t (sin half, then cos half), then Linear-SiLU-Linear."""

    def __init__(self, dim: int, frequency_dim: int = TIME_FREQUENCY_DIM):
        super().__init__()
        if frequency_dim % 2 or frequency_dim < 4:
            raise ValueError(
                f"the time embedding needs an even frequency dimension >= 4, got {frequency_dim}"
            )
        self.frequency_dim = frequency_dim
        self.time_mlp = nn.Sequential(nn.Linear(frequency_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        sinusoids = sinusoidal_embedding(t.float(), self.frequency_dim, scale=TIME_SCALE).to(t.dtype)
        return self.time_mlp(sinusoids)


class CausalConvPositionEmbedding(nn.Module):
    """Two grouped convolutions padded on the left only, each followed by Mish (keys `conv1.0`, `conv2.0`)."""

    def __init__(self, dim: int, kernel_size: int = POSITION_KERNEL, groups: int = POSITION_GROUPS):
        super().__init__()
        if kernel_size % 2 == 0:
            raise ValueError(f"the position embedding's kernel size must be odd, got {kernel_size}")
        if dim % groups:
            raise ValueError(
                f"the DiT width {dim} must be a multiple of the position embedding's {groups} groups"
            )
        self.kernel_size = kernel_size
        self.conv1 = nn.Sequential(nn.Conv1d(dim, dim, kernel_size, groups=groups), nn.Mish())
        self.conv2 = nn.Sequential(nn.Conv1d(dim, dim, kernel_size, groups=groups), nn.Mish())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, dim] -> [B, T, dim]."""
        x = x.transpose(1, 2)
        x = self.conv1(F.pad(x, (self.kernel_size - 1, 0)))
        x = self.conv2(F.pad(x, (self.kernel_size - 1, 0)))
        return x.transpose(1, 2)

    def continued(
        self, x: torch.Tensor, left: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Frames that follow earlier ones: x [B, T, dim]; `left` holds each convolution's input over the
        `kernel_size - 1` frames before x ([B, dim, K-1] each; zeros before frame 0). Returns the embedding
        [B, T, dim] and each convolution's input over those left frames and x ([B, dim, K-1+T] each): the
        next call's `left` is a window of them."""
        conv1_input = torch.cat([left[0], x.transpose(1, 2)], dim=2)
        conv2_input = torch.cat([left[1], self.conv1(conv1_input)], dim=2)
        return self.conv2(conv2_input).transpose(1, 2), (conv1_input, conv2_input)


class InputEmbedding(nn.Module):
    """Concatenate noisy mel x, prompt mel cond, token features mu and the speaker vector; project; add positions."""

    def __init__(self, mel_dim: int, mu_dim: int, dim: int, spk_dim: int):
        super().__init__()
        self.proj = nn.Linear(mel_dim * 2 + mu_dim + spk_dim, dim)
        self.conv_pos_embed = CausalConvPositionEmbedding(dim)

    def forward(
        self, x: torch.Tensor, cond: torch.Tensor, mu: torch.Tensor, spks: torch.Tensor
    ) -> torch.Tensor:
        """x, cond, mu [B, T, C]; spks [B, spk_dim] -> [B, T, dim]."""
        speaker = spks.unsqueeze(1).expand(-1, x.size(1), -1)
        x = self.proj(torch.cat([x, cond, mu, speaker], dim=-1))
        return self.conv_pos_embed(x) + x


class RotaryEmbedding(nn.Module):
    """Rotary angles for positions 0..T-1, each frequency repeated for an interleaved pair (x-transformers')."""

    def __init__(self, dim: int, base: float = ROTARY_BASE):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq)  # persistent: upstream's flow.pt holds it

    def forward(self, frames: int, start: int = 0) -> torch.Tensor:
        """-> angles [frames - start, dim] for positions start..frames-1: (f0, f0, f1, f1, ...) times it."""
        positions = torch.arange(start, frames, device=self.inv_freq.device, dtype=self.inv_freq.dtype)
        angles = positions.unsqueeze(1) * self.inv_freq.unsqueeze(0)
        return angles.repeat_interleave(2, dim=-1)


def apply_rotary(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs of the first `angles.size(-1)` channels of x [B, T, C]; the rest pass through.

    Upstream applies the rotation before splitting heads, with angles one head wide, so only the first
    head's channels turn; the others carry no position (that is the trained model's behaviour).
    """
    width = angles.size(-1)
    rotated, untouched = x[..., :width], x[..., width:]
    pairs = rotated.unflatten(-1, (-1, 2))
    half_turn = torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(-2)
    rotated = rotated * angles.cos() + half_turn * angles.sin()
    return torch.cat([rotated, untouched], dim=-1).to(x.dtype)


class DiTAttention(nn.Module):
    """Multi-head self-attention with rotary positions; keys may be masked, masked query rows give zeros."""

    def __init__(self, dim: int, heads: int, dim_head: int):
        super().__init__()
        self.heads = heads
        self.dim_head = dim_head
        inner = heads * dim_head
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        self.to_out = nn.Sequential(nn.Linear(inner, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
        """x [B, T, dim]; angles [T, dim_head]; mask [B, T] bool (True = valid frame: invalid keys are
        ignored, invalid frames give zeros), or [B, T, T] (query x key, `chunked_attention_mask`: upstream
        then zeroes the output of every frame its last query row cannot see, its `mask[:, 0, -1]`; with
        every left chunk visible those are the invalid frames) -> [B, T, dim]."""
        query, key, value = self.project(x, angles)
        if mask.dim() == 2:
            return self.attend(query, key, value, mask[:, None, None, :], keep=mask)
        return self.attend(query, key, value, mask[:, None], keep=mask[:, -1])

    def project(self, x: torch.Tensor, angles: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x [B, T, dim] -> rotated query, rotated key, value, each [B, heads, T, dim_head]."""
        batch, frames, _ = x.shape
        query = apply_rotary(self.to_q(x), angles)
        key = apply_rotary(self.to_k(x), angles)
        value = self.to_v(x)
        return tuple(
            tensor.view(batch, frames, self.heads, self.dim_head).transpose(1, 2)
            for tensor in (query, key, value)
        )

    def attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Queries [B, H, Tq, d] over keys and values [B, H, Tk, d] -> [B, Tq, dim]. attn_mask: bool,
        broadcastable to [B, H, Tq, Tk] (None: all visible); keep [B, Tq] bool: frames whose output is
        kept (the rest give zeros; None: all kept)."""
        out = self.merge_heads(F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask))
        return out if keep is None else out.masked_fill(~keep.unsqueeze(-1), 0.0)

    def merge_heads(self, attended: torch.Tensor) -> torch.Tensor:
        """Attention outputs [B, H, T, d] -> the output projection of their heads side by side [B, T, dim]."""
        batch, _, frames, _ = attended.shape
        return self.to_out(attended.transpose(1, 2).reshape(batch, frames, self.heads * self.dim_head))


class AdaLayerNormZero(nn.Module):
    """LayerNorm modulated by the time embedding; also returns the gates and the feed-forward modulation."""

    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(dim, 6 * dim)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=NORM_EPS)

    def modulation(self, time: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """time [B, dim] -> (shift, scale, gate, shift_ff, scale_ff, gate_ff), each [B, dim]."""
        return self.linear(F.silu(time)).chunk(6, dim=1)

    def forward(self, x: torch.Tensor, time: torch.Tensor) -> tuple[torch.Tensor, ...]:
        shift, scale, gate, shift_ff, scale_ff, gate_ff = self.modulation(time)
        return self.norm(x) * (1 + scale[:, None]) + shift[:, None], gate, shift_ff, scale_ff, gate_ff


class AdaLayerNormZeroFinal(nn.Module):
    """The output LayerNorm, modulated by the time embedding (scale first, then shift, as upstream)."""

    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(dim, 2 * dim)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=NORM_EPS)

    def modulation(self, time: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """time [B, dim] -> (scale, shift), each [B, dim]."""
        return self.linear(F.silu(time)).chunk(2, dim=1)

    def modulate(self, x: torch.Tensor, modulation: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        scale, shift = modulation
        return self.norm(x) * (1 + scale[:, None]) + shift[:, None]

    def forward(self, x: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        return self.modulate(x, self.modulation(time))


class FeedForward(nn.Module):
    """Linear -> tanh-GELU -> Linear (keys `ff.0.0`, `ff.2`)."""

    def __init__(self, dim: int, mult: float):
        super().__init__()
        inner = int(dim * mult)
        self.ff = nn.Sequential(
            nn.Sequential(nn.Linear(dim, inner), nn.GELU(approximate="tanh")),
            nn.Identity(),
            nn.Linear(inner, dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ff(x)


class DiTBlock(nn.Module):
    """AdaLN-zero transformer block: gated attention and gated feed-forward, each on a modulated norm."""

    def __init__(self, dim: int, heads: int, dim_head: int, ff_mult: float):
        super().__init__()
        self.attn_norm = AdaLayerNormZero(dim)
        self.attn = DiTAttention(dim, heads, dim_head)
        self.ff_norm = nn.LayerNorm(dim, elementwise_affine=False, eps=NORM_EPS)
        self.ff = FeedForward(dim, ff_mult)

    def forward(
        self, x: torch.Tensor, time: torch.Tensor, mask: torch.Tensor, angles: torch.Tensor
    ) -> torch.Tensor:
        return self.run(x, self.attn_norm.modulation(time), lambda normed: self.attn(normed, mask, angles))

    def run(
        self,
        x: torch.Tensor,
        modulation: tuple[torch.Tensor, ...],
        attention: Callable[[torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """x [B, T, dim], the `attn_norm.modulation` of the time, and `attention` (normed x -> the
        attention output [B, T, dim]) -> the block's output [B, T, dim]."""
        shift, scale, gate, shift_ff, scale_ff, gate_ff = modulation
        normed = self.attn_norm.norm(x) * (1 + scale[:, None]) + shift[:, None]
        x = x + gate.unsqueeze(1) * attention(normed)
        normed = self.ff_norm(x) * (1 + scale_ff[:, None]) + shift_ff[:, None]
        return x + gate_ff.unsqueeze(1) * self.ff(normed)


class DiT(nn.Module):
    """The estimator: (x, mask, mu, t, spks, cond) -> velocity [B, 80, T], with the yaml's constructor keys."""

    def __init__(
        self,
        *,
        dim: int,
        depth: int = 8,
        heads: int = 8,
        dim_head: int = 64,
        dropout: float = 0.1,
        ff_mult: float = 4,
        mel_dim: int = 80,
        mu_dim: int | None = None,
        long_skip_connection: bool = False,
        spk_dim: int | None = None,
        out_channels: int | None = None,
        static_chunk_size: int = 50,
        num_decoding_left_chunks: int = 2,
    ):
        super().__init__()
        if long_skip_connection:
            raise ValueError("DiT: long_skip_connection is not supported (CosyVoice3's DiT has none)")
        if out_channels is not None and out_channels != mel_dim:
            raise ValueError(f"DiT: out_channels {out_channels} must equal mel_dim {mel_dim}")
        if dim_head % 2:
            raise ValueError(f"DiT: dim_head must be even for rotary positions, got {dim_head}")
        self.time_embed = TimestepEmbedding(dim)
        self.input_embed = InputEmbedding(mel_dim, mel_dim if mu_dim is None else mu_dim, dim, spk_dim or 0)
        self.rotary_embed = RotaryEmbedding(dim_head)
        self.transformer_blocks = nn.ModuleList(DiTBlock(dim, heads, dim_head, ff_mult) for _ in range(depth))
        self.norm_out = AdaLayerNormZeroFinal(dim)
        self.proj_out = nn.Linear(dim, mel_dim)
        self.static_chunk_size = static_chunk_size
        self.num_decoding_left_chunks = num_decoding_left_chunks

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        mu: torch.Tensor,
        t: torch.Tensor,
        spks: torch.Tensor,
        cond: torch.Tensor,
        streaming: bool = False,
    ) -> torch.Tensor:
        """x, mu, cond [B, 80, T]; mask [B, 1, T]; t [B] (or a scalar); spks [B, 80] -> velocity [B, 80, T].

        Offline every frame attends to every valid frame; `streaming` attends within static chunks of
        `static_chunk_size` frames and every chunk to their left (`chunked_attention_mask`), as upstream.
        """
        batch, _, frames = x.shape
        if t.ndim == 0:
            t = t.repeat(batch)
        time = self.time_embed(t)
        h = self.input_embed(x.transpose(1, 2), cond.transpose(1, 2), mu.transpose(1, 2), spks)
        angles = self.rotary_embed(frames).to(h.dtype)
        valid = mask[:, 0].bool()
        if streaming:
            valid = chunked_attention_mask(valid, self.static_chunk_size, STREAMING_LEFT_CHUNKS)
        for block in self.transformer_blocks:
            h = block(h, time, valid, angles)
        return self.proj_out(self.norm_out(h, time)).transpose(1, 2)
