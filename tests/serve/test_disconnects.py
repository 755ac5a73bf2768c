"""A client that leaves cancels its take, whole-file or streamed, and a take that fails mid-stream breaks the
stream (the client sees an incomplete answer, never a clean end after a WAV header)."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.serve.conftest import API_KEY, register_voice

AUTH = {"Authorization": f"Bearer {API_KEY}"}
LONG = "This take is long enough to be abandoned well before it ends by itself. " * 3


@pytest.fixture(scope="module")
def voice(server):
    return register_voice(server[0], "Leaver")


def _cancelled(client) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "cosyvoice_speech_requests_total" and sample.labels["outcome"] == "cancelled":
                return sample.value
    return 0.0


def _settles(service, paced_engine) -> None:
    deadline = time.monotonic() + 10
    while (service.active or not paced_engine) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not service.active and paced_engine and paced_engine[-1].cancelled


def test_a_client_that_leaves_a_whole_file_take_cancels_it(server, client, voice, paced_engine):
    base, service = server
    before = _cancelled(client)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{base}/v1/audio/speech",
            headers=AUTH,
            json={"input": LONG, "voice": voice, "stream": False},
            timeout=httpx.Timeout(10, read=1.5),
        )
    _settles(service, paced_engine)
    assert _cancelled(client) == before + 1


def test_a_client_that_leaves_a_streamed_take_cancels_it(server, client, voice, paced_engine):
    _base, service = server
    before = _cancelled(client)
    body = {"input": LONG, "voice": voice, "response_format": "wav", "stream": True}
    with client.stream("POST", "/v1/audio/speech", json=body) as answer:
        pieces = answer.iter_raw()
        next(pieces)  # the WAV header leaves with the first chunk; the take may not be listed yet
        deadline = time.monotonic() + 10
        while not service.active and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(service.active) == 1
    _settles(service, paced_engine)
    assert _cancelled(client) == before + 1


def test_a_take_that_fails_mid_stream_breaks_the_stream(server, client, voice, failing_after_a_chunk):
    body = {"input": LONG, "voice": voice, "response_format": "wav", "stream": True}
    received = []
    with pytest.raises(httpx.RemoteProtocolError):
        with client.stream("POST", "/v1/audio/speech", json=body) as answer:
            assert answer.status_code == 200
            for piece in answer.iter_raw():
                received.append(piece)
    assert b"".join(received)[:4] == b"RIFF"
    whole = client.post("/v1/audio/speech", json={"input": LONG, "voice": voice, "stream": False})
    assert whole.status_code == 500 and whole.json()["error"]["type"] == "server_error"
    assert whole.headers["x-request-id"] in whole.json()["error"]["message"]
