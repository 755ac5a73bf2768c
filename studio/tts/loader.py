"""Load a model folder laid out like CosyVoice2-0.5B into our own modules, strictly.

Every problem with the folder (a missing, truncated or mismatched file) becomes a `ModelFolderError`
that names the file and says what was expected, never a bare traceback. Nothing is written into the
folder, so read-only folders work. `validate_folder` runs the same checks without loading any weights
(``cosyvoice-studio doctor`` uses it), so the loader and doctor accept and refuse the same folders.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from studio import envs
from studio.model_layout import (
    BLANKEN_DIR,
    BLANKEN_FILES,
    CAMPPLUS_FILE,
    FLOW_FILE,
    HIFT_FILE,
    LLM_FILE,
    SPEECH_TOKENIZER_FILE,
    SPK2INFO_FILE,
    YAML_FILE,
    missing_files,
)
from studio.tts.config import ModelConfig, read_config
from studio.tts.device.checkpoints import first_line, load_state_dict, safe_load
from studio.tts.device.fork_gate import ForkGate
from studio.tts.device.skip_init import no_random_init
from studio.tts.errors import ConfigError, MissingModelFileError, ModelFolderError
from studio.tts.llm.model import BACKBONE_LAYERS

log = logging.getLogger(__name__)

_LISTED = 4  # how many keys an error message lists before "and N more"
LOAD_THREAD = "load-weights"  # loads the weights while vLLM starts on the caller's thread


@dataclass
class ModelParts:
    """Everything a CosyVoice2 model folder provides, loaded and on its device."""

    model_dir: Path
    config: ModelConfig
    llm: Any  # studio.tts.llm.model.Qwen2LM
    flow: Any  # studio.tts.flow.flow.CausalMaskedDiffWithXvec
    hift: Any  # studio.tts.hift.model.HiFTGenerator
    frontend: Any  # studio.tts.frontend.prompt.Frontend (tokenizer, campplus, speech tokenizer)
    device: torch.device
    fp16: bool
    spk2info: dict = field(default_factory=dict)


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def check_folder(model_dir: str | Path) -> Path:
    """Return the folder as a Path, or raise `ModelFolderError` listing every required file it lacks."""
    model_dir = Path(model_dir).expanduser()
    if not model_dir.is_dir():
        raise MissingModelFileError(
            model_dir,
            "model folder not found (expected a folder laid out like "
            "CosyVoice2-0.5B, with cosyvoice2.yaml, llm.pt, flow.pt, ...)",
        )
    missing = missing_files(model_dir)
    if missing:
        first = model_dir / missing[0]
        others = f" (also missing: {', '.join(missing[1:])})" if len(missing) > 1 else ""
        raise MissingModelFileError(first, f"missing from the model folder{others}")
    return model_dir


def read_folder_config(model_dir: Path) -> ModelConfig:
    """The folder's ``cosyvoice2.yaml``, its Qwen2 references pointing into the folder's BlankEN copy."""
    return read_config(model_dir / YAML_FILE, {"qwen_pretrain_path": str(model_dir / BLANKEN_DIR)})


def read_state_dict(path: Path, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """``torch.load(weights_only=True)`` with errors that name the file."""
    return load_state_dict(path, map_location=device)


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    return shown + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")


def describe_mismatch(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> str:
    """A short account of how a state dict differs from a module's (empty when it matches)."""
    expected = module.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [
        f"{k} {tuple(state[k].shape)} (expected {tuple(v.shape)})"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing key(s): {_listing(missing)}")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected key(s): {_listing(unexpected)}")
    if shapes:
        parts.append(f"{len(shapes)} shape mismatch(es): {_listing(shapes)}")
    return "; ".join(parts)


def load_strict(
    module: torch.nn.Module, state: dict[str, torch.Tensor], path: Path, *, assign: bool = False, loader=None
) -> None:
    """Load ``state`` into ``module`` with strict matching; mismatches become a `ModelFolderError`."""
    problem = describe_mismatch(module, state) if loader is None else ""
    if problem:
        raise ModelFolderError(path, f"does not match {YAML_FILE}: {problem}")
    try:
        if loader is not None:
            loader(module, state)
        else:
            module.load_state_dict(state, strict=True, assign=assign)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise ModelFolderError(path, f"does not match {YAML_FILE}: {str(exc).strip()[:600]}") from exc


