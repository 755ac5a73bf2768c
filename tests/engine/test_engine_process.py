"""The real engine process on the tiny model: handshake, warm-up, streaming, cancel, concurrency."""

from __future__ import annotations

import numpy as np
import pytest
from engine_helpers import chunks_of, collect_takes, finished_of, states_until

from studio.engine.client import EngineClient
from studio.engine.protocol import (
    PROTOCOL_VERSION,
    SAMPLE_RATE,
    EngineState,
    Error,
    LoadModel,
    Progress,
    Synthesize,
)
from studio.runtime.warmup import WARMUP_PROMPT_TEXT, synthetic_voice

PROMPT = synthetic_voice(16000, 2.0)


def take(
    tokens: int, *, stream: bool = True, seed: int = 1, text: str = "Hello there, studio."
) -> Synthesize:
    return Synthesize(
        text,
        prompt_wav=PROMPT,
        prompt_sr=16000,
        prompt_text=WARMUP_PROMPT_TEXT,
        stream=stream,
        seed=seed,
        exact_speech_tokens=tokens,
    )


@pytest.fixture(scope="module")
def engine(tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("engine")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STUDIO_DATA_DIR", str(folder / "data"))
        client = EngineClient(log_path=folder / "engine.log")
        hello = client.start()
    client.load_model(LoadModel(str(tiny_model_dir), backend="pytorch"))
    states = states_until(client, EngineState.READY)
    yield client, hello, states
    client.shutdown()


def test_handshake_then_load_and_timed_warmup(engine):
    client, hello, states = engine
    assert hello.protocol_version == PROTOCOL_VERSION and hello.pid == client.pid
    order = [s.state for s in states]
    assert (
        order.index(EngineState.LOADING) < order.index(EngineState.WARMING) < order.index(EngineState.READY)
    )
    ready = states[-1]
    assert ready.backend == "pytorch" and ready.backend_reason == ""
    assert ready.load_seconds > 0 and ready.warmup_seconds > 0
    assert "warmed up in" in ready.detail and "loaded in" in ready.detail


def test_a_stream_yields_ordered_chunks_and_stats(engine):
    client = engine[0]
    request_id = client.synthesize(take(50))
    per_take, _ = collect_takes(client, [request_id])
    chunks = chunks_of(per_take[request_id])
    stats = finished_of(per_take[request_id]).stats
    assert len(chunks) >= 2  # 50 tokens stream in several chunks
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert all(c.samples.dtype == np.float32 and c.sample_rate == SAMPLE_RATE for c in chunks)
    samples = sum(c.samples.size for c in chunks)
    assert stats.audio_seconds == pytest.approx(samples / SAMPLE_RATE)
    assert stats.speech_tokens == 50 and stats.chunks == len(chunks) and not stats.cancelled
    assert 0 < stats.first_chunk_latency < stats.total_seconds
    assert stats.rtf == pytest.approx(stats.total_seconds / stats.audio_seconds)
    assert set(stats.stage_seconds) >= {"llm", "flow", "hift"}
    progress = [e.fraction for e in per_take[request_id] if isinstance(e, Progress)]
    assert len(progress) == len(chunks) and progress == sorted(progress) and progress[-1] == 1.0


def test_cancel_mid_stream(engine):
    client = engine[0]
    request = take(2000)  # 80 s of audio if it ran to the end

    def cancel_after_first_chunk(event):
        if getattr(event, "request_id", None) == request.request_id and getattr(event, "index", None) == 0:
            client.cancel(request.request_id)

    client.synthesize(request)
    per_take, _ = collect_takes(client, [request.request_id], timeout=60, on_event=cancel_after_first_chunk)
    stats = finished_of(per_take[request.request_id]).stats
    assert stats.cancelled
    assert stats.speech_tokens < 2000 and stats.audio_seconds < 20


def test_two_requests_run_concurrently(engine):
    client = engine[0]
    first, second = take(40, seed=1), take(40, seed=2, text="A second voice speaks at once.")
    client.synthesize(first)
    client.synthesize(second)
    per_take, states = collect_takes(client, [first.request_id, second.request_id])
    for request in (first, second):
        stats = finished_of(per_take[request.request_id]).stats
        assert stats.speech_tokens == 40 and not stats.cancelled
        assert chunks_of(per_take[request.request_id])
    assert max(s.active_requests for s in states if s.state is EngineState.BUSY) == 2
    assert states_until(client, EngineState.READY, timeout=10)  # idle again afterwards


def test_loading_the_same_model_again_does_not_reload(engine, tiny_model_dir):
    client, _, states = engine
    client.load_model(LoadModel(str(tiny_model_dir), backend="pytorch"))
    again = states_until(client, EngineState.READY, timeout=30)
    assert [s.state for s in again] == [EngineState.READY]  # no LOADING, no WARMING
    assert again[-1].load_seconds == states[-1].load_seconds


def test_a_bad_take_is_that_takes_error_and_the_engine_stays_ready(engine):
    client = engine[0]
    request_id = client.synthesize(Synthesize("Hello.", voice_id="nobody-saved-this"))
    per_take, _ = collect_takes(client, [request_id], timeout=60)
    error = per_take[request_id][-1]
    assert isinstance(error, Error) and "nobody-saved-this" in error.message and error.traceback
    states_until(client, EngineState.READY, timeout=30)
    assert client.is_alive()
