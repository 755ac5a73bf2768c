"""A ``cosyvoice3.yaml`` for random-weight CosyVoice3 folders: the official file's model sections (same keys,
values and tags), its tokenizer and prompt-mel entries, and none of its training sections.

With `FULL_DIMENSIONS` the model sections describe Fun-CosyVoice3-0.5B (a 22-block, 1024-wide DiT; HiFT of
512 channels); `TINY_DIMENSIONS` narrows and shortens them for tests.
"""

from __future__ import annotations

from string import Template

FULL_DIMENSIONS = {
    "llm_size": 896,
    "lookahead_channels": 1024,
    "dit_dim": 1024,
    "dit_depth": 22,
    "dit_heads": 16,
    "dit_head_dim": 64,
    "hift_channels": 512,
    "f0_channels": 512,
}

TINY_DIMENSIONS = {
    "llm_size": 128,
    "lookahead_channels": 64,
    "dit_dim": 64,  # a multiple of 16: the DiT's convolutional position embedding has 16 groups
    "dit_depth": 2,
    "dit_heads": 2,
    "dit_head_dim": 32,
    "hift_channels": 64,
    "f0_channels": 64,
}

TEMPLATE = Template("""\
# CosyVoice3 model description (written by cosyvoice-studio make-model): the model sections of
# Fun-CosyVoice3-0.5B's cosyvoice3.yaml with this folder's dimensions.

sample_rate: 24000
llm_input_size: ${llm_size}
llm_output_size: ${llm_size}
spk_embed_dim: 192
qwen_pretrain_path: ''
token_frame_rate: 25
token_mel_ratio: 2

# streaming: tokens per chunk, and how many chunks to the left the flow decoder sees (<0: all)
chunk_size: 25
num_decoding_left_chunks: -1

llm: !new:cosyvoice.llm.llm.CosyVoice3LM
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    speech_token_size: 6561
    length_normalized_loss: True
    lsm_weight: 0
    mix_ratio: [5, 15]
    llm: !new:cosyvoice.llm.llm.Qwen2Encoder
        pretrain_path: !ref <qwen_pretrain_path>
    sampling: !name:cosyvoice.utils.common.ras_sampling
        top_p: 0.8
        top_k: 25
        win_size: 10
        tau_r: 0.1

flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithDiT
    input_size: 80
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: 6561
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
    pre_lookahead_layer: !new:cosyvoice.transformer.upsample_encoder.PreLookaheadLayer
        in_channels: 80
        channels: ${lookahead_channels}
        pre_lookahead_len: 3
    decoder: !new:cosyvoice.flow.flow_matching.CausalConditionalCFM
        in_channels: 240
        n_spks: 1
        spk_emb_dim: 80
        cfm_params: !new:omegaconf.DictConfig
            content:
                sigma_min: 1e-06
                solver: 'euler'
                t_scheduler: 'cosine'
                training_cfg_rate: 0.2
                inference_cfg_rate: 0.7
                reg_loss_type: 'l1'
        estimator: !new:cosyvoice.flow.DiT.dit.DiT
            dim: ${dit_dim}
            depth: ${dit_depth}
            heads: ${dit_heads}
            dim_head: ${dit_head_dim}
            ff_mult: 2
            mel_dim: 80
            mu_dim: 80
            spk_dim: 80
            out_channels: 80
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>

hift: !new:cosyvoice.hifigan.generator.CausalHiFTGenerator
    in_channels: 80
    base_channels: ${hift_channels}
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: [8, 5, 3]
    upsample_kernel_sizes: [16, 11, 7]
    istft_params:
        n_fft: 16
        hop_len: 4
    resblock_kernel_sizes: [3, 7, 11]
    resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    source_resblock_kernel_sizes: [7, 7, 11]
    source_resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    lrelu_slope: 0.1
    audio_limit: 0.99
    conv_pre_look_right: 4
    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.CausalConvRNNF0Predictor
        num_class: 1
        in_channels: 80
        cond_channels: ${f0_channels}

# the text tokenizer (CosyVoice3's special tokens) and the prompt's mel (up to the Nyquist frequency)
get_tokenizer: !name:cosyvoice.tokenizer.tokenizer.get_qwen_tokenizer
    token_path: !ref <qwen_pretrain_path>
    skip_special_tokens: True
    version: cosyvoice3
allowed_special: 'all'
feat_extractor: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1920
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: 480
    win_size: 1920
    fmin: 0
    fmax: null
    center: False
""")


def render_yaml(dimensions: dict) -> str:
    """The yaml text for a CosyVoice3 folder with these dimensions (`FULL_DIMENSIONS`: the official shapes)."""
    return TEMPLATE.substitute(dimensions)