def _build(config: ModelConfig, section: str, path: Path) -> torch.nn.Module:
    try:
        return config.build(section)
    except ModelFolderError:
        raise
    except (FileNotFoundError, ValueError, TypeError, KeyError) as exc:
        raise ConfigError(config.path, f"cannot build '{section}': {exc}") from exc


def _open(path: Path, what: str, factory):
    try:
        return factory(path)
    except ModelFolderError:
        raise
    except Exception as exc:  # onnxruntime and tokenizers raise their own assorted errors
        raise ModelFolderError(path, f"cannot be loaded as {what}: {first_line(exc, 300)}") from exc


def llm_skeleton(model_dir: Path, config: ModelConfig) -> torch.nn.Module:
    """Qwen2LM built on the meta device: its config and shapes, no memory and no weights."""
    with torch.device("meta"):
        return _build(config, "llm", model_dir / LLM_FILE)


def load_llm(
    model_dir: Path, config: ModelConfig, device: torch.device, backbone: bool = True
) -> torch.nn.Module:
    """Build Qwen2LM on the meta device (no memory for random weights), then take llm.pt's tensors.

    ``backbone=False`` (vLLM runs the transformer) leaves its layers out: only the embeddings and the
    speech head are read (from a memory map) and moved to the device."""
    path = model_dir / LLM_FILE
    llm = llm_skeleton(model_dir, config)
    if backbone:
        state = read_state_dict(path, device)
    else:
        llm.drop_backbone()
        state = {k: v for k, v in _read_mapped(path).items() if not k.startswith(BACKBONE_LAYERS)}
    load_strict(llm, state, path, assign=True)
    llm.float()
    llm.materialize_buffers()
    return llm.to(device).eval()


def load_flow(model_dir: Path, config: ModelConfig, device: torch.device) -> torch.nn.Module:
    """The flow-matching decoder from flow.pt, strictly (mismatches list keys and shapes)."""
    path = model_dir / FLOW_FILE
    with no_random_init():  # the strict load below replaces every parameter
        flow = _build(config, "flow", path)
    load_strict(flow, read_state_dict(path, "cpu"), path, assign=True)  # the file's tensors, not copies
    return flow.float().to(device).eval()


def load_hift(model_dir: Path, config: ModelConfig, device: torch.device) -> torch.nn.Module:
    """HiFT from hift.pt, strictly; the official ``generator.`` prefix and weight-norm keys are accepted."""
    from studio.tts.hift.model import load_hift_state_dict

    path = model_dir / HIFT_FILE
    with no_random_init():  # the strict load below replaces every parameter
        hift = _build(config, "hift", path)
    state = read_state_dict(path, "cpu")
    load_strict(hift, state, path, loader=load_hift_state_dict)
    return hift.to(device).eval()


def load_frontend(model_dir: Path, device: torch.device) -> Any:
    """The tokenizer and the two ONNX prompt models (on the CPU: they run once per new voice)."""
    from studio.tts.frontend.onnx_models import SpeakerEmbedder, SpeechTokenizer
    from studio.tts.frontend.prompt import Frontend
    from studio.tts.frontend.text import TextFrontend

    for name in ("vocab.json", "tokenizer_config.json"):  # the tokenizer's own errors do not name the file
        _check_json(model_dir / BLANKEN_DIR / name)
    return Frontend(
        _open(model_dir / BLANKEN_DIR, "the Qwen2 tokenizer", TextFrontend),
        _open(model_dir / CAMPPLUS_FILE, "the CAM++ speaker model", SpeakerEmbedder),
        _open(model_dir / SPEECH_TOKENIZER_FILE, "the speech tokenizer", SpeechTokenizer),
        device,
    )


def _check_json(path: Path) -> None:
    """Raise `ModelFolderError` naming ``path`` when it exists but does not parse as JSON."""
    if not path.is_file():
        return  # absent files are reported by whoever needs them
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelFolderError(path, f"is not valid JSON (truncated or corrupt?): {first_line(exc)}") from exc


