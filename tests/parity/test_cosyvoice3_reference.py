"""The CosyVoice3 parity reference works here: vllm-omni's flow (PreLookaheadLayer + DiT + CFM), causal HiFT
and LM head build from small random configs and run on the CPU, as later parity tests will need them."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.parity

SPEECH_TOKENS = 6561  # CosyVoice3's speech vocabulary; 200 specials follow it
TOKEN_MEL_RATIO = 2
PRE_LOOKAHEAD = 3
SAMPLES_PER_MEL_FRAME = 480  # 8 * 5 * 3 upsampling times the iSTFT hop of 4: 24 kHz at 50 mel frames/s


def _flow():
    """cosyvoice3.yaml's flow with a 2-block DiT of width 64 (the official one: 22 blocks of 1024)."""
    from omegaconf import DictConfig
    from vllm_omni.model_executor.models.cosyvoice3.code2wav_core.cfm import (
        CausalConditionalCFM,
        CausalMaskedDiffWithDiT,
    )
    from vllm_omni.model_executor.models.cosyvoice3.code2wav_core.layers import PreLookaheadLayer
    from vllm_omni.model_executor.models.cosyvoice3.cosyvoice3_code2wav import _build_dit_estimator

    estimator = _build_dit_estimator(
        {
            "dim": 64,
            "depth": 2,
            "heads": 2,
            "dim_head": 32,
            "ff_mult": 2,
            "mel_dim": 80,
            "mu_dim": 80,
            "spk_dim": 80,
            "out_channels": 80,
            "static_chunk_size": 50,
            "num_decoding_left_chunks": -1,
        }
    )
    cfm_params = DictConfig(
        {
            "sigma_min": 1e-06,
            "solver": "euler",
            "t_scheduler": "cosine",
            "training_cfg_rate": 0.2,
            "inference_cfg_rate": 0.7,
            "reg_loss_type": "l1",
        }
    )
    decoder = CausalConditionalCFM(240, cfm_params, n_spks=1, spk_emb_dim=80, estimator=estimator)
    return CausalMaskedDiffWithDiT(
        input_size=80,
        output_size=80,
        spk_embed_dim=192,
        vocab_size=SPEECH_TOKENS,
        input_frame_rate=25,
        token_mel_ratio=TOKEN_MEL_RATIO,
        pre_lookahead_len=PRE_LOOKAHEAD,
        pre_lookahead_layer=PreLookaheadLayer(in_channels=80, channels=64, pre_lookahead_len=PRE_LOOKAHEAD),
        decoder=decoder,
    ).eval()


def _hift():
    """cosyvoice3.yaml's causal HiFT with 32 base channels (the official one: 512)."""
    from vllm_omni.model_executor.models.cosyvoice3.code2wav_core.hifigan import (
        CausalConvRNNF0Predictor,
        CausalHiFTGenerator,
    )

    return CausalHiFTGenerator(
        in_channels=80,
        base_channels=32,
        nb_harmonics=8,
        sampling_rate=24000,
        upsample_rates=[8, 5, 3],
        upsample_kernel_sizes=[16, 11, 7],
        istft_params={"n_fft": 16, "hop_len": 4},
        source_resblock_kernel_sizes=[7, 7, 11],
        source_resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        conv_pre_look_right=4,
        f0_predictor=CausalConvRNNF0Predictor(num_class=1, in_channels=80, cond_channels=32),
    ).eval()


def _flow_mel(flow, seed: int, *, finalize: bool) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    token = torch.randint(0, SPEECH_TOKENS, (1, 12), generator=generator)
    prompt_token = torch.randint(0, SPEECH_TOKENS, (1, 5), generator=generator)
    prompt_feat = torch.randn(1, 5 * TOKEN_MEL_RATIO, 80, generator=generator)
    embedding = torch.randn(1, 192, generator=generator)
    torch.manual_seed(seed)  # the CFM draws its starting noise from the global generator
    mel, _ = flow.inference(
        token,
        torch.tensor([token.shape[1]]),
        prompt_token,
        torch.tensor([prompt_token.shape[1]]),
        prompt_feat,
        torch.tensor([prompt_feat.shape[1]]),
        embedding,
        streaming=False,
        finalize=finalize,
        n_timesteps=2,
    )
    return mel


def test_reference_flow_runs_the_dit_on_cpu(cosyvoice3_reference):
    torch.manual_seed(0)
    flow = _flow()
    mel = _flow_mel(flow, seed=1, finalize=True)
    assert mel.shape == (1, 80, 12 * TOKEN_MEL_RATIO) and torch.isfinite(mel).all() and mel.abs().max() > 0
    assert torch.equal(mel, _flow_mel(flow, seed=1, finalize=True))  # a function of the seeded noise
    assert not torch.equal(mel, _flow_mel(flow, seed=2, finalize=True))
    # Not final: the last PRE_LOOKAHEAD tokens are only context for the ones before them.
    chunk = _flow_mel(flow, seed=1, finalize=False)
    assert chunk.shape == (1, 80, (12 - PRE_LOOKAHEAD) * TOKEN_MEL_RATIO)


def test_reference_causal_hift_turns_mel_into_a_waveform_on_cpu(cosyvoice3_reference):
    torch.manual_seed(0)
    hift = _hift()
    mel = torch.randn(1, 80, 24, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        speech, source, _ = hift.inference(speech_feat=mel, finalize=True)
    assert speech.shape == (1, 24 * SAMPLES_PER_MEL_FRAME) and torch.isfinite(speech).all()
    assert 0 < speech.abs().max() <= 0.99  # audio_limit
    assert source.shape[-1] == speech.shape[-1]


def test_reference_lm_head_has_the_cosyvoice3_vocabulary(cosyvoice3_reference):
    from vllm_omni.model_executor.models.cosyvoice3.cosyvoice3_talker import CosyVoice3LM

    head = CosyVoice3LM(
        llm_input_size=64, llm_output_size=64, speech_token_size=SPEECH_TOKENS, llm=torch.nn.Identity()
    )
    assert head.llm_decoder.out_features == SPEECH_TOKENS + 200 and head.llm_decoder.bias is None
    assert head.speech_embedding.num_embeddings == SPEECH_TOKENS + 200
    assert (head.sos, head.eos_token, head.task_id, head.fill_token) == tuple(
        SPEECH_TOKENS + i for i in range(4)
    )
    assert head.stop_token_ids == list(range(SPEECH_TOKENS, SPEECH_TOKENS + 200))
