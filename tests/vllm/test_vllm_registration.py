"""The studio's process registers the model class itself, so vLLM never inspects it in a subprocess."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")

from vllm import ModelRegistry  # noqa: E402
from vllm.model_executor.models import registry  # noqa: E402

from studio.tts.llm.vllm import plugin  # noqa: E402


@pytest.fixture
def by_name():
    """The registry as vLLM's processes have it: our architecture by name only (restored after)."""
    saved = ModelRegistry.models.get(plugin.ARCHITECTURE)
    ModelRegistry.models.pop(plugin.ARCHITECTURE, None)
    plugin.register()
    registry._try_inspect_model_cls.cache_clear()
    yield
    if saved is not None:
        ModelRegistry.models[plugin.ARCHITECTURE] = saved
    registry._try_inspect_model_cls.cache_clear()


def test_registered_by_name_a_cache_miss_inspects_in_a_subprocess(by_name, monkeypatch, tmp_path):
    """The cost this registration avoids: with vLLM's inspection cache empty, a subprocess runs."""
    monkeypatch.setattr(registry._LazyRegisteredModel, "_get_cache_dir", staticmethod(lambda: tmp_path))
    calls = []
    monkeypatch.setattr(registry, "_run_in_subprocess", lambda fn: calls.append(fn) or fn())
    assert ModelRegistry._try_inspect_model_cls(plugin.ARCHITECTURE) is not None
    assert len(calls) == 1


def test_in_process_registration_inspects_the_class_here(by_name, monkeypatch):
    def no_subprocess(fn):
        raise AssertionError("vLLM inspected the model in a subprocess")

    monkeypatch.setattr(registry, "_run_in_subprocess", no_subprocess)
    plugin.register(in_process=True)
    info = ModelRegistry._try_inspect_model_cls(plugin.ARCHITECTURE)
    assert info is not None and info.architecture == plugin.ARCHITECTURE
    from studio.tts.llm.vllm.model import CosyVoice2StudioForCausalLM

    assert ModelRegistry.models[plugin.ARCHITECTURE].model_cls is CosyVoice2StudioForCausalLM
    plugin.register(in_process=True)  # idempotent
    plugin.register()  # and a later by-name registration does not undo it
    assert ModelRegistry.models[plugin.ARCHITECTURE].model_cls is CosyVoice2StudioForCausalLM


def test_a_process_serving_our_model_samples_top_k_top_p_without_triton(monkeypatch):
    """vLLM's sampler warm-up would compile Triton top-k/top-p kernels our greedy requests never use."""
    from vllm.v1.sample.ops import topk_topp_sampler as ops

    calls = []
    monkeypatch.setattr(ops, "apply_top_k_top_p", lambda logits, k, p: calls.append("vllm") or logits)
    monkeypatch.setattr(
        ops, "apply_top_k_top_p_pytorch", lambda logits, k, p: calls.append("pytorch") or logits
    )
    monkeypatch.setattr(plugin, "SERVING_COSYVOICE", __import__("threading").Event())
    assert plugin.top_k_top_p_in_pytorch() and plugin.top_k_top_p_in_pytorch()  # wraps once
    gpu_like, cpu = torch.zeros(8, 16, device="meta"), torch.zeros(8, 16)
    k = torch.full((8,), 4)
    ops.apply_top_k_top_p(gpu_like, k, None)  # someone else's model: vLLM's own choice
    plugin.SERVING_COSYVOICE.set()
    ops.apply_top_k_top_p(gpu_like, k, None)
    ops.apply_top_k_top_p(gpu_like, None, None)  # nothing to apply: vLLM's (a no-op)
    ops.apply_top_k_top_p(cpu, k, None)  # on a CPU vLLM's path is PyTorch already
    assert calls == ["vllm", "pytorch", "vllm", "vllm"]


def test_in_process_registration_serves_vllms_stock_qwen2_by_class_too(monkeypatch):
    """CosyVoice3's export runs in vLLM's stock class: registered here, it is inspected without a subprocess."""
    from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM

    monkeypatch.delitem(ModelRegistry.models, plugin.STOCK_ARCHITECTURE)  # restored after the test
    registry._try_inspect_model_cls.cache_clear()
    monkeypatch.setattr(registry, "_run_in_subprocess", lambda fn: pytest.fail("inspected in a subprocess"))
    plugin.register(in_process=True)
    assert ModelRegistry.models[plugin.STOCK_ARCHITECTURE].model_cls is Qwen2ForCausalLM
    info = ModelRegistry._try_inspect_model_cls(plugin.STOCK_ARCHITECTURE)
    assert info is not None and info.architecture == "Qwen2ForCausalLM"
    registry._try_inspect_model_cls.cache_clear()


def test_a_process_that_builds_our_ras_processor_serves_a_cosyvoice_model(monkeypatch):
    """The stock Qwen2 class says nothing about CosyVoice3: the RAS processor every studio engine loads does."""
    from studio.tts.llm.vllm.sampling import RasLogitsProcessor

    monkeypatch.setattr(plugin, "SERVING_COSYVOICE", __import__("threading").Event())
    RasLogitsProcessor(None, torch.device("cpu"), False)
    assert plugin.SERVING_COSYVOICE.is_set()
