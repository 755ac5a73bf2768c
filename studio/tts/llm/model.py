"""The text-to-speech-token language model (upstream CosyVoice2's Qwen2LM): modules only.

`Qwen2LM` reproduces upstream's submodule names (`llm_embedding`, `llm.model`, `llm_decoder`,
`speech_embedding`) so the official `llm.pt` loads with `strict=True`. The token backends that decode with
it live beside it (`torch_backend.py`, `vllm/backend.py`), both implementing `backend.TokenBackend`.

Loading on the meta device: build `Qwen2LM` under `torch.device("meta")`, `load_state_dict(sd, strict=True,
assign=True)`, move it to its device, then call `materialize_buffers()` (the rotary frequencies are not in
the state dict and would stay on `meta`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from studio.tts.device.transfer import to_device
from studio.tts.errors import MissingModelFileError, ModelFolderError
from studio.tts.llm.sampling import RasSampling

if TYPE_CHECKING:
    from transformers import Qwen2Config

BACKBONE_LAYERS = "llm.model.model.layers."  # the transformer layers' keys in llm.pt (`drop_backbone`)


class _CudnnAttentionOff:
    """Keep cuDNN attention off while any decode step runs: it builds a new graph for every KV length.

    Measured on an H200 (full-size LM, bf16): 76 ms per token with cuDNN attention, 22 ms without it. The
    switch is process-wide, so it is reference-counted across threads and restored when no step runs.
    """

    _lock = threading.Lock()
    _users = 0
    _saved = True

    def __enter__(self) -> None:
        with self._lock:
            if _CudnnAttentionOff._users == 0:
                _CudnnAttentionOff._saved = torch.backends.cuda.cudnn_sdp_enabled()
                torch.backends.cuda.enable_cudnn_sdp(False)
            _CudnnAttentionOff._users += 1

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            _CudnnAttentionOff._users -= 1
            if _CudnnAttentionOff._users == 0:
                torch.backends.cuda.enable_cudnn_sdp(_CudnnAttentionOff._saved)


SOS_EOS_INDEX = 0  # rows of `llm_embedding`, as upstream
TASK_ID_INDEX = 1


def _load_qwen2_config(pretrain_path: str | Path) -> Qwen2Config:
    """The backbone's config.json, with errors that name that file (not the yaml that points to it)."""
    from transformers import Qwen2Config

    config_file = Path(pretrain_path) / "config.json"
    if not config_file.is_file():
        raise MissingModelFileError(config_file, "missing: expected the CosyVoice-BlankEN Qwen2 config.json")
    try:
        return Qwen2Config.from_json_file(str(config_file))
    except (ValueError, OSError) as error:
        raise ModelFolderError(config_file, f"is not a valid Qwen2 config.json: {error}") from error


