"""Export of the CosyVoice2 or CosyVoice3 LM to a vLLM-loadable HF-style folder in the user cache directory.

Both are a Qwen2 transformer whose input table is `speech_embedding` and whose head is `llm_decoder`.
CosyVoice2's head has a bias: our registered class serves it (`plugin.ARCHITECTURE`). CosyVoice3's has
none (6561 speech ids + 200 specials): vLLM's stock `Qwen2ForCausalLM` serves it as it is.

The folder is keyed by a hash of `llm.pt`, the backbone config, the weights' dtype, the architecture
and this exporter's version, so a stale export (other weights, another dtype or family, older code) is
never reused — upstream's trap. The tensors are written in the dtype vLLM will run (the caller resolves vLLM's
`auto`, see `vllm_llm.resolve_dtype`) and config.json declares that same dtype, so vLLM loads them
as they are: one explicit cast at export time, never a silent second one at load time. It is written into a
temporary folder beside its final place and renamed into place, so a crash never leaves a half
export that looks complete. The model folder itself is never written (it may be read-only).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from studio import envs
from studio.tts.llm.vllm.plugin import ARCHITECTURE, STOCK_ARCHITECTURE
from studio.user_dirs import user_dir

EXPORTER_VERSION = 3  # bump whenever the exported files change (3: weights cast to the run dtype)
WEIGHTS_FILE = "model.safetensors"
STAMP_FILE = "studio-export.json"
# The LM class each architecture serves (named in errors about an llm.pt that does not fit it).
SERVED_LM = {ARCHITECTURE: "CosyVoice2 Qwen2LM", STOCK_ARCHITECTURE: "CosyVoice3LM"}
# Keys of the official llm.pt (Qwen2LM and CosyVoice3LM state dicts).
BACKBONE_PREFIX = "llm.model.model."
SPEECH_EMBEDDING = "speech_embedding.weight"
DECODER_WEIGHT, DECODER_BIAS = "llm_decoder.weight", "llm_decoder.bias"


class VllmExportError(RuntimeError):
    """The LM weights could not be exported for vLLM (missing keys, unreadable llm.pt, disk full)."""


def cache_root() -> Path:
    """Studio cache folder: ``$STUDIO_CACHE_DIR`` or platformdirs' user cache dir."""
    return user_dir(envs.CACHE_DIR, "user_cache_dir")


def file_sha256(path: Path, chunk_bytes: int = 1 << 24) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def architecture_for(llm: Any) -> str:
    """The vLLM architecture that serves this LM (Qwen2LM or CosyVoice3LM, meta is fine): ours for a head
    with a bias, vLLM's stock Qwen2 for one without."""
    return ARCHITECTURE if llm.llm_decoder.bias is not None else STOCK_ARCHITECTURE


def _check_architecture(architecture: str) -> None:
    if architecture not in SERVED_LM:
        raise VllmExportError(f"no export for vLLM architecture {architecture!r} (one of {list(SERVED_LM)})")


def vllm_config_dict(
    qwen2_config: dict[str, Any], vocab_size: int, dtype: str, architecture: str = ARCHITECTURE
) -> dict[str, Any]:
    """The HF config vLLM reads: the BlankEN Qwen2 config with the serving architecture and speech vocab."""
    config = {k: v for k, v in qwen2_config.items() if not k.startswith("_")}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "auto_map", "transformers_version"):
        config.pop(key, None)
    config.update(
        architectures=[architecture],
        model_type="qwen2",
        vocab_size=vocab_size,
        tie_word_embeddings=False,
        torch_dtype=dtype,  # transformers < 5 reads torch_dtype, 5.x reads dtype: both name the weights'
        dtype=dtype,
    )
    return config


