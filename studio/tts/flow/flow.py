"""Speech tokens + prompt + speaker embedding -> mel frames: upstream `CausalMaskedDiffWithXvec` inference."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from studio.tts.flow.masks import make_pad_mask


class CausalMaskedDiffWithXvec(nn.Module):
    """Token embedding, upsampling encoder, projection to 80 mels, and the flow-matching decoder.

    Two mel frames per speech token (token_mel_ratio 2). Deterministic: the decoder starts from fixed noise.
    """

    def __init__(
        self,
        input_size: int = 512,
        output_size: int = 80,
        spk_embed_dim: int = 192,
        output_type: str = "mel",
        vocab_size: int = 4096,
        input_frame_rate: int = 50,
        only_mask_loss: bool = True,
        token_mel_ratio: int = 2,
        pre_lookahead_len: int = 3,
        encoder: nn.Module | None = None,
        decoder: nn.Module | None = None,
        decoder_conf: dict[str, Any] | None = None,
        mel_feat_conf: dict[str, Any] | None = None,
    ):
        super().__init__()
        if encoder is None or decoder is None:
            raise ValueError("CausalMaskedDiffWithXvec needs both an encoder and a decoder module")
        self.input_size = input_size
        self.output_size = output_size
        self.vocab_size = vocab_size
        self.input_frame_rate = input_frame_rate
        self.token_mel_ratio = token_mel_ratio
        self.pre_lookahead_len = pre_lookahead_len
        self.input_embedding = nn.Embedding(vocab_size, input_size)
        self.spk_embed_affine_layer = nn.Linear(spk_embed_dim, output_size)
        self.encoder = encoder
        self.encoder_proj = nn.Linear(encoder.output_size(), output_size)
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
        streaming: bool,
        finalize: bool,
        n_timesteps: int = 10,
    ) -> tuple[torch.Tensor, None]:
        """Mel [1, 80, T] (float32) for `token` [1, N], conditioned on the prompt's tokens and mel [1, T', 80].

        When not `finalize`, the last `pre_lookahead_len` tokens serve only as lookahead and yield no frames.
        """
        if token.shape[0] != 1:
            raise ValueError(f"flow inference takes one utterance at a time, got batch {token.shape[0]}")
        if not finalize and token.shape[1] + prompt_token.shape[1] <= self.pre_lookahead_len:
            raise ValueError(f"a non-final flow chunk needs more than {self.pre_lookahead_len} tokens")
        dtype = self.spk_embed_affine_layer.weight.dtype  # inputs follow the weights (e.g. after .half())
        embedding = self.spk_embed_affine_layer(F.normalize(embedding.float(), dim=1).to(dtype))

        token = torch.cat([prompt_token, token], dim=1)
        token_len = prompt_token_len + token_len
        mask = (~make_pad_mask(token_len)).unsqueeze(-1).to(embedding)
        token = self.input_embedding(torch.clamp(token, min=0).long()) * mask

        if finalize:
            h, _ = self.encoder(token, token_len, streaming=streaming)
        else:
            lookahead = self.pre_lookahead_len
            token, context = token[:, :-lookahead], token[:, -lookahead:]
            h, _ = self.encoder(token, token_len, context=context, streaming=streaming)
        mel_len1 = prompt_feat.shape[1]
        mel_len2 = h.shape[1] - mel_len1
        h = self.encoder_proj(h)

        conds = torch.zeros([1, mel_len1 + mel_len2, self.output_size], device=h.device, dtype=h.dtype)
        conds[:, :mel_len1] = prompt_feat.to(h.dtype)
        conds = conds.transpose(1, 2)
        mask = torch.ones([1, 1, mel_len1 + mel_len2], device=h.device, dtype=h.dtype)
        feat, _ = self.decoder(
            mu=h.transpose(1, 2).contiguous(),
            mask=mask,
            spks=embedding,
            cond=conds,
            n_timesteps=n_timesteps,
            streaming=streaming,
        )
        return feat[:, :, mel_len1:].float(), None
