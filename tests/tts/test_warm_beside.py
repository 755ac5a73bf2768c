"""The warm-up beside vLLM's start: replayed tokens drive the take path while the LM is not ready."""

from __future__ import annotations

import threading
import time
import types

import torch

from studio.tts.flow.streaming.prompt_cache import default_cache
from studio.tts.llm.replay import SPEECH_TOKENS, ReplayTokens
from studio.tts.llm.sampling import RasSampling

EMBEDS = torch.zeros(3, 8)


def replay(**lengths) -> list[int]:
    return list(
        ReplayTokens().generate(EMBEDS, sampling=RasSampling(), seed=7, cancel=threading.Event(), **lengths)
    )


def test_replayed_tokens_keep_the_protocols_lengths_seed_and_cancel():
    assert len(replay(min_len=5, max_len=40, ignore_stop=True)) == 40
    assert len(replay(min_len=5, max_len=40)) == 5
    tokens = replay(min_len=30, max_len=30)
    assert tokens == replay(min_len=30, max_len=30) and all(0 <= t < SPEECH_TOKENS for t in tokens)
    assert len(set(tokens)) > 10  # not one token repeated: the flow sees varied input
    cancel = threading.Event()
    stream = ReplayTokens().generate(
        EMBEDS, min_len=9, max_len=9, sampling=RasSampling(), seed=0, cancel=cancel
    )
    assert next(stream) >= 0
    cancel.set()
    assert list(stream) == []


def test_the_warm_up_without_the_lm_never_asks_the_lm(tiny_model_dir):
    from studio.runtime.runner import warm_without_lm
    from studio.tts.cosyvoice2 import CosyVoice2

    voice = CosyVoice2(tiny_model_dir)

    class NoLM:
        def generate(self, *args, **kwargs):
            raise AssertionError("the LM was asked during the warm-up without it")

    voice.backend = NoLM()
    cache = default_cache("cpu")
    cache.clear()
    one = warm_without_lm(voice, takes=1)
    assert one >= 2  # the streamed warm-up take: several chunks, all through the flow
    hits = cache.stats()["hits"]
    assert warm_without_lm(voice) == 2 * one  # by default twice: the second take of the voice ...
    assert cache.stats()["hits"] >= hits + 2  # ... reads the prompt's cached flow state (its other shapes)


def test_load_runs_then_on_the_loading_thread_while_beside_still_runs(tiny_model_dir):
    from studio.tts.loader import LOAD_THREAD, load_model_folder_beside

    seen = {}
    warmed = threading.Event()

    def then(parts):
        seen["thread"] = threading.current_thread().name
        seen["flow"] = parts.flow is not None
        warmed.set()

    def beside(_skeleton, _device):  # vLLM's start: still running when the warm-up happens
        seen["during_beside"] = warmed.wait(60)
        return "backend"

    parts, result = load_model_folder_beside(tiny_model_dir, device="cpu", beside=beside, then=then)
    assert seen == {"thread": LOAD_THREAD, "flow": True, "during_beside": True} and result == "backend"


def test_cosyvoice2_warms_beside_the_vllm_start_and_a_failed_warm_up_is_only_logged(
    tiny_model_dir, monkeypatch, caplog
):
    """vLLM itself is not under test here (its engine start takes a minute on CPU): a stand-in backend
    module whose start ends only once the warm-up ran, as on the GPU where vLLM needs ~20 s."""
    from studio.tts import cosyvoice2

    started = threading.Event()

    def create_vllm_backend(skeleton, model_dir, **options):
        started.set()
        deadline = time.monotonic() + 60
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        seen["warm_calls_during_start"] = len(calls)
        return types.SimpleNamespace(close=lambda: None)

    fake = types.SimpleNamespace(create_vllm_backend=create_vllm_backend, engine_forks=lambda device: False)
    monkeypatch.setattr(cosyvoice2, "_vllm_backend_module", lambda: fake)
    seen: dict = {}
    calls: list = []

    def warm(voice):
        calls.append(threading.current_thread().name)
        assert voice.model.flow is not None and voice.sample_rate > 0  # adopted before the warm-up

    voice = cosyvoice2.CosyVoice2(tiny_model_dir, load_vllm=True, warm_beside=warm)
    assert seen["warm_calls_during_start"] == 1 and calls == ["load-weights"] and voice.backend_name == "vllm"

    def broken(voice):
        calls.append("broken")
        raise RuntimeError("no GPU memory left for the warm-up")

    calls.clear()
    voice = cosyvoice2.CosyVoice2(tiny_model_dir, load_vllm=True, warm_beside=broken)
    assert voice.backend_name == "vllm" and "warm-up beside vLLM's start failed" in caplog.text


def test_without_vllm_there_is_no_warm_up_beside(tiny_model_dir):
    from studio.tts.cosyvoice2 import CosyVoice2

    calls = []
    CosyVoice2(tiny_model_dir, warm_beside=calls.append)
    assert calls == []  # the PyTorch backend loads without a vLLM start to hide the warm-up behind
