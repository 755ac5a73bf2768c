"""A model folder's checks and strict reading: every problem with the folder (a missing, truncated or
mismatched file) becomes a `ModelFolderError` that names the file and says what was expected, never a bare
traceback. `validate_folder` runs the loader's checks without loading any weights (``cosyvoice-studio
doctor`` uses it), so the loader and doctor accept and refuse the same folders."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from studio.model_layout import (
    BLANKEN_DIR,
    BLANKEN_FILES,
    CAMPPLUS_FILE,
    FAMILIES,
    FLOW_FILE,
    HIFT_FILE,
    LLM_FILE,
    SPK2INFO_FILE,
    family_of,
    missing_files,
)
from studio.tts.config import ModelConfig, read_config
from studio.tts.device.checkpoints import first_line, load_state_dict, safe_load
from studio.tts.errors import ConfigError, MissingModelFileError, ModelFolderError

_LISTED = 4  # how many keys an error message lists before "and N more"


def check_folder(model_dir: str | Path) -> Path:
    """Return the folder as a Path, or raise `ModelFolderError` listing every required file of its family
    (`studio.model_layout.family_of`) it lacks."""
    model_dir = Path(model_dir).expanduser()
    if not model_dir.is_dir():
        layouts = " or ".join(f"{family.model} (with {family.yaml_file}, ...)" for family in FAMILIES)
        raise MissingModelFileError(
            model_dir, f"model folder not found (expected a folder laid out like {layouts})"
        )
    missing = missing_files(model_dir)
    if missing:
        first = model_dir / missing[0]
        others = f" (also missing: {', '.join(missing[1:])})" if len(missing) > 1 else ""
        raise MissingModelFileError(first, f"missing from the model folder{others}")
    return model_dir


def read_folder_config(model_dir: Path) -> ModelConfig:
    """The folder's yaml (its family's: ``cosyvoice2.yaml`` or ``cosyvoice3.yaml``), its Qwen2 references
    pointing into the folder's BlankEN copy."""
    yaml_file = family_of(model_dir).yaml_file
    return read_config(model_dir / yaml_file, {"qwen_pretrain_path": str(model_dir / BLANKEN_DIR)})


def tokenizer_special_tokens(config: ModelConfig) -> tuple[str, ...]:
    """The special tokens of the text tokenizer the yaml's `get_tokenizer` ``version`` names."""
    from studio.tts.frontend.special_tokens import special_tokens_for

    try:
        return special_tokens_for(config.tokenizer_version)
    except ValueError as exc:
        raise ConfigError(config.path, f"get_tokenizer: {exc}") from exc


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
    """Load ``state`` into ``module`` with strict matching; mismatches become a `ModelFolderError` that names
    ``path`` and the yaml of its folder's family."""
    yaml_file = family_of(path.parent).yaml_file
    problem = describe_mismatch(module, state) if loader is None else ""
    if problem:
        raise ModelFolderError(path, f"does not match {yaml_file}: {problem}")
    try:
        if loader is not None:
            loader(module, state)
        else:
            module.load_state_dict(state, strict=True, assign=assign)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise ModelFolderError(path, f"does not match {yaml_file}: {str(exc).strip()[:600]}") from exc


def build_section(config: ModelConfig, section: str, path: Path) -> torch.nn.Module:
    try:
        return config.build(section)
    except ModelFolderError:
        raise
    except (FileNotFoundError, ValueError, TypeError, KeyError) as exc:
        raise ConfigError(config.path, f"cannot build '{section}': {exc}") from exc


def open_part(path: Path, what: str, factory):
    try:
        return factory(path)
    except ModelFolderError:
        raise
    except Exception as exc:  # onnxruntime and tokenizers raise their own assorted errors
        raise ModelFolderError(path, f"cannot be loaded as {what}: {first_line(exc, 300)}") from exc


def check_json(path: Path) -> None:
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


def read_mapped(path: Path) -> dict[str, torch.Tensor]:
    """The state dict on the CPU, memory-mapped where the format allows: tensors are read when used."""
    return load_state_dict(path, map_location="cpu", mmap=_zipped(path))


def _read_state_dict_shapes(path: Path) -> dict[str, torch.Tensor]:
    """The state dict's names, shapes and dtypes as meta tensors, memory-mapped: no tensor data is read."""
    return load_state_dict(path, map_location="meta", mmap=_zipped(path))


def validate_folder(model_dir: str | Path) -> Path:
    """Check a model folder as `load_model_folder` does, without loading weights; return it as a Path.

    The yaml must parse, describe the three models and name a known tokenizer; llm.pt, flow.pt and hift.pt must open as state
    dicts whose keys and shapes match the modules the yaml describes (built on the meta device, the
    checkpoints memory-mapped onto it, HiFT through its own weight-norm-tolerant loader); the ONNX files
    and the tokenizer's JSON must parse. Takes seconds and no model memory even for the full model, so
    ``doctor`` can run it. Raises the `ModelFolderError` loading would raise, naming the file.
    """
    from functools import partial

    from studio.tts.hift.model import load_hift_state_dict

    model_dir = check_folder(model_dir)
    config = read_folder_config(model_dir)
    tokenizer_special_tokens(config)
    loaders = {"llm": None, "flow": None, "hift": partial(load_hift_state_dict, fuse=False)}
    for section, name in (("llm", LLM_FILE), ("flow", FLOW_FILE), ("hift", HIFT_FILE)):
        path = model_dir / name
        with torch.device("meta"):
            module = build_section(config, section, path)
        load_strict(module, _read_state_dict_shapes(path), path, assign=True, loader=loaders[section])
    for name in BLANKEN_FILES:
        if name.endswith(".json"):
            check_json(model_dir / BLANKEN_DIR / name)
    _check_onnx(model_dir / CAMPPLUS_FILE, "the CAM++ speaker model")
    _check_onnx(model_dir / family_of(model_dir).speech_tokenizer_file, "the speech tokenizer")
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