def cached_file_sha256(path: Path, base: Path) -> str:
    """`file_sha256`, remembered per (path, size, mtime) in `base`/digests.json: llm.pt is 2 GB."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    memo_file = base / "digests.json"
    try:
        memo = json.loads(memo_file.read_text())
    except (OSError, ValueError):
        memo = {}
    if key not in memo:
        memo[key] = file_sha256(path)
        try:
            base.mkdir(parents=True, exist_ok=True)
            tmp = memo_file.with_name(f".digests-{os.getpid()}.json")
            tmp.write_text(json.dumps(memo))
            os.replace(tmp, memo_file)
        except OSError:  # a read-only cache only costs the hash next time
            pass
    return memo[key]


def export_key(
    llm_pt: Path,
    qwen2_config: dict[str, Any],
    base: Path,
    dtype: str | None = None,
    architecture: str = ARCHITECTURE,
) -> str:
    digest = hashlib.sha256()
    digest.update(cached_file_sha256(llm_pt, base).encode())
    digest.update(json.dumps(qwen2_config, sort_keys=True, default=str).encode())
    digest.update(f"exporter-{EXPORTER_VERSION}".encode())
    digest.update(f"dtype-{dtype or 'source'}".encode())
    if architecture != ARCHITECTURE:  # CosyVoice2's keys hash nothing more: its exported folders stay valid
        digest.update(f"architecture-{architecture}".encode())
    return digest.hexdigest()[:24]


FLOAT_DTYPES = ("float16", "bfloat16", "float32")


def dtype_name(dtype: Any) -> str:
    """The dtype's name ("float16" for torch.float16 or "float16"); VllmExportError for others."""
    name = str(dtype).removeprefix("torch.")
    if name not in FLOAT_DTYPES:
        raise VllmExportError(f"unsupported export dtype {dtype!r} (one of {FLOAT_DTYPES})")
    return name


def weights_dtype(llm_pt: str | Path) -> str:
    """The dtype `llm.pt` stores the LM's weights in (that of its backbone norm), e.g. "float32"."""
    from studio.tts.device.checkpoints import load_state_dict

    if not Path(llm_pt).is_file():
        raise VllmExportError(f"llm.pt not found: {llm_pt}")
    state = load_state_dict(Path(llm_pt), map_location="cpu", mmap=True)
    norm = state.get(BACKBONE_PREFIX + "norm.weight")
    if norm is None:
        raise VllmExportError(f"{llm_pt} is not a CosyVoice2 or CosyVoice3 LM state dict (no backbone norm)")
    return dtype_name(norm.dtype)


def export_for_vllm(
    llm_pt: str | Path,
    qwen2_config: dict[str, Any],
    *,
    root: str | Path | None = None,
    dtype: str | None = None,
    architecture: str = ARCHITECTURE,
) -> Path:
    """Return a folder vLLM can load for this `llm.pt`, exporting it first unless a fresh one exists.

    `qwen2_config` is the backbone's HF config as a dict (CosyVoice-BlankEN/config.json). `dtype`
    ("float16", "bfloat16", "float32") is the dtype vLLM will run: the floating-point weights are
    written in it and config.json declares it; None keeps llm.pt's own dtype. `architecture` is the
    vLLM class that serves it (`architecture_for`): CosyVoice2's biased head or vLLM's stock Qwen2 for
    CosyVoice3's. Each dtype and architecture gets its own export folder.
    """
    dtype = dtype_name(dtype) if dtype is not None else None
    llm_pt = Path(llm_pt)
    base, target = _target(llm_pt, qwen2_config, root, dtype, architecture)
    if (target / STAMP_FILE).is_file():
        return target
    from studio.tts.device.fork_safe import without_thread_pool

    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=base))
    try:
        with without_thread_pool():  # vLLM's engine core is forked from this process next
            _write_export(llm_pt, qwen2_config, staging, dtype, architecture)
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / STAMP_FILE).is_file():  # not a concurrent exporter that won the race
                raise
    except Exception as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, VllmExportError):
            raise
        raise VllmExportError(f"could not export {llm_pt} for vLLM into {base}: {exc}") from exc
    shutil.rmtree(staging, ignore_errors=True)
    return target


