"""The stepping loop's contract with a scripted stand-in engine: routing, stop ids, errors, shutdown."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm")

from studio.tts.llm.sampling import RasSampling  # noqa: E402
from studio.tts.llm.vllm.backend import VllmBackendError, VllmTokenBackend  # noqa: E402

STOPS = [6561, 6562, 6563]


class ScriptedEngine:
    """Answers each request with a fixed token script, one token per step; can fail on demand."""

    def __init__(self, script, fail_on_step=None, reject=()):
        self.script, self.fail_on_step, self.reject = script, fail_on_step, set(reject)
        self.requests, self.aborted, self.steps, self.engine_core = {}, [], 0, None

    def add_request(self, request_id, prompt, params):
        if request_id in self.reject:
            raise ValueError("prompt rejected")
        self.requests[request_id] = list(self.script)

    def abort_request(self, ids):
        self.aborted += ids
        for request_id in ids:
            self.requests.pop(request_id, None)

    def step(self):
        threading.Event().wait(0.002)  # a step takes time, as on a device
        self.steps += 1
        if self.fail_on_step is not None and self.steps >= self.fail_on_step:
            raise RuntimeError("device lost")
        outputs = []
        for request_id, left in list(self.requests.items()):
            token = left.pop(0)
            done = not left or token in STOPS
            if done:
                del self.requests[request_id]
            outputs.append(
                SimpleNamespace(
                    request_id=request_id, finished=done, outputs=[SimpleNamespace(token_ids=[token])]
                )
            )
        return outputs


def backend_for(engine):
    return VllmTokenBackend(engine, stop_token_ids=STOPS, hidden_size=4, embed_dtype=torch.float32)


def generate(backend, **overrides):
    kwargs = dict(min_len=0, max_len=10, sampling=RasSampling(top_k=1), seed=0, cancel=threading.Event())
    return backend.generate(torch.zeros(3, 4), **{**kwargs, **overrides})


def test_tokens_stop_at_stop_id_and_at_max_len():
    with backend_for(ScriptedEngine([5, 6, 7, 6562, 9])) as backend:
        assert list(generate(backend)) == [5, 6, 7]
        assert list(generate(backend, max_len=2)) == [5, 6]


def test_engine_failure_reaches_every_caller_and_later_calls():
    engine = ScriptedEngine(list(range(100)), fail_on_step=3)
    with backend_for(engine) as backend:
        with pytest.raises(VllmBackendError, match="device lost"):
            list(generate(backend, max_len=50))
        with pytest.raises(VllmBackendError, match="failed earlier"):
            list(generate(backend))


def test_rejected_request_fails_only_its_caller():
    engine = ScriptedEngine([1, 2, 3], reject={"tts-0"})
    with backend_for(engine) as backend:
        with pytest.raises(VllmBackendError, match="prompt rejected"):
            list(generate(backend))
        assert list(generate(backend)) == [1, 2, 3]


def test_closing_the_generator_aborts_the_request():
    engine = ScriptedEngine(list(range(1000)))
    with backend_for(engine) as backend:
        stream = generate(backend, max_len=1000)
        assert next(stream) == 0
        stream.close()
        for _ in range(200):
            if engine.aborted:
                break
            threading.Event().wait(0.01)
        assert engine.aborted == ["tts-0"]
    with pytest.raises(VllmBackendError, match="closed"):
        list(generate(backend))


def test_bad_prompt_shape_is_rejected_before_the_engine():
    with backend_for(ScriptedEngine([1])) as backend:
        with pytest.raises(ValueError, match=r"prompt_embeds must be \[L, 4\]"):
            list(
                backend.generate(
                    torch.zeros(3, 5),
                    min_len=0,
                    max_len=4,
                    sampling=RasSampling(),
                    seed=None,
                    cancel=threading.Event(),
                )
            )


class RecordingCore:
    def __init__(self):
        self.shutdowns = []

    def shutdown(self, timeout=None):
        self.shutdowns.append(timeout)


def test_close_shuts_the_engine_core_down_once_even_when_a_step_hangs(monkeypatch):
    import studio.tts.llm.vllm.backend as vllm_llm

    monkeypatch.setattr(vllm_llm, "STEPPER_JOIN_TIMEOUT_S", 0.5)
    release = threading.Event()

    class HangingEngine(ScriptedEngine):
        def step(self):
            release.wait(30)  # a step that never returns while the backend closes
            return []

    engine = HangingEngine([1])
    engine.engine_core = core = RecordingCore()
    backend = backend_for(engine)
    stream = generate(backend)
    waiter = threading.Thread(target=lambda: pytest.raises(VllmBackendError, list, stream), daemon=True)
    waiter.start()
    threading.Event().wait(0.2)
    backend.close(timeout=3.0)
    assert core.shutdowns == [3.0]  # shut down by close(), with vLLM given the whole teardown budget
    backend.close()
    assert core.shutdowns == [3.0]
    release.set()
    waiter.join(5)