def _check_onnx(path: Path, what: str) -> None:
    """Raise `ModelFolderError` naming ``path`` unless it parses as an ONNX model with a graph.

    Parsing the protobuf (without external data) catches truncated and corrupt files in well under a
    second, without the cost of an onnxruntime session.
    """
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and onnx's own errors
        raise ModelFolderError(
            path, f"cannot be read as {what} (truncated or corrupt?): {first_line(exc)}"
        ) from exc
    if not model.graph.node:
        raise ModelFolderError(path, f"is not {what}: the ONNX file holds no graph")


def _zipped(path: Path) -> bool:
    """Whether ``path`` is in torch's zip format (memory maps need it; old files are pickles)."""
    with path.open("rb") as file:
        return file.read(4) == b"PK\x03\x04"


def _read_mapped(path: Path) -> dict[str, torch.Tensor]:
    """The state dict on the CPU, memory-mapped where the format allows: tensors are read when used."""
    return load_state_dict(path, map_location="cpu", mmap=_zipped(path))


def _read_state_dict_shapes(path: Path) -> dict[str, torch.Tensor]:
    """The state dict's names, shapes and dtypes as meta tensors, memory-mapped: no tensor data is read."""
    return load_state_dict(path, map_location="meta", mmap=_zipped(path))


def validate_folder(model_dir: str | Path) -> Path:
    """Check a model folder as `load_model_folder` does, without loading weights; return it as a Path.

    The yaml must parse and describe the three models; llm.pt, flow.pt and hift.pt must open as state
    dicts whose keys and shapes match the modules the yaml describes (built on the meta device, the
    checkpoints memory-mapped onto it, HiFT through its own weight-norm-tolerant loader); the ONNX files
    and the tokenizer's JSON must parse. Takes seconds and no model memory even for the full model, so
    ``doctor`` can run it. Raises the `ModelFolderError` loading would raise, naming the file.
    """
    from functools import partial

    from studio.tts.hift.model import load_hift_state_dict

    model_dir = check_folder(model_dir)
    config = read_folder_config(model_dir)
    loaders = {"llm": None, "flow": None, "hift": partial(load_hift_state_dict, fuse=False)}
    for section, name in (("llm", LLM_FILE), ("flow", FLOW_FILE), ("hift", HIFT_FILE)):
        path = model_dir / name
        with torch.device("meta"):
            module = _build(config, section, path)
        load_strict(module, _read_state_dict_shapes(path), path, assign=True, loader=loaders[section])
    for name in BLANKEN_FILES:
        if name.endswith(".json"):
            _check_json(model_dir / BLANKEN_DIR / name)
    _check_onnx(model_dir / CAMPPLUS_FILE, "the CAM++ speaker model")
    _check_onnx(model_dir / SPEECH_TOKENIZER_FILE, "the speech tokenizer")
    load_spk2info(model_dir / SPK2INFO_FILE)
    return model_dir


def load_spk2info(path: Path) -> dict:
    """Saved voices in upstream's format (a dict of dicts of tensors); {} when the file is absent."""
    if not path.is_file():
        return {}
    data = safe_load(path, "saved voices", map_location="cpu")
    if not isinstance(data, dict):
        raise ModelFolderError(path, "expected a mapping of voice ids to prompt features")
    return data


def attach_cuda_graphs(
    flow: torch.nn.Module | None, hift: torch.nn.Module | None, enabled: bool = True
) -> None:
    """Replay the flow's estimator, its streaming encoder and HiFT as CUDA graphs on CUDA inputs (or stop, with ``enabled=False``).

    The models only hold the hook (``graphs``); the speed-ups live beside them and are attached here.
    """
    from studio.tts.flow.graphs import EstimatorGraphs
    from studio.tts.flow.streaming.batched_encode import attach_encoder_graphs
    from studio.tts.hift.graphs import HiftGraphs

    if flow is not None:
        flow.decoder.graphs = EstimatorGraphs(flow.decoder.estimator) if enabled else None
        attach_encoder_graphs(flow, enabled and envs.ENCODER_GRAPHS.enabled())
    if hift is not None:
        hift.graphs = HiftGraphs(hift) if enabled else None


