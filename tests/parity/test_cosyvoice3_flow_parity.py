"""Our CosyVoice3 flow (studio/tts/cosyvoice3) against the reference's (vllm-omni's port of upstream's).

Both are built from one config; the reference's state dict loads strictly into ours (the `flow.pt` key
layout matches), then the DiT estimator's velocity for one step and the whole offline flow mel are
compared on identical inputs and identical starting noise, in fp32.

The reference builds no streaming chunk mask (docs/COSYVOICE3.md), so our streamed flow is compared where
the mask changes nothing: a sequence within one chunk, and the first chunk of a longer one (its frames
see only that chunk, which the reference's offline flow over that chunk alone also does).
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.parity

SPEECH_TOKENS = 6561
TOKEN_MEL_RATIO = 2
PRE_LOOKAHEAD = 3
TOLERANCE = 1e-4
CFM_PARAMS = {
    "sigma_min": 1e-06,
    "solver": "euler",
    "t_scheduler": "cosine",
    "training_cfg_rate": 0.2,
    "inference_cfg_rate": 0.7,
    "reg_loss_type": "l1",
}
SMALL_DIT = {"dim": 64, "depth": 2, "heads": 4, "dim_head": 16, "ff_mult": 2}
FULL_DIT = {"dim": 1024, "depth": 22, "heads": 16, "dim_head": 64, "ff_mult": 2}  # cosyvoice3.yaml's
DIT_COMMON = {
    "mel_dim": 80,
    "mu_dim": 80,
    "spk_dim": 80,
    "out_channels": 80,
    "static_chunk_size": 50,
    "num_decoding_left_chunks": -1,
}


def _flow_kwargs() -> dict:
    return {
        "input_size": 80,
        "output_size": 80,
        "spk_embed_dim": 192,
        "vocab_size": SPEECH_TOKENS,
        "input_frame_rate": 25,
        "token_mel_ratio": TOKEN_MEL_RATIO,
        "pre_lookahead_len": PRE_LOOKAHEAD,
    }


def _reference_flow(dit: dict, lookahead_channels: int):
    from omegaconf import DictConfig
    from vllm_omni.model_executor.models.cosyvoice3.code2wav_core.cfm import (
        CausalConditionalCFM,
        CausalMaskedDiffWithDiT,
    )
    from vllm_omni.model_executor.models.cosyvoice3.code2wav_core.layers import PreLookaheadLayer
    from vllm_omni.model_executor.models.cosyvoice3.cosyvoice3_code2wav import _build_dit_estimator

    estimator = _build_dit_estimator({**dit, **DIT_COMMON})
    decoder = CausalConditionalCFM(240, DictConfig(CFM_PARAMS), n_spks=1, spk_emb_dim=80, estimator=estimator)
    return CausalMaskedDiffWithDiT(
        **_flow_kwargs(),
        pre_lookahead_layer=PreLookaheadLayer(80, lookahead_channels, pre_lookahead_len=PRE_LOOKAHEAD),
        decoder=decoder,
    ).eval()


def _our_flow(dit: dict, lookahead_channels: int):
    from studio.tts.cosyvoice3.dit import DiT
    from studio.tts.cosyvoice3.flow import CausalMaskedDiffWithDiT, PreLookaheadLayer
    from studio.tts.flow.cfm import CausalConditionalCFM

    decoder = CausalConditionalCFM(
        240, CFM_PARAMS, n_spks=1, spk_emb_dim=80, estimator=DiT(**dit, **DIT_COMMON)
    )
    return CausalMaskedDiffWithDiT(
        **_flow_kwargs(),
        pre_lookahead_layer=PreLookaheadLayer(80, lookahead_channels, pre_lookahead_len=PRE_LOOKAHEAD),
        decoder=decoder,
    ).eval()


def _flow_pair(dit: dict, lookahead_channels: int):
    """The reference with random weights, and ours holding the same weights (loaded strictly)."""
    torch.manual_seed(0)
    reference = _reference_flow(dit, lookahead_channels)
    ours = _our_flow(dit, lookahead_channels)
    ours.load_state_dict(reference.state_dict(), strict=True)
    return reference, ours


def _estimator_pair(dit: dict):
    """The reference's DiT with random weights, and ours holding the same weights (loaded strictly)."""
    from vllm_omni.model_executor.models.cosyvoice3.cosyvoice3_code2wav import _build_dit_estimator

    from studio.tts.cosyvoice3.dit import DiT

    torch.manual_seed(0)
    reference = _build_dit_estimator({**dit, **DIT_COMMON}).eval()
    ours = DiT(**dit, **DIT_COMMON).eval()
    ours.load_state_dict(reference.state_dict(), strict=True)
    return reference, ours


