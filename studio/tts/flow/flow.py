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
        embedding, token, token_len = embed_speaker_and_tokens(
            self, token, token_len, prompt_token, prompt_token_len, embedding
        )

        if finalize:
            h, _ = self.encoder(token, token_len, streaming=streaming)
        else:
            lookahead = self.pre_lookahead_len
            token, context = token[:, :-lookahead], token[:, -lookahead:]
            h, _ = self.encoder(token, token_len, context=context, streaming=streaming)
        h = self.encoder_proj(h)
        return decode_after_prompt(self.decoder, h, prompt_feat, embedding, n_timesteps, streaming), None


def embed_speaker_and_tokens(
    flow: nn.Module,
    token: torch.Tensor,
    token_len: torch.Tensor,
    prompt_token: torch.Tensor,
    prompt_token_len: torch.Tensor,
    embedding: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A flow's first step, shared by CosyVoice2's and CosyVoice3's: (the speaker vector through
    `spk_embed_affine_layer` [1, 80], prompt + target tokens through `input_embedding` with padding zeroed
    [1, N, C], their lengths). Inputs follow the weights' dtype (e.g. after .half())."""
    dtype = flow.spk_embed_affine_layer.weight.dtype
    embedding = flow.spk_embed_affine_layer(F.normalize(embedding.float(), dim=1).to(dtype))
    token = torch.cat([prompt_token, token], dim=1)
    token_len = prompt_token_len + token_len
    mask = (~make_pad_mask(token_len, max_len=token.shape[1])).unsqueeze(-1).to(embedding)
    return embedding, flow.input_embedding(torch.clamp(token, min=0).long()) * mask, token_len


def decode_after_prompt(
    decoder: nn.Module,
    h: torch.Tensor,
    prompt_feat: torch.Tensor,
    embedding: torch.Tensor,
    n_timesteps: int,
    streaming: bool,
) -> torch.Tensor:
    """A flow's last step, shared by CosyVoice2's and CosyVoice3's: solve the mel for token features
    h [1, T, 80] conditioned on the prompt's mel [1, T', 80] (its first T' frames) and the speaker vector;
    return the frames after the prompt's [1, 80, T - T'] in float32."""
    prompt_frames, frames = prompt_feat.shape[1], h.shape[1]
    conds = torch.zeros([1, frames, h.shape[2]], device=h.device, dtype=h.dtype)
    conds[:, :prompt_frames] = prompt_feat.to(h.dtype)
    feat, _ = decoder(
        mu=h.transpose(1, 2).contiguous(),
        mask=torch.ones([1, 1, frames], device=h.device, dtype=h.dtype),
        spks=embedding,
        cond=conds.transpose(1, 2),
        n_timesteps=n_timesteps,
        streaming=streaming,
    )
    return feat[:, :, prompt_frames:].float()
