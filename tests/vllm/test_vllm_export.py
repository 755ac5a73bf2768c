"""Export of llm.pt for vLLM: layout, cache reuse, a changed llm.pt re-exports, no partial folders."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from studio.tts.llm.vllm.export import STAMP_FILE, VllmExportError, export_for_vllm
from studio.tts.llm.vllm.plugin import ARCHITECTURE


@pytest.fixture()
def model_copy(tiny_model_dir, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(tiny_model_dir / "llm.pt", folder / "llm.pt")
    config = json.loads((tiny_model_dir / "CosyVoice-BlankEN" / "config.json").read_text())
    return folder, config


def test_export_layout_maps_speech_embedding_and_biased_decoder(model_copy, tmp_path):
    folder, config = model_copy
    before = sorted(p.name for p in folder.iterdir())
    out = export_for_vllm(folder / "llm.pt", config, root=tmp_path / "cache")
    assert sorted(p.name for p in folder.iterdir()) == before  # the model folder is never written
    assert out.parent == tmp_path / "cache"
    exported = json.loads((out / "config.json").read_text())
    assert exported["architectures"] == [ARCHITECTURE]
    assert exported["vocab_size"] == 6564 and exported["tie_word_embeddings"] is False
    state = torch.load(folder / "llm.pt", weights_only=True)
    weights = load_file(out / "model.safetensors")
    assert torch.equal(weights["model.embed_tokens.weight"], state["speech_embedding.weight"])
    assert torch.equal(weights["lm_head.weight"], state["llm_decoder.weight"])
    assert torch.equal(weights["lm_head.bias"], state["llm_decoder.bias"])
    layer_keys = {k for k in weights if k.startswith("model.layers.")}
    assert layer_keys == {"model." + k[len("llm.model.model.") :] for k in state if ".layers." in k}


def test_export_is_reused_and_a_changed_llm_pt_gets_a_fresh_one(model_copy, tmp_path):
    folder, config = model_copy
    first = export_for_vllm(folder / "llm.pt", config, root=tmp_path / "cache")
    stamp_time = (first / STAMP_FILE).stat().st_mtime_ns
    assert export_for_vllm(folder / "llm.pt", config, root=tmp_path / "cache") == first
    assert (first / STAMP_FILE).stat().st_mtime_ns == stamp_time

    state = torch.load(folder / "llm.pt", weights_only=True)
    state["llm_decoder.bias"] = state["llm_decoder.bias"] + 1
    torch.save(state, folder / "llm.pt")
    second = export_for_vllm(folder / "llm.pt", config, root=tmp_path / "cache")
    assert second != first
    assert torch.equal(load_file(second / "model.safetensors")["lm_head.bias"], state["llm_decoder.bias"])


def test_bad_llm_pt_raises_and_leaves_no_partial_export(tmp_path):
    bad = tmp_path / "llm.pt"
    torch.save({"speech_embedding.weight": torch.zeros(4, 2)}, bad)
    with pytest.raises(VllmExportError, match="not a CosyVoice2 Qwen2LM"):
        export_for_vllm(bad, {"hidden_size": 2}, root=tmp_path / "cache")
    assert [p for p in (tmp_path / "cache").iterdir() if p.is_dir()] == []
    with pytest.raises(VllmExportError, match="not found"):
        export_for_vllm(tmp_path / "missing.pt", {}, root=tmp_path / "cache")


def test_plugin_path_names_the_model_class_the_export_declares():
    import importlib

    from studio.tts.llm.vllm.plugin import MODEL_CLASS_PATH

    module, name = MODEL_CLASS_PATH.split(":")
    assert getattr(importlib.import_module(module), name).__name__ == ARCHITECTURE


def test_export_writes_and_declares_the_run_dtype_and_each_dtype_has_its_own_folder(model_copy, tmp_path):
    folder, config = model_copy
    state = torch.load(folder / "llm.pt", weights_only=True)
    source = str(state["llm.model.model.norm.weight"].dtype).removeprefix("torch.")
    kept = export_for_vllm(folder / "llm.pt", config, root=tmp_path / "cache")
    declared = json.loads((kept / "config.json").read_text())
    assert declared["torch_dtype"] == declared["dtype"] == source
    assert {str(v.dtype) for v in load_file(kept / "model.safetensors").values()} == {f"torch.{source}"}

    for dtype in ("bfloat16", "float32"):
        out = export_for_vllm(folder / "llm.pt", config, root=tmp_path / "cache", dtype=dtype)
        assert out != kept
        declared = json.loads((out / "config.json").read_text())
        assert declared["torch_dtype"] == declared["dtype"] == dtype  # what vLLM reads = what is stored
        weights = load_file(out / "model.safetensors")
        assert {str(v.dtype) for v in weights.values()} == {f"torch.{dtype}"}
        expected = state["llm_decoder.weight"].to(getattr(torch, dtype))
        assert torch.equal(weights["lm_head.weight"], expected)  # one cast from llm.pt, nothing else
        assert export_for_vllm(folder / "llm.pt", config, root=tmp_path / "cache", dtype=dtype) == out
    with pytest.raises(VllmExportError, match="unsupported export dtype"):
        export_for_vllm(folder / "llm.pt", config, root=tmp_path / "cache", dtype="int8")


def test_auto_dtype_is_resolved_before_the_export_as_vllm_would():
    from studio.tts.llm.vllm.backend import resolve_dtype

    gpu = ["bfloat16", "float16", "float32"]
    assert resolve_dtype("auto", "float32", gpu) == "bfloat16"  # vLLM downcasts float32 weights
    assert resolve_dtype("auto", "float16", gpu) == "float16"  # kept: no float16 -> bfloat16 cast
    assert resolve_dtype(None, "bfloat16", gpu) == "bfloat16"
    assert resolve_dtype("auto", "float16", ["bfloat16", "float32"]) == "bfloat16"  # unsupported here
    assert resolve_dtype("float32", "float16", gpu) == "float32"  # an explicit choice wins
    pytest.importorskip("vllm")
    assert resolve_dtype("auto", "float32") in ("bfloat16", "float16", "float32")  # this platform's
