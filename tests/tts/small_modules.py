"""Keyword arguments for small flow and HiFT modules, shared by the behaviour and the parity tests.

They are the official ``cosyvoice2.yaml`` arguments with the widths the reference lets shrink made as small
as the tiny model's (yaml_template.TINY_DIMENSIONS); everything the reference fixes (512-wide encoder, 80
mel bins, HiFT rates) stays official.
"""

from __future__ import annotations

import torch

HIFT_KWARGS = dict(
    in_channels=80,
    base_channels=64,
    nb_harmonics=8,
    sampling_rate=24000,
    nsf_alpha=0.1,
    nsf_sigma=0.003,
    nsf_voiced_threshold=10,
    upsample_rates=[8, 5, 3],
    upsample_kernel_sizes=[16, 11, 7],
    istft_params={"n_fft": 16, "hop_len": 4},
    resblock_kernel_sizes=[3, 7, 11],
    resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    source_resblock_kernel_sizes=[7, 7, 11],
    source_resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    lrelu_slope=0.1,
    audio_limit=0.99,
)
F0_KWARGS = dict(num_class=1, in_channels=80, cond_channels=64)
ENCODER_KWARGS = dict(
    output_size=512,
    attention_heads=8,
    linear_units=64,
    num_blocks=1,
    dropout_rate=0.1,
    positional_dropout_rate=0.1,
    attention_dropout_rate=0.1,
    normalize_before=True,
    input_layer="linear",
    pos_enc_layer_type="rel_pos_espnet",
    selfattention_layer_type="rel_selfattn",
    input_size=512,
    use_cnn_module=False,
    macaron_style=False,
    static_chunk_size=25,
)
CFM_PARAMS = dict(
    sigma_min=1e-06,
    solver="euler",
    t_scheduler="cosine",
    training_cfg_rate=0.2,
    inference_cfg_rate=0.7,
    reg_loss_type="l1",
)
ESTIMATOR_KWARGS = dict(
    in_channels=320,
    out_channels=80,
    channels=[64],
    dropout=0.0,
    attention_head_dim=32,
    n_blocks=1,
    num_mid_blocks=1,
    num_heads=2,
    act_fn="gelu",
    static_chunk_size=50,
    num_decoding_left_chunks=-1,
)
FLOW_KWARGS = dict(
    input_size=512,
    output_size=80,
    spk_embed_dim=192,
    output_type="mel",
    vocab_size=6561,
    input_frame_rate=25,
    only_mask_loss=True,
    token_mel_ratio=2,
    pre_lookahead_len=3,
)


def flow_inputs(tokens: int, prompt_tokens: int = 6, seed: int = 2) -> dict:
    """Random keyword arguments for `CausalMaskedDiffWithXvec.inference` (one utterance, a prompt)."""
    g = torch.Generator().manual_seed(seed)
    return dict(
        token=torch.randint(0, 6561, (1, tokens), generator=g),
        token_len=torch.tensor([tokens]),
        prompt_token=torch.randint(0, 6561, (1, prompt_tokens), generator=g),
        prompt_token_len=torch.tensor([prompt_tokens]),
        prompt_feat=torch.randn(1, 2 * prompt_tokens, 80, generator=g),
        prompt_feat_len=torch.tensor([2 * prompt_tokens]),
        embedding=torch.randn(1, 192, generator=g),
    )
