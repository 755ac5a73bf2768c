"""load_vllm=True on a real vLLM engine: plugin path, greedy parity with PyTorch, concurrency, cancel."""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from importlib.metadata import entry_points

import numpy as np
import pytest
import torch

from studio.tts.llm.sampling import RasSampling
from studio.tts.llm.torch_backend import TorchTokenBackend
from studio.tts.synthesis import SynthesisSpec

pytestmark = pytest.mark.vllm
GREEDY = RasSampling(top_k=1)


def voiced_prompt(seconds: float = 2.0, sr: int = 16000) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    phase = 2 * np.pi * np.cumsum(140 + 20 * np.sin(2 * np.pi * 0.7 * t)) / sr
    return (
        0.3 * sum(np.sin(k * phase) / k for k in range(1, 6)) * (0.6 + 0.4 * np.sin(6 * np.pi * t))
    ).astype(np.float32)


@contextmanager
def sampling(voice, rule):
    previous, voice.model.llm.sampling = voice.model.llm.sampling, rule
    try:
        yield
    finally:
        voice.model.llm.sampling = previous


def prompt_for(voice, text_ids):
    with torch.inference_mode():
        return voice.model.llm.build_prompt_embeds(text_ids, [3, 4, 5], [11, 22, 33, 44])[0]


def run(backend, prompt, results, key, **kwargs):
    results[key] = list(backend.generate(prompt, cancel=threading.Event(), **kwargs))


def test_plugin_serves_the_model_from_vllm_processes(vllm_voice):
    names = [e.value for e in entry_points(group="vllm.general_plugins")]
    assert "studio.tts.llm.vllm.plugin:register" in names
    assert os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0"
    # the engine core runs in its own process, where only the entry point can have registered our class
    assert type(vllm_voice.backend._engine.engine_core).__name__ != "InprocClient"


def test_load_vllm_synthesises_the_same_audio_as_pytorch_when_greedy(vllm_voice, torch_voice):
    spec = dict(
        text="Hello there.",
        prompt_wav=voiced_prompt(),
        prompt_text="A prompt.",
        seed=7,
        exact_speech_tokens=30,
        text_frontend=False,
    )
    audio = {}
    for name, voice in (("vllm", vllm_voice), ("pytorch", torch_voice)):
        with sampling(voice, GREEDY):
            chunks = list(voice.synthesize(SynthesisSpec(**spec)))
        audio[name] = np.concatenate([c["tts_speech"].numpy()[0] for c in chunks])
        assert chunks[-1]["speech_tokens"] == 30
    assert vllm_voice.backend_name == "vllm" and audio["vllm"].size > 0 and np.isfinite(audio["vllm"]).all()
    np.testing.assert_allclose(audio["vllm"], audio["pytorch"], atol=1e-5)


def test_four_concurrent_streams_each_equal_the_pytorch_path(vllm_voice, torch_voice):
    backend = vllm_voice.backend
    assert not len(vllm_voice.model.llm.llm.model.model.layers)  # vLLM runs them: the PyTorch copy is freed
    prompts = [prompt_for(vllm_voice, [10 + i, 20, 30 + 2 * i, 40]) for i in range(4)]
    kwargs = dict(min_len=4, max_len=24, sampling=GREEDY, seed=None)
    reference = TorchTokenBackend(torch_voice.model.llm)  # the same weights, with their layers
    expected = [list(reference.generate(p, cancel=threading.Event(), **kwargs)) for p in prompts]
    results: dict[int, list[int]] = {}
    threads = [
        threading.Thread(target=run, args=(backend, p, results, i), kwargs=kwargs)
        for i, p in enumerate(prompts)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [results.get(i) for i in range(4)] == expected
    assert len({tuple(r) for r in expected}) > 1  # the four prompts really differ


def test_ras_is_seeded_per_request_and_exact_length_ignores_stops(vllm_voice):
    backend = vllm_voice.backend
    prompt = prompt_for(vllm_voice, [7, 8, 9])
    kwargs = dict(min_len=0, max_len=40, sampling=RasSampling(), ignore_stop=True)
    results: dict[int, list[int]] = {}
    threads = [
        threading.Thread(target=run, args=(backend, prompt, results, s), kwargs={**kwargs, "seed": s})
        for s in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    alone: dict[int, list[int]] = {}
    run(backend, prompt, alone, 0, seed=0, **kwargs)
    assert alone[0] == results[0]
    assert results[0] != results[1]
    assert all(len(r) == 40 and max(r) < 6561 for r in results.values())


def test_the_lm_waits_while_the_flow_holds_the_gpu_turn(vllm_voice):
    from studio.tts.device import flow_turn

    backend = vllm_voice.backend
    assert backend.turn is not None and not backend.turn.path.exists()  # shared, its name gone once started
    backend.turn.max_seconds = 8.0  # the release ends this turn (the engine's own bound: 10 s)
    arrived: list[float] = []

    def take() -> None:
        stream = backend.generate(
            prompt_for(vllm_voice, [4, 5]), min_len=0, max_len=12, sampling=RasSampling(), seed=3,
            cancel=threading.Event(), ignore_stop=True,
        )  # fmt: skip
        arrived.extend(time.monotonic() for _ in stream)

    flow_turn.hold(1)
    try:
        thread = threading.Thread(target=take)
        thread.start()
        time.sleep(2.0)  # dozens of steps of this tiny LM
        assert not arrived, "vLLM's engine stepped while the flow held the GPU"
    finally:
        released = time.monotonic()
        flow_turn.release()
    thread.join(60)
    assert len(arrived) == 12 and arrived[0] >= released


@pytest.mark.parametrize("how", ["event", "close"])
def test_cancel_aborts_and_frees_the_request(vllm_voice, how):
    backend = vllm_voice.backend
    cancel = threading.Event()
    stream = backend.generate(
        prompt_for(vllm_voice, [5, 6]),
        min_len=0,
        max_len=1500,
        sampling=RasSampling(),
        seed=1,
        cancel=cancel,
        ignore_stop=True,
    )
    first = [next(stream) for _ in range(3)]
    assert len(first) == 3
    if how == "event":
        cancel.set()
        assert len(list(stream)) <= 1  # at most a token already in hand
    else:
        stream.close()
    deadline = time.monotonic() + 20
    while backend.num_live_requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backend.num_live_requests == 0


def test_the_warm_up_request_runs_ras_on_the_engine_and_a_failing_one_is_only_logged(vllm_voice, caplog):
    from studio.tts.llm.vllm.warm import warm_first_request

    class Broken:
        hidden_size = vllm_voice.backend.hidden_size

        def generate(self, *args, **kwargs):
            raise RuntimeError("engine gone")

    with caplog.at_level("INFO", logger="studio.tts.llm.vllm.warm"):
        warm_first_request(vllm_voice.backend, tokens=3)  # the real engine: RAS, stops ignored
        warm_first_request(Broken())
    messages = [record.getMessage() for record in caplog.records]
    assert any(m.startswith("vLLM's first request (3 tokens) took") for m in messages), messages
    assert any("warm-up request failed" in m for m in messages)
    assert vllm_voice.backend.num_live_requests == 0  # nothing left behind in the engine
