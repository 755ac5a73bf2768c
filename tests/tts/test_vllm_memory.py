"""vLLM's memory for our LM (weights, KV cache), and the KV cache the VRAM budget gives it (no GPU)."""

from __future__ import annotations

import pytest
from safetensors import safe_open

from studio.tts.device.vram_budget import GIB, VramBudgetError, plan_vram
from studio.tts.llm.vllm.export import export_for_vllm
from studio.tts.llm.vllm.memory import KV_GRAIN, RUNTIME_BYTES, VllmMemory, vllm_memory
from studio.tts.loader import llm_skeleton, read_folder_config


@pytest.fixture(scope="module")
def skeleton(tiny_model_dir):
    return llm_skeleton(tiny_model_dir, read_folder_config(tiny_model_dir))


@pytest.mark.parametrize(("dtype", "size"), [("float16", 2), ("float32", 4)])
def test_the_weights_are_those_of_the_export_vllm_loads(tiny_model_dir, skeleton, tmp_path, dtype, size):
    folder = export_for_vllm(
        tiny_model_dir / "llm.pt", skeleton.llm.model.config.to_dict(), root=tmp_path, dtype=dtype
    )
    with safe_open(str(folder / "model.safetensors"), "pt") as exported:
        on_disk = sum(
            exported.get_tensor(k).numel() * exported.get_tensor(k).element_size() for k in exported.keys()
        )
    memory = vllm_memory(skeleton, dtype=dtype, max_num_seqs=4, max_model_len=512)
    assert memory.weights == on_disk
    config = skeleton.llm.model.config
    head_dim = config.hidden_size // config.num_attention_heads
    assert memory.kv_per_token == 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * size
    assert memory.kv_need == 4 * 512 * memory.kv_per_token
    assert memory.need == memory.weights + RUNTIME_BYTES + memory.kv_need


def test_the_kv_cache_fills_vllms_share_up_to_what_every_sequence_needs(skeleton):
    memory = vllm_memory(skeleton, max_num_seqs=4, max_model_len=512)
    assert memory.kv_cache_bytes(memory.need + GIB) == memory.kv_need  # more would stay empty
    small = memory.weights + RUNTIME_BYTES + 3 * 512 * memory.kv_per_token
    assert memory.kv_cache_bytes(small) == 3 * 512 * memory.kv_per_token
    with pytest.raises(VramBudgetError, match="one sequence of 512 tokens"):
        memory.kv_cache_bytes(memory.weights + RUNTIME_BYTES + 100 * memory.kv_per_token)


def test_what_vllm_cannot_use_goes_to_the_flow():
    uncapped = plan_vram(48 * GIB, 140 * GIB, resident=GIB, with_vllm=True)
    capped = plan_vram(48 * GIB, 140 * GIB, resident=GIB, with_vllm=True, vllm_need=4 * GIB)
    assert uncapped.vllm > 4 * GIB and capped.vllm == 4 * GIB
    assert capped.flow_arena + capped.takes == uncapped.flow_arena + uncapped.takes + uncapped.vllm - 4 * GIB
    assert plan_vram(48 * GIB, 140 * GIB, GIB, True, vllm_need=100 * GIB).vllm == uncapped.vllm


def test_a_share_that_follows_the_free_memory_gives_the_same_kv_cache():
    # Full-size figures (bf16): vLLM's compile cache is keyed by the KV bytes, so a 5090's budget moving
    # with the desktop's memory must not change them at every start.
    memory = VllmMemory(weights=int(0.69 * GIB), kv_per_token=12288, max_model_len=4096, kv_need=3 * GIB)
    sizes = {memory.kv_cache_bytes(int(share * GIB)) for share in (3.50, 3.55, 3.60, 3.65)}
    assert sizes == {int(1.5 * GIB)} and int(1.5 * GIB) % KV_GRAIN == 0
    assert memory.kv_cache_bytes(8 * GIB) == 3 * GIB  # what every sequence needs: not rounded
