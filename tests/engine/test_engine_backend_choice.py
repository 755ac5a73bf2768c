"""Backend choice is explicit: vLLM when asked and it starts, otherwise PyTorch with the reason kept."""

from __future__ import annotations

import pytest

from studio.runtime import runner
from studio.tts import models
from studio.tts.errors import BackendUnavailableError, ModelFolderError


class FakeCosyVoice2:
    """Records how it was built; fails the vLLM path the way the chosen scenario says."""

    vllm_failure: Exception | None = None
    built: list[dict] = []

    def __init__(self, model_dir, load_vllm=False, fp16=False, **vllm_options):
        if load_vllm and self.vllm_failure is not None:
            raise self.vllm_failure
        self.built.append({"load_vllm": load_vllm, "fp16": fp16, **vllm_options})


@pytest.fixture
def fake_runtime(monkeypatch):
    FakeCosyVoice2.built = []
    FakeCosyVoice2.vllm_failure = None
    monkeypatch.setattr(
        models, "model_class", lambda model_dir: FakeCosyVoice2
    )  # the folder's family's class
    monkeypatch.setattr(runner, "vllm_unavailable_reason", lambda: "")
    return FakeCosyVoice2


def test_vllm_when_asked_and_it_starts(fake_runtime):
    loaded = runner.load_model("/m", "vllm", fp16=True, vllm_options={"max_num_seqs": 4})
    assert (loaded.backend, loaded.backend_reason) == ("vllm", "")
    assert fake_runtime.built == [
        {"load_vllm": True, "fp16": True, "vram_budget_gb": 0.0, "warm_beside": None, "max_num_seqs": 4}
    ]


def test_a_caller_that_warms_up_next_has_the_warm_up_start_beside_vllm(fake_runtime):
    runner.load_model("/m", "vllm", warm_beside=True)
    assert fake_runtime.built[-1]["warm_beside"] is runner.warm_without_lm


def test_pytorch_with_the_reason_when_vllm_fails_to_start(fake_runtime, caplog):
    fake_runtime.vllm_failure = BackendUnavailableError("no KV cache space")
    loaded = runner.load_model("/m", "vllm")
    assert loaded.backend == "pytorch"
    assert "no KV cache space" in loaded.backend_reason and "vLLM failed to start" in loaded.backend_reason
    assert fake_runtime.built[-1]["load_vllm"] is False
    assert "using PyTorch instead of vLLM" in caplog.text


def test_pytorch_with_the_reason_when_vllm_is_missing(fake_runtime, monkeypatch):
    monkeypatch.setattr(runner, "vllm_unavailable_reason", lambda: "vLLM is not installed")
    loaded = runner.load_model("/m", "vllm")
    assert (loaded.backend, loaded.backend_reason) == ("pytorch", "vLLM is not installed")
    assert [b["load_vllm"] for b in fake_runtime.built] == [False]


def test_a_bad_model_folder_is_not_hidden_by_a_fallback(fake_runtime):
    fake_runtime.vllm_failure = ModelFolderError("/m", "llm.pt is missing")
    with pytest.raises(ModelFolderError, match="llm.pt"):
        runner.load_model("/m", "vllm")
    assert fake_runtime.built == []


def test_pytorch_when_asked_never_touches_vllm(fake_runtime, monkeypatch):
    monkeypatch.setattr(runner, "vllm_unavailable_reason", lambda: pytest.fail("vLLM was probed"))
    assert runner.load_model("/m", "pytorch").backend == "pytorch"
    with pytest.raises(ValueError, match="backend"):
        runner.load_model("/m", "tensorrt")