def _estimator_inputs(frames: int, valid_frames: int, seed: int) -> tuple[torch.Tensor, ...]:
    """A CFG-doubled batch as the solver builds it: conditional row, then the unconditional one."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 80, frames, generator=generator)
    mu = torch.randn(2, 80, frames, generator=generator)
    mu[1] = 0
    cond = torch.randn(2, 80, frames, generator=generator)
    cond[1] = 0
    spks = torch.randn(2, 80, generator=generator)
    spks[1] = 0
    mask = torch.zeros(2, 1, frames)
    mask[:, :, :valid_frames] = 1
    t = torch.full((2,), 0.3)
    return x, mask, mu, t, spks, cond


def _max_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    assert ours.shape == theirs.shape
    return (ours - theirs).abs().max().item()


def _flow_inputs(tokens: int, prompt_tokens: int, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    token = torch.randint(0, SPEECH_TOKENS, (1, tokens), generator=generator)
    prompt_token = torch.randint(0, SPEECH_TOKENS, (1, prompt_tokens), generator=generator)
    prompt_feat = torch.randn(1, prompt_tokens * TOKEN_MEL_RATIO, 80, generator=generator)
    return {
        "token": token,
        "token_len": torch.tensor([tokens]),
        "prompt_token": prompt_token,
        "prompt_token_len": torch.tensor([prompt_tokens]),
        "prompt_feat": prompt_feat,
        "prompt_feat_len": torch.tensor([prompt_feat.shape[1]]),
        "embedding": torch.randn(1, 192, generator=generator),
    }


def _flow_mels(
    reference,
    ours,
    inputs: dict,
    *,
    finalize: bool,
    n_timesteps: int,
    noise_seed: int,
    streaming: bool = False,
):
    """Both flows' mels from the same starting noise: the reference draws it from the seeded global
    generator; ours reads it from its noise buffer, which gets the same draw. `streaming` is ours'
    (the reference's flow is the same either way)."""
    frames = (inputs["token"].shape[1] + inputs["prompt_token"].shape[1]) * TOKEN_MEL_RATIO
    if not finalize:
        frames -= PRE_LOOKAHEAD * TOKEN_MEL_RATIO
    torch.manual_seed(noise_seed)
    noise = torch.randn(1, 80, frames)
    ours.decoder.rand_noise[:, :, :frames] = noise
    torch.manual_seed(noise_seed)
    theirs, _ = reference.inference(**inputs, streaming=False, finalize=finalize, n_timesteps=n_timesteps)
    mine, _ = ours.inference(**inputs, streaming=streaming, finalize=finalize, n_timesteps=n_timesteps)
    return mine, theirs


@pytest.mark.parametrize("valid_frames", [40, 29], ids=["all-valid", "padded-tail"])
def test_dit_estimator_matches_the_reference_for_one_step(cosyvoice3_reference, valid_frames):
    reference, ours = _estimator_pair(SMALL_DIT)
    inputs = _estimator_inputs(frames=40, valid_frames=valid_frames, seed=1)
    with torch.inference_mode():
        theirs = reference(*inputs)
        mine = ours(*inputs)
    assert theirs.abs().max() > 0.1  # a real velocity, not zeros on both sides
    assert _max_error(mine, theirs) <= TOLERANCE


@pytest.mark.parametrize("finalize", [True, False], ids=["final", "with-lookahead"])
def test_offline_flow_mel_matches_the_reference(cosyvoice3_reference, finalize):
    reference, ours = _flow_pair(SMALL_DIT, lookahead_channels=64)
    inputs = _flow_inputs(tokens=17, prompt_tokens=6, seed=2)
    mine, theirs = _flow_mels(reference, ours, inputs, finalize=finalize, n_timesteps=10, noise_seed=3)
    expected_tokens = 17 - (0 if finalize else PRE_LOOKAHEAD)
    assert theirs.shape == (1, 80, expected_tokens * TOKEN_MEL_RATIO)
    assert _max_error(mine, theirs) <= TOLERANCE


def test_full_size_dit_flow_matches_the_reference(cosyvoice3_reference):
    """cosyvoice3.yaml's shapes (22 blocks of 1024, 16 heads, lookahead width 1024) on a short input."""
    reference, ours = _flow_pair(FULL_DIT, lookahead_channels=1024)
    inputs = _flow_inputs(tokens=8, prompt_tokens=4, seed=4)
    mine, theirs = _flow_mels(reference, ours, inputs, finalize=True, n_timesteps=2, noise_seed=5)
    assert theirs.shape == (1, 80, 8 * TOKEN_MEL_RATIO)
    assert _max_error(mine, theirs) <= TOLERANCE


@pytest.mark.parametrize("finalize", [True, False], ids=["final", "with-lookahead"])
def test_streamed_flow_within_one_chunk_matches_the_reference(cosyvoice3_reference, finalize):
    reference, ours = _flow_pair(SMALL_DIT, lookahead_channels=64)
    inputs = _flow_inputs(tokens=17, prompt_tokens=6, seed=7)  # 46 frames: under one 50-frame chunk
    mine, theirs = _flow_mels(
        reference, ours, inputs, finalize=finalize, n_timesteps=10, noise_seed=8, streaming=True
    )
    assert _max_error(mine, theirs) <= TOLERANCE


def test_streamed_flow_first_chunk_matches_the_reference_over_that_chunk(cosyvoice3_reference):
    """A streamed take of 92 frames: its first 50 (the prompt's 12 and 38 more) equal the reference's
    offline flow over the tokens of those frames alone, with their 3 lookahead tokens as context."""
    reference, ours = _flow_pair(SMALL_DIT, lookahead_channels=64)
    prompt_tokens, chunk_tokens = 6, 25
    inputs = _flow_inputs(tokens=40, prompt_tokens=prompt_tokens, seed=9)
    first_chunk = dict(inputs)
    first_chunk["token"] = inputs["token"][:, : chunk_tokens - prompt_tokens + PRE_LOOKAHEAD]
    first_chunk["token_len"] = torch.tensor([first_chunk["token"].shape[1]])
    theirs_chunk, ours_chunk = _flow_mels(
        reference, ours, first_chunk, finalize=False, n_timesteps=10, noise_seed=10
    )
    assert theirs_chunk.shape == (1, 80, 2 * (chunk_tokens - prompt_tokens))
    # the whole take's noise begins with the chunk's (set above); the frames after it are drawn anew
    ours.decoder.rand_noise[:, :, 50:92] = torch.randn(1, 80, 42, generator=torch.Generator().manual_seed(11))
    with torch.inference_mode():
        streamed, _ = ours.inference(**inputs, streaming=True, finalize=True)
        offline, _ = ours.inference(**inputs, streaming=False, finalize=True)
    frames = theirs_chunk.shape[2]
    assert _max_error(streamed[:, :, :frames], theirs_chunk) <= TOLERANCE
    assert _max_error(offline[:, :, :frames], theirs_chunk) > 1e-2  # offline, later frames are seen


def test_flow_refuses_a_prompt_mel_of_the_wrong_length():
    from studio.tts.cosyvoice3.flow import CausalMaskedDiffWithDiT

    flow = _our_flow(SMALL_DIT, lookahead_channels=64)
    inputs = _flow_inputs(tokens=5, prompt_tokens=3, seed=6)
    inputs["prompt_feat"] = inputs["prompt_feat"][:, :-1]
    with pytest.raises(ValueError, match="3 prompt tokens need 6"):
        flow.inference(**inputs, finalize=True)
    with pytest.raises(ValueError, match="pre_lookahead_layer and a decoder"):
        CausalMaskedDiffWithDiT(decoder=flow.decoder)
