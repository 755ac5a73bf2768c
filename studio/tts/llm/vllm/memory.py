"""What vLLM's engine needs on the GPU for our LM, and the KV cache it gets from the studio's VRAM budget.

vLLM sizes its KV cache by profiling: it watches the card's free memory while it loads and runs a test
step, and takes what its ``gpu_memory_utilization`` leaves. The studio loads its own weights at that very
time (beside vLLM's start), so the card's free memory says nothing about vLLM; and the profile of its
CUDA graphs' memory alone took 11 s on the H200. So the budget names the KV cache's bytes
(``kv_cache_memory_bytes``: vLLM then skips both), never more than every sequence at its full length
needs. No torch, no vllm here: arithmetic on the LM's config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from studio.tts.device.vram_budget import GIB, VramBudgetError
from studio.vllm_options import with_defaults

# vLLM's engine beside its weights and KV cache: its CUDA context, cuBLAS workspaces, the activations of
# its profiling step (max_num_batched_tokens) and its CUDA graphs.
RUNTIME_BYTES = int(1.25 * GIB)
# vLLM's compile cache is keyed by its cache config, the KV bytes included: a share that follows the
# card's free memory is rounded down to this grain, so a start with a little more or less free memory
# finds the compiled LM of the last one (a miss costs ~17 s of torch.compile on the H200).
KV_GRAIN = 512 * 2**20


@dataclass(frozen=True)
class VllmMemory:
    """Bytes vLLM's engine holds for our LM: weights, KV cache per token and for every sequence."""

    weights: int
    kv_per_token: int
    max_model_len: int
    kv_need: int  # max_num_seqs sequences of max_model_len tokens

    @property
    def need(self) -> int:
        """The most vLLM can use: more memory than this would only hold KV blocks nobody fills."""
        return self.weights + RUNTIME_BYTES + self.kv_need

    def kv_cache_bytes(self, share: int) -> int:
        """The KV cache vLLM gets from its ``share`` of the budget (rounded down to `KV_GRAIN`); a
        VramBudgetError when that cannot hold one sequence of ``max_model_len`` tokens."""
        kv = min(self.kv_need, share - self.weights - RUNTIME_BYTES)
        if kv < self.kv_need and kv >= KV_GRAIN:
            kv -= kv % KV_GRAIN
        one = self.kv_per_token * self.max_model_len
        if kv < one:
            raise VramBudgetError(
                f"vLLM's share of the VRAM budget ({share / GIB:.1f} GiB) cannot hold its weights "
                f"({self.weights / GIB:.1f} GiB), its runtime ({RUNTIME_BYTES / GIB:.2f} GiB) and one "
                f"sequence of {self.max_model_len} tokens ({one / GIB:.2f} GiB): give the studio a larger "
                "VRAM budget or lower vLLM's max model length"
            )
        return int(kv)


def vllm_memory(skeleton: Any, **vllm_options: Any) -> VllmMemory:
    """`VllmMemory` of the exported LM for these vLLM options; ``skeleton`` is the Qwen2LM or CosyVoice3LM
    (meta is fine).

    The export holds the transformer, its final norm, and the speech embedding and head (a small vocab):
    see ``export.py``. vLLM runs it, and keeps its KV cache, in float32 only when asked to."""
    options = with_defaults(vllm_options)
    size = 4 if str(options["dtype"]).removeprefix("torch.") == "float32" else 2
    config = skeleton.llm.model.config
    heads = int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    layers = skeleton.llm.model.model.layers
    norm = skeleton.llm.model.model.norm
    exported = [
        *layers.parameters(),
        *norm.parameters(),
        *skeleton.speech_embedding.parameters(),
        *skeleton.llm_decoder.parameters(),
    ]
    weights = sum(p.numel() for p in exported) * size
    kv_per_token = 2 * int(config.num_hidden_layers) * kv_heads * head_dim * size
    max_len = int(options["max_model_len"])
    return VllmMemory(weights, kv_per_token, max_len, int(options["max_num_seqs"]) * max_len * kv_per_token)
