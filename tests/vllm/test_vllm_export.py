"""Export of llm.pt for vLLM: layout, cache reuse, a changed llm.pt re-exports, no partial folders."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from studio.tts.vllm_export import STAMP_FILE, VllmExportError, export_for_vllm
from studio.tts.vllm_plugin import ARCHITECTURE


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

    from studio.tts.vllm_plugin import MODEL_CLASS_PATH

    module, name = MODEL_CLASS_PATH.split(":")
    assert getattr(importlib.import_module(module), name).__name__ == ARCHITECTURE