def load_model_folder(
    model_dir: str | Path, *, device: torch.device | str | None = None, fp16: bool = False
) -> ModelParts:
    """Load the whole folder; ``fp16`` (CUDA only, as upstream) halves the LM and the flow."""
    parts, _ = load_model_folder_beside(model_dir, device=device, fp16=fp16)
    return parts


def load_model_folder_beside(
    model_dir: str | Path,
    *,
    device: torch.device | str | None = None,
    fp16: bool = False,
    beside: Callable[[torch.nn.Module, torch.device], Any] | None = None,
    beside_forks: bool | Callable[[torch.device], bool] = False,
    lm_backbone: bool = True,
    then: Callable[[ModelParts], None] | None = None,
) -> tuple[ModelParts, Any]:
    """Load the folder while ``beside(skeleton, device)`` runs on this thread (starting vLLM); return the
    parts and what ``beside`` returned.

    ``skeleton`` is the LM built on the meta device: its config and shapes, no weights (vLLM exports and
    runs its own copy). The weights (LM, flow, HiFT, frontend) load on another thread meanwhile. With
    ``beside_forks`` (vLLM will fork its engine-core process; a callable is asked with the device) that
    thread waits until this one has forked (`ForkGate`), so this process touches CUDA only after the fork
    and vLLM need not spawn a new interpreter. ``lm_backbone=False`` leaves the LM's transformer layers
    out (`load_llm`). ``then(parts)`` runs on the loading thread once the weights are in, while ``beside``
    may still run (warming up beside vLLM's start). Errors of either side are raised here, after both
    have ended."""
    model_dir = check_folder(model_dir)
    if beside_forks:  # torch.cuda.is_available() through NVML: a CUDA runtime call would poison the fork
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    device = torch.device(device) if device is not None else default_device()
    if fp16 and device.type != "cuda":
        log.info("fp16 needs a CUDA device; running in float32 on %s", device)
        fp16 = False
    config = read_folder_config(model_dir)
    forks = beside_forks(device) if callable(beside_forks) else beside_forks
    if forks and torch.cuda.is_initialized():
        log.warning("CUDA was initialised here before vLLM started: vLLM spawns its engine process (slower)")
    gate = ForkGate(armed=beside is not None and forks)
    loaded: dict[str, Any] = {}

    def load_weights() -> None:
        try:
            waited = time.perf_counter()
            gate.wait()
            start = time.perf_counter()
            llm = load_llm(model_dir, config, device, backbone=lm_backbone)
            flow = load_flow(model_dir, config, device)
            hift = load_hift(model_dir, config, device)
            if fp16:
                llm.half()
                flow.half()
            if device.type == "cuda" and envs.CUDA_GRAPHS.enabled():
                # The estimator (~1,300 small kernels per Euler step) and HiFT are launch-bound on a GPU:
                # replaying captured graphs makes them several times faster with identical output.
                attach_cuda_graphs(flow, hift)  # STUDIO_CUDA_GRAPHS=0 opts out
            loaded["parts"] = ModelParts(
                model_dir=model_dir,
                config=config,
                llm=llm,
                flow=flow,
                hift=hift,
                frontend=load_frontend(model_dir, device),
                device=device,
                fp16=fp16,
                spk2info=load_spk2info(model_dir / SPK2INFO_FILE),
            )
            log.info("weights loaded in %.1f s, after %.1f s waiting for vLLM's fork", time.perf_counter() - start,
                     start - waited)  # fmt: skip
            if then is not None:
                then(loaded["parts"])
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            loaded["error"] = exc

    result = None
    if beside is None:
        load_weights()
    else:
        skeleton = llm_skeleton(model_dir, config)
        worker = threading.Thread(target=load_weights, name=LOAD_THREAD, daemon=True)
        worker.start()
        try:
            result = beside(skeleton, device)
        finally:
            if forks and not gate.is_open():
                log.info("vLLM started without forking here; the weights load after it")
            gate.open()
            worker.join()
    if "error" in loaded:
        raise loaded["error"]
    return loaded["parts"], result
