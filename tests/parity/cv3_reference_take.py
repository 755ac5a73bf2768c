"""The parity reference's CosyVoice3 model (vllm-omni 0.30.0's port of upstream's classes) built from a model
folder and run the way upstream runs a take.

`build_reference_model` reads the folder's ``cosyvoice3.yaml`` with our yaml reader but builds every section
from the reference's classes (`REFERENCE_CLASSES`), then loads the folder's ``flow.pt``, ``hift.pt`` and
``llm.pt`` into them strictly. The LM's body is transformers' stock ``Qwen2ForCausalLM`` under upstream's
``llm.model`` name (the reference's own body needs a running vLLM). Key names are the files' as they are, but
for ``hift.pt``'s optional ``generator.`` prefix, which upstream's official file carries and vllm-omni strips.

Where the reference departs from upstream (docs/COSYVOICE3.md), the helpers here restore upstream's behaviour
rather than change what is compared: the flow's starting noise is handed in (the reference draws a fresh
``torch.randn``; upstream reads a fixed table), the HiFT's fixed noise table is handed in (drawn at
construction in both, from different generators), its F0 predictor runs in float64 (upstream's; vllm-omni
runs it in float32 on the CPU), and greedy decoding reads the raw head logits and stops on any id >= 6561
(upstream's; vllm-omni folds the 200 stop logits into one).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from studio.model_layout import FLOW_FILE, HIFT_FILE, LLM_FILE
from studio.tts.loader.folder import read_folder_config

CFM_MODULE = "vllm_omni.model_executor.models.cosyvoice3.code2wav_core.cfm"
HIFT_PREFIX = "generator."


class StockQwen2Encoder(nn.Module):
    """Upstream's ``Qwen2Encoder`` layout: transformers' stock ``Qwen2ForCausalLM`` under ``.model``, built
    from the folder's CosyVoice-BlankEN config.json (the yaml's ``pretrain_path``)."""

    def __init__(self, pretrain_path: str) -> None:
        super().__init__()
        from transformers import Qwen2Config, Qwen2ForCausalLM

        self.model = Qwen2ForCausalLM(Qwen2Config.from_pretrained(pretrain_path))


def reference_classes() -> dict[str, Callable]:
    """Upstream's dotted names in cosyvoice3.yaml -> the reference's classes that build them."""
    from omegaconf import DictConfig
    from vllm_omni.model_executor.models.cosyvoice3.code2wav_core import hifigan
    from vllm_omni.model_executor.models.cosyvoice3.code2wav_core.cfm import (
        CausalConditionalCFM,
        CausalMaskedDiffWithDiT,
    )
    from vllm_omni.model_executor.models.cosyvoice3.code2wav_core.layers import PreLookaheadLayer
    from vllm_omni.model_executor.models.cosyvoice3.cosyvoice3_code2wav import _build_dit_estimator
    from vllm_omni.model_executor.models.cosyvoice3.cosyvoice3_talker import CosyVoice3LM

    def language_model(sampling=None, **kwargs):  # the reference's LM samples elsewhere: no `sampling`
        return CosyVoice3LM(**kwargs)

    return {
        "cosyvoice.llm.llm.CosyVoice3LM": language_model,
        "cosyvoice.llm.llm.Qwen2Encoder": StockQwen2Encoder,
        "cosyvoice.utils.common.ras_sampling": lambda **kwargs: None,
        "cosyvoice.flow.flow.CausalMaskedDiffWithDiT": CausalMaskedDiffWithDiT,
        "cosyvoice.transformer.upsample_encoder.PreLookaheadLayer": PreLookaheadLayer,
        "cosyvoice.flow.flow_matching.CausalConditionalCFM": CausalConditionalCFM,
        "cosyvoice.flow.DiT.dit.DiT": lambda **kwargs: _build_dit_estimator(kwargs),
        "omegaconf.DictConfig": DictConfig,
        "cosyvoice.hifigan.generator.CausalHiFTGenerator": hifigan.CausalHiFTGenerator,
        "cosyvoice.hifigan.f0_predictor.CausalConvRNNF0Predictor": hifigan.CausalConvRNNF0Predictor,
    }


@dataclass
class ReferenceModel:
    """The reference's three models holding one folder's weights, in float32, in eval mode."""

    llm: nn.Module
    flow: nn.Module
    hift: nn.Module


def build_reference_model(model_dir: Path) -> ReferenceModel:
    """The reference's LM, flow and HiFT built from ``model_dir``'s yaml, each loading its file strictly."""
    config = read_folder_config(model_dir)
    classes = reference_classes()
    parts = {}
    for section, file in (("llm", LLM_FILE), ("flow", FLOW_FILE), ("hift", HIFT_FILE)):
        module = config.build(section, classes)
        state = torch.load(model_dir / file, map_location="cpu", weights_only=True)
        if section == "hift":
            state = {key.removeprefix(HIFT_PREFIX): value for key, value in state.items()}
        module.load_state_dict(state, strict=True)
        parts[section] = module.float().eval()
    _predict_f0_in_float64(parts["hift"].f0_predictor)
    return ReferenceModel(**parts)


def _predict_f0_in_float64(predictor: nn.Module) -> None:
    """Upstream's `CausalHiFTGenerator.inference` runs its F0 predictor in float64 and casts F0 back."""
    predictor.double()
    forward = predictor.forward
    predictor.forward = lambda mel, finalize=True: forward(mel.double(), finalize=finalize).float()


