"""The engine transcribes a reference on request (no TTS model needed), alongside takes, and answers a
request it cannot serve with that request's Error while staying up."""

from __future__ import annotations

import pytest

from studio.engine.client import EngineClient
from studio.engine.protocol import Error, Transcribe, Transcript
from studio.runtime.warmup import synthetic_voice


@pytest.fixture
def client(tmp_path):
    with EngineClient(tmp_path / "logs" / "engine.log") as engine:  # started by the context
        yield engine


def _answer(client, request_id, timeout=120):
    for event in client.events(timeout=timeout):
        if isinstance(event, (Transcript, Error)) and event.request_id == request_id:
            return event
    raise AssertionError(f"no answer to {request_id} within {timeout} s")


def test_the_engine_transcribes_a_reference_and_says_why_when_it_cannot(client, tiny_asr_dir, tmp_path):
    request = Transcribe(synthetic_voice(16000, 6.0), 16000, str(tiny_asr_dir))
    client.send(request)
    heard = _answer(client, request.request_id)
    assert isinstance(heard, Transcript) and heard.text and heard.language and heard.seconds > 0

    missing = Transcribe(synthetic_voice(16000, 6.0), 16000, str(tmp_path / "no-whisper"))
    client.send(missing)
    refused = _answer(client, missing.request_id)
    assert isinstance(refused, Error) and "type the transcript" in refused.message

    silent = Transcribe(synthetic_voice(16000, 3.0) * 0.0 + 1e-9, 16000, str(tiny_asr_dir), language="en")
    client.send(silent)
    assert "no speech" in _answer(client, silent.request_id).message
    assert client.is_alive()
