"""Speech tokens + prompt + speaker embedding -> mel frames: upstream `CausalMaskedDiffWithDiT` inference.

CosyVoice3's flow replaces CosyVoice2's conformer encoder with a `PreLookaheadLayer` (two causal
convolutions that see `pre_lookahead_len` tokens ahead) and its U-Net with a DiT (cosyvoice3/dit.py).
The sampler is CosyVoice2's Euler CFM (cosine schedule, classifier-free guidance), starting from the
same fixed noise. Submodule names follow upstream so `flow.pt` loads strictly.

`inference(streaming=True)` is upstream's streamed call: the DiT attends in 50-frame chunks
(cosyvoice3/dit.py), so a take re-running it over its growing token prefix gets, for each frame, the value
of the first call whose frames complete that frame's chunk. `DiTFlowStream` (cosyvoice3/flow_stream.py)
computes the same frames without the re-run.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from studio.tts.flow.flow import decode_after_prompt, embed_speaker_and_tokens


class PreLookaheadLayer(nn.Module):
    """Token features [B, N, C] -> [B, N, C]: a convolution over each token and the next `pre_lookahead_len`,
    leaky ReLU, a causal kernel-3 convolution back to C channels, plus the input (residual)."""

    def __init__(self, in_channels: int, channels: int, pre_lookahead_len: int = 1):
        super().__init__()
        if pre_lookahead_len < 1:
            raise ValueError(f"PreLookaheadLayer needs pre_lookahead_len >= 1, got {pre_lookahead_len}")
        self.pre_lookahead_len = pre_lookahead_len
        self.conv1 = nn.Conv1d(in_channels, channels, kernel_size=pre_lookahead_len + 1)
        self.conv2 = nn.Conv1d(channels, in_channels, kernel_size=3)

    def forward(self, inputs: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        """`context` [B, pre_lookahead_len, C]: the tokens after `inputs`, seen as lookahead only.

        Without it the lookahead of the last tokens is zero padding (the end of the utterance).
        """
        x = inputs.transpose(1, 2)
        if context is None:
            x = F.pad(x, (0, self.pre_lookahead_len))
        else:
            if context.size(1) != self.pre_lookahead_len:
                raise ValueError(
                    f"PreLookaheadLayer context must hold {self.pre_lookahead_len} tokens, got {context.size(1)}"
                )
            x = torch.cat([x, context.transpose(1, 2)], dim=2)
        x = F.leaky_relu(self.conv1(x))
        x = self.conv2(F.pad(x, (self.conv2.kernel_size[0] - 1, 0)))
        return x.transpose(1, 2) + inputs

    @property
    def left_context(self) -> int:
        """Tokens before a token that its features depend on (the causal second convolution's)."""
        return self.conv2.kernel_size[0] - 1

    def span(self, window: torch.Tensor, left: int, end_padding: int) -> torch.Tensor:
        """Features of some tokens of a longer sequence, equal to `forward` over the whole of it.

        window [B, W, C]: the embedded tokens from `left` tokens before the first wanted one (`left` is
        `left_context`, or fewer at the start of the sequence) through the wanted ones and the
        `pre_lookahead_len` after them, less the `end_padding` of those that lie past the sequence's end
        (zeros, as `forward` without context). -> [B, W - left - pre_lookahead_len + end_padding, C].
        """
        if not 0 <= left <= self.left_context or not 0 <= end_padding <= self.pre_lookahead_len:
            raise ValueError(
                f"PreLookaheadLayer.span: left {left} must be in 0..{self.left_context} and end_padding "
                f"{end_padding} in 0..{self.pre_lookahead_len}"
            )
        x = F.pad(window.transpose(1, 2), (0, end_padding))
        x = F.leaky_relu(self.conv1(x))
        x = self.conv2(F.pad(x, (self.left_context - left, 0)))
        return x.transpose(1, 2) + window[:, left : left + x.size(2)]


class CausalMaskedDiffWithDiT(nn.Module):
    """Token embedding, lookahead layer, two mel frames per token, and the DiT flow-matching decoder."""

    def __init__(
        self,
        input_size: int = 80,
        output_size: int = 80,
        spk_embed_dim: int = 192,
        output_type: str = "mel",
        vocab_size: int = 6561,
        input_frame_rate: int = 25,
        only_mask_loss: bool = True,
        token_mel_ratio: int = 2,
        pre_lookahead_len: int = 3,
        pre_lookahead_layer: nn.Module | None = None,
        decoder: nn.Module | None = None,
        decoder_conf: dict[str, Any] | None = None,
        mel_feat_conf: dict[str, Any] | None = None,
    ):
        super().__init__()
        if pre_lookahead_layer is None or decoder is None:
            raise ValueError("CausalMaskedDiffWithDiT needs both a pre_lookahead_layer and a decoder module")
        if input_size != output_size:
            raise ValueError(
                f"CausalMaskedDiffWithDiT: input_size {input_size} must equal output_size {output_size} "
                "(the token features feed the decoder as they are)"
            )
        self.input_size = input_size
        self.output_size = output_size
        self.vocab_size = vocab_size
        self.input_frame_rate = input_frame_rate
        self.token_mel_ratio = token_mel_ratio
        self.pre_lookahead_len = pre_lookahead_len
        self.input_embedding = nn.Embedding(vocab_size, input_size)
        self.spk_embed_affine_layer = nn.Linear(spk_embed_dim, output_size)
        self.pre_lookahead_layer = pre_lookahead_layer
        self.decoder = decoder

    @torch.inference_mode()
    def inference(
        self,
        token: torch.Tensor,
        token_len: torch.Tensor,
        prompt_token: torch.Tensor,
        prompt_token_len: torch.Tensor,
        prompt_feat: torch.Tensor,
        prompt_feat_len: torch.Tensor,
        embedding: torch.Tensor,
        streaming: bool = False,
        finalize: bool = True,
        n_timesteps: int = 10,
    ) -> tuple[torch.Tensor, None]:
        """Mel [1, 80, T] (float32) for `token` [1, N], conditioned on the prompt's tokens and mel [1, T', 80].

        When not `finalize`, the last `pre_lookahead_len` tokens serve only as lookahead and yield no frames.
        `streaming` attends in the DiT's static chunks, counted from the prompt's first frame.
        """
        if token.shape[0] != 1:
            raise ValueError(f"flow inference takes one utterance at a time, got batch {token.shape[0]}")
        if prompt_feat.shape[1] != prompt_token.shape[1] * self.token_mel_ratio:
            raise ValueError(
                f"the prompt mel has {prompt_feat.shape[1]} frames; {prompt_token.shape[1]} prompt tokens "
                f"need {prompt_token.shape[1] * self.token_mel_ratio}"
            )
        if not finalize and token.shape[1] + prompt_token.shape[1] <= self.pre_lookahead_len:
            raise ValueError(f"a non-final flow chunk needs more than {self.pre_lookahead_len} tokens")
        embedding, token, _ = embed_speaker_and_tokens(
            self, token, token_len, prompt_token, prompt_token_len, embedding
        )

        if finalize:
            h = self.pre_lookahead_layer(token)
        else:
            lookahead = self.pre_lookahead_len
            h = self.pre_lookahead_layer(token[:, :-lookahead], context=token[:, -lookahead:])
        h = h.repeat_interleave(self.token_mel_ratio, dim=1)
        mel = decode_after_prompt(
            self.decoder, h, prompt_feat, embedding, max(1, int(n_timesteps)), streaming
        )
        return mel, None
