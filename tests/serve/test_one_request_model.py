"""The speech route hands the service the request model it validated, whole: no field is copied by hand,
so a field added to `SpeechBody` reaches the service without anyone remembering to pass it on."""

from __future__ import annotations

import pytest

from studio.serve.protocol import ServiceError, SpeechBody

#: a value for every field of the request, none of them its default
SENT = {
    "model": "tts-1",
    "input": "Hello there.",
    "voice": "alloy",
    "reference_audio": "UklGRg==",
    "reference_text": "the reference's transcript",
    "response_format": "pcm",
    "speed": 1.5,
    "instructions": "calmly",
    "seed": 7,
    "stream": True,
    "stream_format": "sse",
    "first_hop_tokens": 5,
    "ref_audio": "UklGRgA=",
    "ref_text": "vLLM-Omni's transcript",
    "task_type": "Base",
    "language": "English",
}


@pytest.fixture
def client_and_seen(tmp_path):
    from starlette.testclient import TestClient

    from studio.serve.app import create_app
    from studio.serve.service import SpeechService
    from studio.voices import VoiceLibrary

    service = SpeechService(str(tmp_path), VoiceLibrary(tmp_path / "voices"), warmup=False)
    seen = []

    def synthesize_request(body, request_id=""):
        seen.append((body, request_id))
        raise ServiceError(503, "the test stops here")

    service.synthesize_request = synthesize_request
    with TestClient(create_app(service)) as client:
        yield client, seen


def test_every_field_of_the_request_model_is_sent_by_this_test():
    assert set(SENT) == set(SpeechBody.model_fields)  # a new field: give it a value above
    defaults = SpeechBody.model_construct()
    assert [name for name, value in SENT.items() if getattr(defaults, name, None) == value] == []


def test_the_service_gets_the_validated_request_whole_with_the_http_request_id(client_and_seen):
    client, seen = client_and_seen
    answer = client.post("/v1/audio/speech", json=SENT, headers={"X-Request-Id": "req-42"})
    assert answer.status_code == 503
    ((body, request_id),) = seen
    assert isinstance(body, SpeechBody)
    assert body.model_dump() == SpeechBody.model_validate(SENT).model_dump()
    assert request_id == answer.headers["X-Request-Id"] != ""
