"""The parts of a model folder loaded into our own modules, strictly: the LM, the flow, HiFT and the
prompt frontend, and the CUDA graphs attached beside the models."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from studio import envs
from studio.model_layout import (
    BLANKEN_DIR,
    CAMPPLUS_FILE,
    FLOW_FILE,
    HIFT_FILE,
    LLM_FILE,
    ModelFamily,
    family_of,
)
from studio.tts.config import ModelConfig
from studio.tts.device.skip_init import no_random_init
from studio.tts.llm.model import BACKBONE_LAYERS
from studio.tts.loader.folder import (
    build_section,
    check_json,
    load_strict,
    open_part,
    read_mapped,
    read_state_dict,
    tokenizer_special_tokens,
)


@dataclass
class ModelParts:
    """Everything a model folder provides, loaded and on its device; ``family`` says which models these are
    (CosyVoice2: Qwen2LM, CausalMaskedDiffWithXvec, HiFTGenerator; CosyVoice3: CosyVoice3LM,
    CausalMaskedDiffWithDiT, CausalHiFTGenerator)."""

    model_dir: Path
    config: ModelConfig
    llm: Any  # studio.tts.llm.model.Qwen2LM | studio.tts.cosyvoice3.llm.CosyVoice3LM
    flow: Any  # studio.tts.flow.flow.CausalMaskedDiffWithXvec | studio.tts.cosyvoice3.flow.CausalMaskedDiffWithDiT
    hift: Any  # studio.tts.hift.model.HiFTGenerator | studio.tts.cosyvoice3.hift.CausalHiFTGenerator
    frontend: Any  # studio.tts.frontend.prompt.Frontend (tokenizer, campplus, speech tokenizer)
    device: torch.device
    fp16: bool
    family: ModelFamily
    spk2info: dict = field(default_factory=dict)


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def llm_skeleton(model_dir: Path, config: ModelConfig) -> torch.nn.Module:
    """The LM (Qwen2LM or CosyVoice3LM) built on the meta device: its config and shapes, no memory and no
    weights."""
    with torch.device("meta"):
        return build_section(config, "llm", model_dir / LLM_FILE)


def load_llm(
    model_dir: Path, config: ModelConfig, device: torch.device, backbone: bool = True
) -> torch.nn.Module:
    """Build the LM on the meta device (no memory for random weights), then take llm.pt's tensors.

    ``backbone=False`` (vLLM runs the transformer) leaves its layers out: only the embeddings and the
    speech head are read (from a memory map) and moved to the device."""
    path = model_dir / LLM_FILE
    llm = llm_skeleton(model_dir, config)
    if backbone:
        state = read_state_dict(path, device)
    else:
        llm.drop_backbone()
        state = {k: v for k, v in read_mapped(path).items() if not k.startswith(BACKBONE_LAYERS)}
    load_strict(llm, state, path, assign=True)
    llm.float()
    llm.materialize_buffers()
    return llm.to(device).eval()


def load_flow(model_dir: Path, config: ModelConfig, device: torch.device) -> torch.nn.Module:
    """The flow-matching decoder from flow.pt, strictly (mismatches list keys and shapes)."""
    path = model_dir / FLOW_FILE
    with no_random_init():  # the strict load below replaces every parameter
        flow = build_section(config, "flow", path)
    load_strict(flow, read_state_dict(path, "cpu"), path, assign=True)  # the file's tensors, not copies
    return flow.float().to(device).eval()


def load_hift(model_dir: Path, config: ModelConfig, device: torch.device) -> torch.nn.Module:
    """HiFT from hift.pt, strictly; the official ``generator.`` prefix and weight-norm keys are accepted."""
    from studio.tts.hift.model import load_hift_state_dict

    path = model_dir / HIFT_FILE
    with no_random_init():  # the strict load below replaces every parameter
        hift = build_section(config, "hift", path)
    state = read_state_dict(path, "cpu")
    load_strict(hift, state, path, loader=load_hift_state_dict)
    return hift.to(device).eval()


def load_frontend(model_dir: Path, device: torch.device, config: ModelConfig | None = None) -> Any:
    """The tokenizer and the two ONNX prompt models (on the CPU: they run once per new voice).

    The tokenizer's special tokens are those of the yaml's `get_tokenizer` version (as upstream picks them)
    and the prompt mel's top frequency its `feat_extractor`'s; without ``config``, the folder's family's. The
    speech tokenizer is the family's file."""
    from studio.tts.frontend.onnx_models import SpeakerEmbedder, SpeechTokenizer
    from studio.tts.frontend.prompt import Frontend
    from studio.tts.frontend.special_tokens import special_tokens_for
    from studio.tts.frontend.text import TextFrontend

    family = family_of(model_dir)
    if config is not None:
        special_tokens, fmax = tokenizer_special_tokens(config), config.prompt_mel_fmax
    else:
        special_tokens, fmax = special_tokens_for(family.tokenizer_version), family.prompt_mel_fmax
    for name in ("vocab.json", "tokenizer_config.json"):  # the tokenizer's own errors do not name the file
        check_json(model_dir / BLANKEN_DIR / name)
    return Frontend(
        open_part(
            model_dir / BLANKEN_DIR,
            "the Qwen2 tokenizer",
            lambda path: TextFrontend(path, special_tokens=special_tokens),
        ),
        open_part(model_dir / CAMPPLUS_FILE, "the CAM++ speaker model", SpeakerEmbedder),
        open_part(model_dir / family.speech_tokenizer_file, "the speech tokenizer", SpeechTokenizer),
        device,
        flow_mel_fmax=fmax,
    )


def attach_cuda_graphs(
    flow: torch.nn.Module | None, hift: torch.nn.Module | None, enabled: bool = True
) -> None:
    """Replay the flow's estimator, its streaming encoder and HiFT as CUDA graphs on CUDA inputs (or stop, with ``enabled=False``);
    for CosyVoice3's flow, its streamed solve (`DiTGraphSolver`), and for its causal HiFT, the network of its
    batched pushes (`SpectrumGraphs`).

    The models only hold the hook (``graphs``); the speed-ups live beside them and are attached here.
    """
    from studio.tts.cosyvoice3.dit import DiT
    from studio.tts.cosyvoice3.flow_graphs import attach_dit_graphs
    from studio.tts.cosyvoice3.hift import CausalHiFTGenerator
    from studio.tts.cosyvoice3.hift_batch import attach_hift_graphs
    from studio.tts.flow.graphs import EstimatorGraphs
    from studio.tts.flow.streaming.batched_encode import attach_encoder_graphs
    from studio.tts.hift.graphs import HiftGraphs

    if flow is not None and isinstance(flow.decoder.estimator, DiT):  # CosyVoice3: its streamed solve
        attach_dit_graphs(flow, enabled)
    elif flow is not None:
        flow.decoder.graphs = EstimatorGraphs(flow.decoder.estimator) if enabled else None
        attach_encoder_graphs(flow, enabled and envs.ENCODER_GRAPHS.enabled())
    if isinstance(hift, CausalHiFTGenerator):  # CosyVoice3: its batched pushes' network
        attach_hift_graphs(hift, enabled)
    elif hift is not None:
        hift.graphs = HiftGraphs(hift) if enabled else None
