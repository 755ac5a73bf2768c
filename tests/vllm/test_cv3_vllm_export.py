"""CosyVoice3's LM exported for vLLM's stock Qwen2ForCausalLM: layout, cache keys apart from CosyVoice2's, sizes."""

from __future__ import annotations

import json

import pytest
import torch
from random_lm import TINY_QWEN2, build_cosyvoice3_lm, build_lm, write_llm_pt
from safetensors.torch import load_file

from studio.tts.llm.vllm.export import (
    STAMP_FILE,
    VllmExportError,
    architecture_for,
    export_for_vllm,
    export_key,
)
from studio.tts.llm.vllm.memory import vllm_memory
from studio.tts.llm.vllm.plugin import ARCHITECTURE, STOCK_ARCHITECTURE


@pytest.fixture(scope="module")
def cosyvoice3_lm():
    return build_cosyvoice3_lm(TINY_QWEN2)


@pytest.fixture()
def cosyvoice3_llm_pt(cosyvoice3_lm, tmp_path):
    return write_llm_pt(cosyvoice3_lm, tmp_path / "model")


def test_the_head_decides_the_serving_class_also_on_meta():
    cv3, cv2 = build_cosyvoice3_lm(TINY_QWEN2, device="meta"), build_lm(TINY_QWEN2, device="meta")
    assert architecture_for(cv3) == STOCK_ARCHITECTURE == "Qwen2ForCausalLM"
    assert architecture_for(cv2) == ARCHITECTURE


def test_export_is_a_stock_qwen2_folder_with_the_speech_table_in_and_the_bias_less_head_out(
    cosyvoice3_llm_pt, tmp_path
):
    out = export_for_vllm(
        cosyvoice3_llm_pt, TINY_QWEN2, root=tmp_path / "cache", architecture=STOCK_ARCHITECTURE
    )
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"] and config["model_type"] == "qwen2"
    assert config["vocab_size"] == 6561 + 200 and config["tie_word_embeddings"] is False
    assert json.loads((out / STAMP_FILE).read_text())["architecture"] == STOCK_ARCHITECTURE
    state = torch.load(cosyvoice3_llm_pt, weights_only=True)
    weights = load_file(out / "model.safetensors")
    assert "lm_head.bias" not in weights
    assert weights["model.embed_tokens.weight"].shape == (6761, TINY_QWEN2["hidden_size"])
    assert torch.equal(weights["model.embed_tokens.weight"], state["speech_embedding.weight"])
    assert torch.equal(weights["lm_head.weight"], state["llm_decoder.weight"])
    assert torch.equal(weights["model.norm.weight"], state["llm.model.model.norm.weight"])
    layer_keys = {k for k in weights if k.startswith("model.layers.")}
    assert layer_keys == {"model." + k[len("llm.model.model.") :] for k in state if ".layers." in k}
    assert set(weights) == layer_keys | {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}


def test_one_llm_pt_gets_one_folder_per_architecture_and_cosyvoice2_keys_are_unchanged(
    cosyvoice3_llm_pt, tmp_path
):
    base = tmp_path / "cache"
    stock = export_key(cosyvoice3_llm_pt, TINY_QWEN2, base, "float32", STOCK_ARCHITECTURE)
    ours = export_key(cosyvoice3_llm_pt, TINY_QWEN2, base, "float32", ARCHITECTURE)
    assert stock != ours
    assert ours == export_key(cosyvoice3_llm_pt, TINY_QWEN2, base, "float32")  # CosyVoice2's, as before


def test_an_llm_pt_of_the_other_family_is_refused_and_leaves_no_export(cosyvoice3_llm_pt, tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(
        VllmExportError, match=r"not a CosyVoice2 Qwen2LM state dict \(missing: \['llm_decoder.bias'"
    ):
        export_for_vllm(cosyvoice3_llm_pt, TINY_QWEN2, root=cache)  # CosyVoice2's biased head
    cosyvoice2_pt = write_llm_pt(build_lm(TINY_QWEN2), tmp_path / "cosyvoice2")
    with pytest.raises(VllmExportError, match="llm_decoder bias.*not a CosyVoice3LM state dict"):
        export_for_vllm(cosyvoice2_pt, TINY_QWEN2, root=cache, architecture=STOCK_ARCHITECTURE)
    with pytest.raises(VllmExportError, match="no export for vLLM architecture 'LlamaForCausalLM'"):
        export_for_vllm(cosyvoice3_llm_pt, TINY_QWEN2, root=cache, architecture="LlamaForCausalLM")
    assert [p for p in cache.iterdir() if p.is_dir()] == []


@pytest.mark.parametrize("family", ["cosyvoice2", "cosyvoice3"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_vllm_memory_counts_the_bytes_the_export_holds(family, dtype, tmp_path):
    build = build_lm if family == "cosyvoice2" else build_cosyvoice3_lm
    lm = build(TINY_QWEN2)
    out = export_for_vllm(
        write_llm_pt(lm, tmp_path / "model"), TINY_QWEN2, root=tmp_path / "cache", dtype=dtype,
        architecture=architecture_for(lm),
    )  # fmt: skip
    exported = sum(t.numel() * t.element_size() for t in load_file(out / "model.safetensors").values())
    skeleton = build(TINY_QWEN2, device="meta")
    memory = vllm_memory(skeleton, dtype=dtype, max_model_len=1024, max_num_seqs=4)
    assert memory.weights == exported
    size = 4 if dtype == "float32" else 2
    per_token = (
        2 * TINY_QWEN2["num_hidden_layers"] * TINY_QWEN2["num_key_value_heads"] * TINY_QWEN2["head_dim"]
    )
    assert memory.kv_per_token == per_token * size and memory.kv_need == 4 * 1024 * per_token * size
