"""The flow's token encoder: a Conformer stack, a pre-lookahead convolution, x2 upsampling, a second stack.

Reproduces upstream `UpsampleConformerEncoder` as configured by CosyVoice2 (linear input layer, ESPnet
relative positions, relative self-attention, no convolution module, no macaron feed-forward).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from studio.tts.flow.attention import LinearEmbed, RelPositionMultiHeadedAttention
from studio.tts.flow.masks import attention_mask, make_pad_mask

_ACTIVATIONS = {"swish": nn.SiLU, "relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}
UP_BLOCKS = 4  # fixed in upstream's code, not a hyperparameter


class PositionwiseFeedForward(nn.Module):
    """Two linear layers with an activation between them (keys `w_1`, `w_2`)."""

    def __init__(self, idim: int, hidden_units: int, activation: nn.Module):
        super().__init__()
        self.w_1 = nn.Linear(idim, hidden_units)
        self.activation = activation
        self.w_2 = nn.Linear(hidden_units, idim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.activation(self.w_1(x)))


class ConformerEncoderLayer(nn.Module):
    """Pre-norm block: relative self-attention then feed-forward, each with a residual connection."""

    def __init__(self, size: int, self_attn: nn.Module, feed_forward: nn.Module):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.norm_ff = nn.LayerNorm(size, eps=1e-12)
        self.norm_mha = nn.LayerNorm(size, eps=1e-12)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.norm_mha(x), mask, pos_emb)
        return x + self.feed_forward(self.norm_ff(x))


class PreLookaheadLayer(nn.Module):
    """Lets each token see `pre_lookahead_len` future tokens (zeros, or `context` when streaming)."""

    def __init__(self, channels: int, pre_lookahead_len: int = 1):
        super().__init__()
        self.pre_lookahead_len = pre_lookahead_len
        self.conv1 = nn.Conv1d(channels, channels, kernel_size=pre_lookahead_len + 1)
        self.conv2 = nn.Conv1d(channels, channels, kernel_size=3)

    def forward(self, inputs: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        """inputs [B, T, C]; context [B, <=pre_lookahead_len, C] of already-known future tokens."""
        out = inputs.transpose(1, 2)
        if context is not None and context.size(1) > 0:
            if context.size(1) > self.pre_lookahead_len:
                raise ValueError(
                    f"lookahead context has {context.size(1)} frames, at most "
                    f"{self.pre_lookahead_len} allowed"
                )
            out = torch.cat([out, context.transpose(1, 2)], dim=2)
            out = F.pad(out, (0, self.pre_lookahead_len - context.size(1)))
        else:
            out = F.pad(out, (0, self.pre_lookahead_len))
        out = F.leaky_relu(self.conv1(out))
        out = self.conv2(F.pad(out, (self.conv2.kernel_size[0] - 1, 0)))
        return out.transpose(1, 2) + inputs


class Upsample1D(nn.Module):
    """Nearest-neighbour upsampling by `stride` followed by a causal convolution."""

    def __init__(self, channels: int, out_channels: int, stride: int = 2):
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv1d(channels, out_channels, stride * 2 + 1)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = F.interpolate(x, scale_factor=float(self.stride), mode="nearest")
        out = self.conv(F.pad(out, (self.stride * 2, 0)))
        return out, lengths * self.stride


class UpsampleConformerEncoder(nn.Module):
    """Token encoder of the CosyVoice2 flow: [B, T, D] token embeddings -> [B, 2T, D] frame features."""

    def __init__(
        self,
        input_size: int,
        output_size: int = 256,
        attention_heads: int = 4,
        linear_units: int = 2048,
        num_blocks: int = 6,
        dropout_rate: float = 0.1,
        positional_dropout_rate: float = 0.1,
        attention_dropout_rate: float = 0.0,
        input_layer: str = "linear",
        pos_enc_layer_type: str = "rel_pos_espnet",
        normalize_before: bool = True,
        static_chunk_size: int = 0,
        use_dynamic_chunk: bool = False,
        global_cmvn: nn.Module | None = None,
        use_dynamic_left_chunk: bool = False,
        positionwise_conv_kernel_size: int = 1,
        macaron_style: bool = False,
        selfattention_layer_type: str = "rel_selfattn",
        activation_type: str = "swish",
        use_cnn_module: bool = False,
        cnn_module_kernel: int = 15,
        causal: bool = False,
        cnn_module_norm: str = "batch_norm",
        key_bias: bool = True,
        gradient_checkpointing: bool = False,
        pre_lookahead_len: int = 3,
    ):
        super().__init__()
        unsupported = {
            "input_layer": (input_layer, "linear"),
            "pos_enc_layer_type": (pos_enc_layer_type, "rel_pos_espnet"),
            "selfattention_layer_type": (selfattention_layer_type, "rel_selfattn"),
            "normalize_before": (normalize_before, True),
            "macaron_style": (macaron_style, False),
            "use_cnn_module": (use_cnn_module, False),
            "global_cmvn": (global_cmvn, None),
        }
        for name, (value, supported) in unsupported.items():
            if value != supported:
                raise ValueError(
                    f"UpsampleConformerEncoder: {name}={value!r} is not supported "
                    f"(CosyVoice2 uses {supported!r})"
                )
        if activation_type not in _ACTIVATIONS:
            raise ValueError(f"UpsampleConformerEncoder: unknown activation_type {activation_type!r}")
        self._output_size = output_size
        self.static_chunk_size = static_chunk_size
        activation = _ACTIVATIONS[activation_type]()

        def make_layers(count: int) -> nn.ModuleList:
            return nn.ModuleList(
                ConformerEncoderLayer(
                    output_size,
                    RelPositionMultiHeadedAttention(attention_heads, output_size, key_bias),
                    PositionwiseFeedForward(output_size, linear_units, activation),
                )
                for _ in range(count)
            )

        self.embed = LinearEmbed(input_size, output_size)
        self.after_norm = nn.LayerNorm(output_size, eps=1e-5)
        self.pre_lookahead_layer = PreLookaheadLayer(output_size, pre_lookahead_len=pre_lookahead_len)
        self.encoders = make_layers(num_blocks)
        self.up_layer = Upsample1D(output_size, output_size, stride=2)
        self.up_embed = LinearEmbed(input_size, output_size)
        self.up_encoders = make_layers(UP_BLOCKS)

    def output_size(self) -> int:
        return self._output_size

    def forward(
        self,
        xs: torch.Tensor,
        xs_lens: torch.Tensor,
        context: torch.Tensor | None = None,
        streaming: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """xs [B, T, D], xs_lens [B]; context [1, <=3, D]: embeddings of lookahead tokens not yet final.

        Returns the features [B, 2T, D] and their validity mask [B, 1, 2T].
        """
        xs, _ = self.embed(xs)
        if context is not None and context.size(1) > 0:
            context, _ = self.embed(context, offset=xs.size(1))
        return self.stacks(self.pre_lookahead_layer(xs, context=context), xs_lens, streaming)

    def stacks(
        self, xs: torch.Tensor, xs_lens: torch.Tensor, streaming: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Everything after the pre-lookahead layer: xs [B, T, D] (its output) -> `forward`'s result."""
        masks = ~make_pad_mask(xs_lens, xs.size(1)).unsqueeze(1)
        pos_emb = self.embed.pos_enc.position_encoding(xs.size(1), 0, xs)
        chunk_masks = attention_mask(masks, self.static_chunk_size if streaming else 0)
        for layer in self.encoders:
            xs = layer(xs, chunk_masks, pos_emb)

        xs, xs_lens = self.up_layer(xs.transpose(1, 2), xs_lens)
        xs = xs.transpose(1, 2)
        masks = ~make_pad_mask(xs_lens, xs.size(1)).unsqueeze(1)
        xs, pos_emb = self.up_embed(xs)
        chunk_size = self.static_chunk_size * self.up_layer.stride if streaming else 0
        chunk_masks = attention_mask(masks, chunk_size)
        for layer in self.up_encoders:
            xs = layer(xs, chunk_masks, pos_emb)
        return self.after_norm(xs), masks