def _target(
    llm_pt: Path, qwen2_config: dict[str, Any], root, dtype: str | None, architecture: str
) -> tuple[Path, Path]:
    """The export cache's folder and this export's place in it."""
    _check_architecture(architecture)
    if not llm_pt.is_file():
        raise VllmExportError(f"llm.pt not found: {llm_pt}")
    base = Path(root) if root is not None else cache_root() / "vllm-export"
    key = export_key(llm_pt, qwen2_config, base, dtype, architecture)
    return base, base / f"{key}-v{EXPORTER_VERSION}"


def cached_export(
    llm_pt: str | Path,
    qwen2_config: dict[str, Any],
    *,
    dtype: str | None = None,
    architecture: str = ARCHITECTURE,
) -> Path | None:
    """The export `export_for_vllm` would return, when it is already complete in the cache; else None."""
    dtype = dtype_name(dtype) if dtype is not None else None
    _, target = _target(Path(llm_pt), qwen2_config, None, dtype, architecture)
    return target if (target / STAMP_FILE).is_file() else None


def _write_export(
    llm_pt: Path, qwen2_config: dict[str, Any], folder: Path, dtype: str | None, architecture: str
) -> None:
    import torch
    from safetensors.torch import save_file

    from studio.tts.device.checkpoints import load_state_dict

    state = load_state_dict(Path(llm_pt), map_location="cpu", mmap=True)
    head_bias = architecture == ARCHITECTURE  # vLLM's stock head has none
    required = (
        (SPEECH_EMBEDDING, DECODER_WEIGHT, DECODER_BIAS) if head_bias else (SPEECH_EMBEDDING, DECODER_WEIGHT)
    )
    missing = [k for k in required if k not in state]
    layers = {k: v for k, v in state.items() if k.startswith(BACKBONE_PREFIX + "layers.")}
    norm = state.get(BACKBONE_PREFIX + "norm.weight")
    if missing or not layers or norm is None:
        raise VllmExportError(
            f"{llm_pt} is not a {SERVED_LM[architecture]} state dict "
            f"(missing: {missing or 'backbone layers/norm'})"
        )
    if not head_bias and DECODER_BIAS in state:
        raise VllmExportError(
            f"{llm_pt} has an llm_decoder bias, which vLLM's stock {architecture} head cannot hold: "
            f"it is not a {SERVED_LM[architecture]} state dict"
        )
    vocab_size, hidden = state[SPEECH_EMBEDDING].shape
    if tuple(state[DECODER_WEIGHT].shape) != (vocab_size, hidden):
        raise VllmExportError(
            f"llm_decoder {tuple(state[DECODER_WEIGHT].shape)} does not match speech_embedding "
            f"{(vocab_size, hidden)} in {llm_pt}"
        )
    tensors = {"model." + k[len(BACKBONE_PREFIX) :]: v for k, v in layers.items()}
    tensors["model.norm.weight"] = norm
    tensors["model.embed_tokens.weight"] = state[SPEECH_EMBEDDING]
    tensors["lm_head.weight"] = state[DECODER_WEIGHT]
    if head_bias:
        tensors["lm_head.bias"] = state[DECODER_BIAS]
    source_dtype = dtype_name(norm.dtype)
    dtype = dtype or source_dtype
    target_dtype = getattr(torch, dtype)
    # One cast, here, of every floating-point tensor: config.json below declares this same dtype, so
    # vLLM (given it explicitly) loads the tensors as they are.
    tensors = {
        k: (v.to(target_dtype) if v.is_floating_point() else v).detach().contiguous()
        for k, v in tensors.items()
    }
    save_file(tensors, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    config = vllm_config_dict(qwen2_config, int(vocab_size), dtype, architecture)
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    stamp = {
        "source": str(llm_pt.resolve()),
        "exporter_version": EXPORTER_VERSION,
        "architecture": architecture,
        "dtype": dtype,
        "source_dtype": source_dtype,
    }
    # The stamp is written last: its presence marks a complete export.
    (folder / STAMP_FILE).write_text(json.dumps(stamp, indent=2))
