"""The flow-matching vector-field estimator: a causal 1-D U-Net with transformer blocks (plain torch).

Reproduces upstream `CausalConditionalDecoder` (itself Matcha-TTS's decoder with causal convolutions and
diffusers' BasicTransformerBlock); submodule names follow upstream so `flow.pt` loads strictly.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from studio.tts.flow.masks import attention_mask, mask_to_bias


class CausalConv1d(nn.Conv1d):
    """Stride-1 convolution padded on the left only, so no output frame sees the future."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__(in_channels, out_channels, kernel_size)
        self.causal_padding = kernel_size - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (self.causal_padding, 0)))


class ChannelLayerNorm(nn.LayerNorm):
    """LayerNorm over the channel axis of a [B, C, T] tensor (upstream's Transpose-LayerNorm-Transpose)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class CausalBlock1D(nn.Module):
    """Causal conv -> LayerNorm -> Mish, masked in and out (keys `block.0`, `block.2`)."""

    def __init__(self, dim: int, dim_out: int):
        super().__init__()
        self.block = nn.Sequential(
            CausalConv1d(dim, dim_out, 3), nn.Identity(), ChannelLayerNorm(dim_out), nn.Identity(), nn.Mish()
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.block(x * mask) * mask


class CausalResnetBlock1D(nn.Module):
    """Two causal blocks with the time embedding added between them, plus a 1x1 residual projection."""

    def __init__(self, dim: int, dim_out: int, time_emb_dim: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Mish(), nn.Linear(time_emb_dim, dim_out))
        self.block1 = CausalBlock1D(dim, dim_out)
        self.block2 = CausalBlock1D(dim_out, dim_out)
        self.res_conv = nn.Conv1d(dim, dim_out, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, time_emb: torch.Tensor) -> torch.Tensor:
        h = self.block1(x, mask) + self.mlp(time_emb).unsqueeze(-1)
        return self.block2(h, mask) + self.res_conv(x * mask)


class Downsample1D(nn.Module):
    """Stride-2 convolution (used between U-Net levels when there is more than one)."""

    def __init__(self, dim: int):
        super().__init__()
        self.conv = nn.Conv1d(dim, dim, 3, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class Upsample1D(nn.Module):
    """Stride-2 transposed convolution (the U-Net's way back up)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.ConvTranspose1d(channels, channels, 4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def sinusoidal_embedding(t: torch.Tensor, dim: int, scale: float = 1000) -> torch.Tensor:
    """Matcha's sinusoidal timestep embedding [B, dim] of t [B]."""
    if t.ndim < 1:
        t = t.unsqueeze(0)
    half_dim = dim // 2
    freq = torch.exp(torch.arange(half_dim, device=t.device).float() * -(math.log(10000) / (half_dim - 1)))
    emb = scale * t.unsqueeze(1) * freq.unsqueeze(0)
    return torch.cat((emb.sin(), emb.cos()), dim=-1)


class TimestepEmbedding(nn.Module):
    """Linear -> SiLU -> Linear on the sinusoidal timestep embedding (keys `linear_1`, `linear_2`)."""

    def __init__(self, in_channels: int, time_embed_dim: int):
        super().__init__()
        self.linear_1 = nn.Linear(in_channels, time_embed_dim)
        self.linear_2 = nn.Linear(time_embed_dim, time_embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class SelfAttention(nn.Module):
    """diffusers-style attention: bias-free q/k/v projections, output projection `to_out.0`."""

    def __init__(self, dim: int, heads: int, dim_head: int):
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_k = nn.Linear(dim, inner, bias=False)
        self.to_v = nn.Linear(dim, inner, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim)])

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (
            proj(x).view(b, t, self.heads, -1).transpose(1, 2) for proj in (self.to_q, self.to_k, self.to_v)
        )
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return self.to_out[0](out.transpose(1, 2).reshape(b, t, -1))


class GeluProjection(nn.Module):
    """Linear followed by GELU (diffusers' GELU module; key `proj`)."""

    def __init__(self, dim_in: int, dim_out: int, approximate: str):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out)
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x), approximate=self.approximate)