def set_hift_noise(hift: nn.Module, noise: torch.Tensor) -> None:
    """Give the reference's HiFT this fixed noise table [1, samples, harmonics] (it reads it from sample 0
    of a take, wrapping past its end: the caller makes it long enough)."""
    hift.m_source.l_sin_gen.sine_waves = noise.detach().float().clone()


class _TorchWithGivenNoise:
    """The ``torch`` the reference's CFM module sees: `randn` returns the given noise, the rest is torch's."""

    def __init__(self, noise: torch.Tensor) -> None:
        self._noise = noise
        self.draws: list[tuple[int, ...]] = []

    def __getattr__(self, name: str):
        return getattr(torch, name)

    def randn(self, size, *, device=None, dtype=None):
        self.draws.append(tuple(size))
        if tuple(size) != tuple(self._noise.shape):
            raise AssertionError(f"the reference drew noise {tuple(size)}, given {tuple(self._noise.shape)}")
        return self._noise.to(device=device, dtype=dtype).clone()


@contextlib.contextmanager
def flow_noise(noise: torch.Tensor) -> Iterator[_TorchWithGivenNoise]:
    """While open, the reference's CFM starts from ``noise`` [1, 80, frames] instead of a fresh draw."""
    import importlib

    module = importlib.import_module(CFM_MODULE)
    given = _TorchWithGivenNoise(noise)
    module.torch = given
    try:
        yield given
    finally:
        module.torch = torch


def offline_mel(
    flow: nn.Module,
    token: torch.Tensor,
    prompt_token: torch.Tensor,
    prompt_feat: torch.Tensor,
    embedding: torch.Tensor,
    noise: torch.Tensor,
    n_timesteps: int = 10,
) -> torch.Tensor:
    """The reference flow's offline call (upstream's ``finalize=True``) from the given starting noise."""

    def length(tensor: torch.Tensor) -> torch.Tensor:
        return torch.tensor([tensor.shape[1]], dtype=torch.int32)

    with flow_noise(noise) as given:
        mel, _ = flow.inference(
            token=token,
            token_len=length(token),
            prompt_token=prompt_token,
            prompt_token_len=length(prompt_token),
            prompt_feat=prompt_feat,
            prompt_feat_len=length(prompt_feat),
            embedding=embedding,
            streaming=False,
            finalize=True,
            n_timesteps=n_timesteps,
        )
    if len(given.draws) != 1:
        raise AssertionError(f"the reference's flow drew noise {len(given.draws)} times, expected once")
    return mel


def streamed_hift(hift: nn.Module, mel_chunks: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Upstream's streamed vocoder: at each chunk HiFT re-runs over all mel so far (``finalize`` only at the
    last) and the samples after those already returned are kept; one waveform piece per chunk."""
    pieces, returned = [], 0
    for index in range(len(mel_chunks)):
        finalize = index == len(mel_chunks) - 1
        speech, _, _ = hift.inference(
            speech_feat=torch.cat(list(mel_chunks[: index + 1]), dim=2), finalize=finalize
        )
        pieces.append(speech[:, returned:])
        returned = speech.shape[1]
    return pieces


@torch.inference_mode()
def prompt_embeds(
    llm: nn.Module, text_ids: Sequence[int], prompt_text_ids: Sequence[int], prompt_speech: Sequence[int]
) -> torch.Tensor:
    """The reference's own prompt layout, `CosyVoice3Model.embed_input_ids` on vLLM's placeholder ids.

    vLLM hands it ``[sos, task, audio * len(prompt speech), prompt text + text]`` with the first block marked
    multimodal and the prompt speech embedded by the speech embedding; it reorders them into
    ``[sos, prompt text + text, task, prompt speech]``. Returns [1, L, width].
    """
    from vllm_omni.model_executor.models.cosyvoice3.cosyvoice3 import CosyVoice3Model

    text = [*prompt_text_ids, *text_ids]
    placeholders = 2 + len(prompt_speech)
    input_ids = torch.tensor([1] * placeholders + text)
    is_multimodal = torch.tensor([True] * placeholders + [False] * len(text))
    body = SimpleNamespace(model=llm.llm.model.model)  # vLLM's encoder holds the bare Qwen2Model
    stage = SimpleNamespace(
        model_stage="cosyvoice3_talker",
        model=SimpleNamespace(
            llm=body, speech_embedding=llm.speech_embedding, sos=llm.sos, task_id=llm.task_id
        ),
    )
    speech = llm.speech_embedding(torch.tensor(list(prompt_speech), dtype=torch.long))
    return CosyVoice3Model.embed_input_ids(stage, input_ids, [speech], is_multimodal).unsqueeze(0)


@torch.inference_mode()
def greedy_tokens(
    llm: nn.Module, embeds: torch.Tensor, *, min_len: int, max_len: int, ignore_stop: bool
) -> list[int]:
    """Upstream's decoding with top_k=1 on the reference head and the stock Qwen2 body (the whole sequence
    recomputed each step, no cache): the highest raw logit; any of the 200 ids from 6561 stops once
    ``min_len`` tokens are out (below it, or with ``ignore_stop``, the best speech id is taken instead)."""
    speech_tokens = llm.speech_token_size
    tokens: list[int] = []
    for step in range(max_len):
        hidden = llm.llm.model.model(inputs_embeds=embeds).last_hidden_state[:, -1]
        logits = llm.llm_decoder(hidden)[0]
        token = int(logits.argmax())
        if token >= speech_tokens:
            if not ignore_stop and step >= min_len:
                break
            token = int(logits[:speech_tokens].argmax())
        tokens.append(token)
        embeds = torch.cat([embeds, llm.speech_embedding.weight[token].reshape(1, 1, -1)], dim=1)
    return tokens