class Qwen2Encoder(nn.Module):
    """The Qwen2 backbone: `.model` is a transformers `Qwen2ForCausalLM` built from config only (no weights).

    `pretrain_path` is the yaml's key (the BlankEN folder; only its config.json is read); `config` may be
    given instead. All weights come from `llm.pt`.
    """

    def __init__(self, pretrain_path: str | Path | None = None, config: Qwen2Config | None = None) -> None:
        super().__init__()
        from transformers import Qwen2ForCausalLM

        if config is None:
            if pretrain_path is None:
                raise ValueError(
                    "Qwen2Encoder needs pretrain_path (a folder with config.json) or a Qwen2Config"
                )
            config = _load_qwen2_config(pretrain_path)
        self.model = Qwen2ForCausalLM(config)

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    def embed_text(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.model.model.embed_tokens(token_ids)

    def new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def step(self, inputs_embeds: torch.Tensor, cache: Any) -> torch.Tensor:
        """Run [1, L, D] new positions through the backbone, extending `cache`; return the last hidden [1, D]."""
        if not len(self.model.model.layers):
            raise RuntimeError("the LM's layers were freed (vLLM runs them): the PyTorch backend cannot step")
        if inputs_embeds.is_cuda:
            with _CudnnAttentionOff():
                out = self.model.model(inputs_embeds=inputs_embeds, past_key_values=cache, use_cache=True)
        else:
            out = self.model.model(inputs_embeds=inputs_embeds, past_key_values=cache, use_cache=True)
        return out.last_hidden_state[:, -1]

    def materialize_buffers(self) -> None:
        """Recompute the rotary frequencies on the weights' device (needed after building on `meta`)."""
        from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

        backbone = self.model.model
        with torch.device(backbone.embed_tokens.weight.device):
            backbone.rotary_emb = Qwen2RotaryEmbedding(config=self.model.config)


class Qwen2LM(nn.Module):
    """Upstream CosyVoice2's LM: Qwen2 backbone + sos/task embeddings + speech-token embedding and head.

    Takes the official yaml's keyword arguments; `sampling` is the yaml's default `RasSampling`.
    Training-only arguments (`length_normalized_loss`, `lsm_weight`, `mix_ratio`) are accepted and ignored.
    """

    #: Speech ids whose long runs the pipeline shortens (`SilentRunLimiter`): none for CosyVoice2.
    silent_tokens: tuple[int, ...] = ()

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
                f"Qwen2LM: llm_input_size={llm_input_size} / llm_output_size={llm_output_size} do not match "
                f"the backbone's hidden_size={llm.hidden_size}"
            )
        self.llm_input_size = llm_input_size
        self.llm_output_size = llm_output_size
        self.speech_token_size = speech_token_size
        self.llm = llm
        self.llm_embedding = nn.Embedding(2, llm_input_size)
        self.llm_decoder = nn.Linear(llm_output_size, speech_token_size + 3)
        self.speech_embedding = nn.Embedding(speech_token_size + 3, llm_input_size)
        self.sampling = sampling if sampling is not None else RasSampling()

    @property
    def stop_token_ids(self) -> list[int]:
        """The three ids after the speech vocabulary; any of them ends decoding."""
        return [self.speech_token_size + i for i in range(3)]

    def materialize_buffers(self) -> None:
        self.llm.materialize_buffers()

    @torch.inference_mode()
    def backbone_bytes(self) -> int:
        """Bytes of the transformer layers (what `drop_backbone` frees)."""
        layers = self.llm.model.model.layers
        return sum(p.numel() * p.element_size() for p in layers.parameters())

    def drop_backbone(self) -> int:
        """Free the transformer layers when another engine (vLLM) runs them; the embeddings and the speech
        head stay (prompt embeddings are built here). Returns the bytes freed; `step` refuses afterwards."""
        freed = self.backbone_bytes()
        self.llm.model.model.layers = nn.ModuleList()
        return freed

    def build_prompt_embeds(
        self,
        text: torch.Tensor | Sequence[int],
        prompt_text: torch.Tensor | Sequence[int] = (),
        prompt_speech_token: torch.Tensor | Sequence[int] = (),
    ) -> torch.Tensor:
        """`[sos] + embed(prompt_text + text) + [task] + speech_embedding(prompt_speech_token)` -> [1, L, D]."""
        weight = self.speech_embedding.weight
        text_ids = torch.cat([as_token_ids(prompt_text, weight.device), as_token_ids(text, weight.device)])
        speech_ids = as_token_ids(prompt_speech_token, weight.device)
        if isinstance(prompt_speech_token, torch.Tensor):
            largest = int(speech_ids.max()) if speech_ids.numel() else -1
        else:  # checked on the host: reading a GPU value back would wait for every queued kernel
            largest = max((int(i) for i in prompt_speech_token), default=-1)
        if largest >= self.speech_token_size:
            raise ValueError(f"prompt speech tokens must be < {self.speech_token_size}")
        parts = [
            self.llm_embedding.weight[SOS_EOS_INDEX : SOS_EOS_INDEX + 1],
            self.llm.embed_text(text_ids),
            self.llm_embedding.weight[TASK_ID_INDEX : TASK_ID_INDEX + 1],
            self.speech_embedding(speech_ids),
        ]
        return torch.cat([p.to(weight.dtype) for p in parts], dim=0).unsqueeze(0)

    @staticmethod
    def length_bounds(
        text_len: int,
        prompt_text_len: int,
        min_token_text_ratio: float = 2,
        max_token_text_ratio: float = 20,
    ) -> tuple[int, int]:
        """Upstream's bounds on the number of speech tokens: 2x .. 20x the target text tokens.

        `text_len` counts ALL text tokens fed to the LM (prompt text + target text), as upstream's
        `text_len` after it adds the prompt; the bounds use `text_len - prompt_text_len`.
        """
        target = int(text_len) - int(prompt_text_len)
        if target < 0:
            raise ValueError(f"text_len ({text_len}) must include prompt_text_len ({prompt_text_len})")
        return int(target * min_token_text_ratio), int(target * max_token_text_ratio)

    def speech_logp(self, hidden: torch.Tensor) -> torch.Tensor:
        """Log-probabilities over speech tokens + stop ids (float32) from last hidden states [B, D]."""
        return self.llm_decoder(hidden).float().log_softmax(dim=-1)


def as_token_ids(ids: torch.Tensor | Sequence[int], device: torch.device) -> torch.Tensor:
    """Token ids as a flat long tensor on `device` (a host list is copied without waiting for the GPU)."""
    if isinstance(ids, torch.Tensor):
        return ids.reshape(-1).to(device=device, dtype=torch.long)
    return to_device(torch.as_tensor(ids, dtype=torch.long).reshape(-1), device)  # no wait for the GPU