class FeedForward(nn.Module):
    """GELU MLP with 4x width (keys `net.0.proj`, `net.2`)."""

    def __init__(self, dim: int, act_fn: str, mult: int = 4):
        super().__init__()
        approximations = {"gelu": "none", "gelu-approximate": "tanh"}
        if act_fn not in approximations:
            raise ValueError(
                f"CausalConditionalDecoder: act_fn {act_fn!r} is not supported "
                f"(use one of {sorted(approximations)})"
            )
        inner = dim * mult
        self.net = nn.ModuleList(
            [GeluProjection(dim, inner, approximations[act_fn]), nn.Identity(), nn.Linear(inner, dim)]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for module in self.net:
            x = module(x)
        return x


class BasicTransformerBlock(nn.Module):
    """Pre-norm self-attention and feed-forward over [B, T, C] (diffusers' block without cross-attention)."""

    def __init__(self, dim: int, num_attention_heads: int, attention_head_dim: int, activation_fn: str):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn1 = SelfAttention(dim, num_attention_heads, attention_head_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.ff = FeedForward(dim, activation_fn)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = x + self.attn1(self.norm1(x), bias)
        return x + self.ff(self.norm3(x))


class CausalConditionalDecoder(nn.Module):
    """Estimates the flow's velocity field from (x, mu, t, speaker, prompt condition) on [B, C, T] mels."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        channels: tuple[int, ...] | list[int] = (256, 256),
        dropout: float = 0.05,
        attention_head_dim: int = 64,
        n_blocks: int = 1,
        num_mid_blocks: int = 2,
        num_heads: int = 4,
        act_fn: str = "snake",
        static_chunk_size: int = 50,
        num_decoding_left_chunks: int = 2,
    ):
        super().__init__()
        channels = tuple(channels)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.static_chunk_size = static_chunk_size
        time_embed_dim = channels[0] * 4
        self.time_mlp = TimestepEmbedding(in_channels, time_embed_dim)

        def transformer_blocks(dim: int) -> nn.ModuleList:
            return nn.ModuleList(
                BasicTransformerBlock(dim, num_heads, attention_head_dim, act_fn) for _ in range(n_blocks)
            )

        self.down_blocks = nn.ModuleList()
        output_channel = in_channels
        for i, width in enumerate(channels):
            input_channel, output_channel = output_channel, width
            is_last = i == len(channels) - 1
            down = CausalConv1d(width, width, 3) if is_last else Downsample1D(width)
            self.down_blocks.append(
                nn.ModuleList(
                    [
                        CausalResnetBlock1D(input_channel, width, time_embed_dim),
                        transformer_blocks(width),
                        down,
                    ]
                )
            )
        self.mid_blocks = nn.ModuleList(
            nn.ModuleList(
                [
                    CausalResnetBlock1D(channels[-1], channels[-1], time_embed_dim),
                    transformer_blocks(channels[-1]),
                ]
            )
            for _ in range(num_mid_blocks)
        )
        up_channels = channels[::-1] + (channels[0],)
        self.up_blocks = nn.ModuleList()
        for i in range(len(up_channels) - 1):
            width = up_channels[i + 1]
            is_last = i == len(up_channels) - 2
            up = CausalConv1d(width, width, 3) if is_last else Upsample1D(width)
            self.up_blocks.append(
                nn.ModuleList(
                    [
                        CausalResnetBlock1D(up_channels[i] * 2, width, time_embed_dim),
                        transformer_blocks(width),
                        up,
                    ]
                )
            )
        self.final_block = CausalBlock1D(up_channels[-1], up_channels[-1])
        self.final_proj = nn.Conv1d(up_channels[-1], out_channels, 1)
        self._initialize_weights()

    def _initialize_weights(self) -> None:
        """Upstream's initialisation (Kaiming-normal weights, zero biases), for seeded random models."""
        for module in self.modules():
            if isinstance(module, (nn.Conv1d, nn.Linear)):
                nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    @staticmethod
    def _attend(x: torch.Tensor, bias: torch.Tensor, blocks: nn.ModuleList) -> torch.Tensor:
        """Run transformer blocks over x [B, C, T] with the additive attention bias [B, 1, 1|T, T]."""
        x = x.transpose(1, 2)
        for block in blocks:
            x = block(x, bias)
        return x.transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        mu: torch.Tensor,
        t: torch.Tensor,
        spks: torch.Tensor | None = None,
        cond: torch.Tensor | None = None,
        streaming: bool = False,
    ) -> torch.Tensor:
        """x, mu, cond [B, 80, T]; mask [B, 1, T]; t [B]; spks [B, 80] -> velocity [B, 80, T]."""
        t = self.time_mlp(sinusoidal_embedding(t, self.in_channels).to(t.dtype))
        parts = [x, mu]
        if spks is not None:
            parts.append(spks.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        if cond is not None:
            parts.append(cond)
        x = torch.cat(parts, dim=1)

        biases: dict[int, torch.Tensor] = {}  # one attention bias per U-Net level (frame count)

        def bias_for(level_mask: torch.Tensor) -> torch.Tensor:
            frames = level_mask.shape[-1]
            if frames not in biases:
                visible = attention_mask(level_mask.bool(), self.static_chunk_size if streaming else 0)
                biases[frames] = mask_to_bias(visible, x.dtype).unsqueeze(1)
            return biases[frames]

        hiddens = []
        masks = [mask]
        for resnet, blocks, downsample in self.down_blocks:
            mask_down = masks[-1]
            x = self._attend(resnet(x, mask_down, t), bias_for(mask_down), blocks)
            hiddens.append(x)
            x = downsample(x * mask_down)
            masks.append(mask_down[:, :, ::2])
        masks = masks[:-1]
        mask_mid = masks[-1]
        for resnet, blocks in self.mid_blocks:
            x = self._attend(resnet(x, mask_mid, t), bias_for(mask_mid), blocks)
        for resnet, blocks, upsample in self.up_blocks:
            mask_up = masks.pop()
            skip = hiddens.pop()
            x = torch.cat([x[:, :, : skip.shape[-1]], skip], dim=1)
            x = self._attend(resnet(x, mask_up, t), bias_for(mask_up), blocks)
            x = upsample(x * mask_up)
        x = self.final_block(x, mask_up)
        return self.final_proj(x * mask_up) * mask
