"""The CosyVoice2 speech-token LM as a vLLM model class (vLLM 0.22 - 0.33).

A Qwen2 backbone fed with prompt embeddings; the input embedding table is the LM's
`speech_embedding` (so decoded speech tokens are fed back correctly) and the output head is
`llm_decoder` with its bias, over the 6564-entry speech vocabulary. vLLM loads this module only in
its own processes, and the studio's process when it starts an engine (`plugin.register(in_process=True)`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
from vllm.model_executor.models.qwen2 import Qwen2Model
from vllm.model_executor.models.utils import AutoWeightsLoader, maybe_prefix

from studio.tts.llm.vllm.plugin import SERVING_COSYVOICE


class CosyVoice2StudioForCausalLM(nn.Module):
    """Qwen2 backbone + biased speech-token head; takes prompt embeddings, decodes speech tokens."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        SERVING_COSYVOICE.set()  # this process serves our model: vLLM's sampler warm-up skips Triton (plugin)
        hf_config = vllm_config.model_config.hf_config
        config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
        self.config = config
        self.quant_config = vllm_config.quant_config
        self.model = Qwen2Model(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
        # The exported head is `llm_decoder`; its bias matters (upstream CosyVoice2 trains with it).
        self.lm_head = ParallelLMHead(
            config.vocab_size,
            config.hidden_size,
            bias=True,
            quant_config=self.quant_config,
            prefix=maybe_prefix(prefix, "lm_head"),
        )
        self.logits_processor = LogitsProcessor(config.vocab_size)
        self.make_empty_intermediate_tensors = self.model.make_empty_intermediate_tensors

    # vLLM >= 0.11 asks for `embed_input_ids`; older releases for `get_input_embeddings`.
    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_input_ids(input_ids)

    def get_input_embeddings(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_input_ids(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors=None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ):
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor, *_legacy_sampling_metadata) -> torch.Tensor | None:
        """Speech-token logits; vLLM 0.22+ pass only the hidden states (older ones also metadata)."""
        return self.logits_processor(self.lm_head, hidden_states, embedding_bias=self.lm_head.bias)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return AutoWeightsLoader(self).load_weights(weights)
