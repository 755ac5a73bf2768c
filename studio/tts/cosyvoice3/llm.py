"""The text-to-speech-token language model of CosyVoice3 (upstream's `CosyVoice3LM`): modules only.

Against CosyVoice2's `Qwen2LM` (studio/tts/llm/model.py) it drops `llm_embedding`: sos, eos, task and fill
are rows 6561..6564 of `speech_embedding`, which holds the 6561 speech tokens and 200 special ids; the
output layer `llm_decoder` has no bias and scores all 6761 ids, and any id at or above 6561 ends a take.
Submodule names follow upstream (`llm.model` is a transformers `Qwen2ForCausalLM`, so `llm.model.model.*`
loads), so the official `llm.pt` loads with `strict=True`. `llm` and `speech_logp` behave as `Qwen2LM`'s,
so `studio.tts.llm.torch_backend.TorchTokenBackend` decodes with either model; `drop_backbone`,
`backbone_bytes` and `length_bounds` are Qwen2LM's own. vLLM serves the transformer and the head as its stock
`Qwen2ForCausalLM` (`studio.tts.llm.vllm.export`). Upstream drops a silent or breath token that follows
five others in a row: `silent_tokens` and `SilentRunLimiter`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn

from studio.tts.llm.model import Qwen2Encoder, Qwen2LM, as_token_ids
from studio.tts.llm.sampling import RasSampling

SPECIAL_TOKENS = 200  # ids after the speech vocabulary, in `speech_embedding` and `llm_decoder`
SOS_OFFSET, EOS_OFFSET, TASK_ID_OFFSET, FILL_OFFSET = (
    0,
    1,
    2,
    3,
)  # special ids, counted from speech_token_size
# The FSQ codes upstream calls silent or breath tokens (`CosyVoice3Model.silent_tokens`), and the longest run
# of them it keeps (`llm_job`'s `max_silent_token_num`).
SILENT_TOKENS = (1, 2, 28, 29, 55, 248, 494, 2241, 2242, 2322, 2323)
MAX_SILENT_RUN = 5


class SilentRunLimiter:
    """Shortens runs of silent speech tokens in a take's token stream, as upstream's `llm_job` does.

    `keep(token)` is asked once per sampled token, in order: a run of consecutive ids from `silent_tokens`
    keeps its first `max_run` tokens and drops the rest; any other id ends the run (and is kept). The LM
    itself still sees every token it sampled: only what reaches the flow is filtered.
    """

    def __init__(self, silent_tokens: Iterable[int], max_run: int = MAX_SILENT_RUN) -> None:
        if max_run < 0:
            raise ValueError(f"SilentRunLimiter: max_run must be >= 0, got {max_run}")
        self.silent_tokens = frozenset(int(t) for t in silent_tokens)
        self.max_run = max_run
        self.run = 0  # silent tokens in a row so far, the dropped ones included

    def keep(self, token: int) -> bool:
        """Whether `token`, the next sampled one, goes on to the flow."""
        if token not in self.silent_tokens:
            self.run = 0
            return True
        self.run += 1
        return self.run <= self.max_run


class CosyVoice3LM(nn.Module):
    """Upstream CosyVoice3's LM: a Qwen2 backbone, one embedding for speech and special ids, a bias-less head.

    Takes the official yaml's keyword arguments; `sampling` is the yaml's RAS. Training-only arguments
    (`length_normalized_loss`, `lsm_weight`, `mix_ratio`) are accepted and ignored.
    """

    #: Speech ids whose runs the pipeline keeps to `MAX_SILENT_RUN` (`SilentRunLimiter`).
    silent_tokens: tuple[int, ...] = SILENT_TOKENS

    def __init__(
        self,
        llm_input_size: int,
        llm_output_size: int,
        speech_token_size: int,
        llm: Qwen2Encoder,
        sampling: RasSampling | None = None,
        length_normalized_loss: bool = True,
        lsm_weight: float = 0.0,
        mix_ratio: Sequence[int] = (5, 15),
    ) -> None:
        super().__init__()
        if llm.hidden_size != llm_input_size or llm.hidden_size != llm_output_size:
            raise ValueError(
                f"CosyVoice3LM: llm_input_size={llm_input_size} / llm_output_size={llm_output_size} do not "
                f"match the backbone's hidden_size={llm.hidden_size}"
            )
        if speech_token_size < 1:
            raise ValueError(f"CosyVoice3LM: speech_token_size must be >= 1, got {speech_token_size}")
        self.llm_input_size = llm_input_size
        self.llm_output_size = llm_output_size
        self.speech_token_size = speech_token_size
        self.llm = llm
        self.llm_decoder = nn.Linear(llm_output_size, speech_token_size + SPECIAL_TOKENS, bias=False)
        self.speech_embedding = nn.Embedding(speech_token_size + SPECIAL_TOKENS, llm_input_size)
        self.sampling = sampling if sampling is not None else RasSampling()

    @property
    def sos(self) -> int:
        return self.speech_token_size + SOS_OFFSET

    @property
    def eos_token(self) -> int:
        return self.speech_token_size + EOS_OFFSET

    @property
    def task_id(self) -> int:
        return self.speech_token_size + TASK_ID_OFFSET

    @property
    def fill_token(self) -> int:
        return self.speech_token_size + FILL_OFFSET

    @property
    def stop_token_ids(self) -> list[int]:
        """Every special id: upstream ends a take on any sampled id at or above `speech_token_size`."""
        return list(range(self.speech_token_size, self.speech_token_size + SPECIAL_TOKENS))

    length_bounds = staticmethod(Qwen2LM.length_bounds)
    # The transformer sits where Qwen2LM's does (`llm.model.model.layers`): the same two methods serve both.
    backbone_bytes = Qwen2LM.backbone_bytes
    drop_backbone = Qwen2LM.drop_backbone

    def materialize_buffers(self) -> None:
        """Recompute the backbone's rotary frequencies on the weights' device (after building on `meta`)."""
        self.llm.materialize_buffers()

    def build_prompt_embeds(
        self,
        text: torch.Tensor | Sequence[int],
        prompt_text: torch.Tensor | Sequence[int] = (),
        prompt_speech_token: torch.Tensor | Sequence[int] = (),
    ) -> torch.Tensor:
        """`[sos] + embed(prompt_text + text) + [task] + speech_embedding(prompt_speech_token)` -> [1, L, D].

        sos and task are rows of `speech_embedding`; the text goes through the backbone's token embedding.
        """
        weight = self.speech_embedding.weight
        text_ids = torch.cat([as_token_ids(prompt_text, weight.device), as_token_ids(text, weight.device)])
        if text_ids.numel() == 0:
            raise ValueError("CosyVoice3LM needs at least one text token")
        parts = [
            weight[self.sos : self.sos + 1],
            self.llm.embed_text(text_ids),
            weight[self.task_id : self.task_id + 1],
            self.embed_speech_tokens(prompt_speech_token),
        ]
        return torch.cat([p.to(weight.dtype) for p in parts], dim=0).unsqueeze(0)

    def embed_speech_tokens(self, tokens: torch.Tensor | Sequence[int]) -> torch.Tensor:
        """Speech token ids (each in [0, speech_token_size)) -> their input embeddings [N, D]."""
        ids = as_token_ids(tokens, self.speech_embedding.weight.device)
        if isinstance(tokens, torch.Tensor):
            bounds = (int(ids.min()), int(ids.max())) if ids.numel() else (0, 0)
        else:  # checked on the host: reading a GPU value back would wait for every queued kernel
            values = [int(i) for i in tokens]
            bounds = (min(values, default=0), max(values, default=0))
        if bounds[0] < 0 or bounds[1] >= self.speech_token_size:
            raise ValueError(
                f"speech tokens must be in [0, {self.speech_token_size}), got values in [{bounds[0]}, {bounds[1]}]"
            )
        return self.speech_embedding(ids)

    def new_cache(self) -> Any:
        """An empty KV cache for `forward`."""
        return self.llm.new_cache()

    def forward(self, inputs_embeds: torch.Tensor, cache: Any) -> torch.Tensor:
        """Run [1, L, D] new positions through the backbone, extending `cache` (from `new_cache`); return the
        raw next-token logits [1, speech_token_size + 200] in float32."""
        if (
            inputs_embeds.dim() != 3
            or inputs_embeds.shape[0] != 1
            or inputs_embeds.shape[2] != self.llm_input_size
        ):
            raise ValueError(
                f"CosyVoice3LM.forward needs inputs_embeds [1, L, {self.llm_input_size}], "
                f"got {tuple(inputs_embeds.shape)}"
            )
        return self.llm_decoder(self.llm.step(inputs_embeds, cache)).float()

    def speech_logp(self, hidden: torch.Tensor) -> torch.Tensor:
        """Log-probabilities over speech tokens + special ids (float32) from last hidden states [B, D]."""
        return self.llm_decoder(hidden).float().log_softmax(dim=-1)
