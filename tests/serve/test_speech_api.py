"""The speech API against a real server (uvicorn on 127.0.0.1, httpx, tiny model): keys, voices, WAV and
streamed PCM, /health and /metrics, limits, a disconnect that cancels its take, concurrent requests."""

from __future__ import annotations

import io
import threading
import time

import httpx
import numpy as np
import pytest
import soundfile as sf

from studio.runtime.warmup import synthetic_voice
from studio.serve.service import MAX_INPUT_CHARS

RATE = 24000


def _wav_bytes(seconds=4.0, rate=22050) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, 0.4 * synthetic_voice(rate, seconds), rate, format="WAV")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def voice_id(server):
    import httpx

    from tests.serve.conftest import API_KEY

    base, _ = server
    answer = httpx.post(f"{base}/v1/voices", headers={"Authorization": f"Bearer {API_KEY}"},
                        data={"name": "Narrator", "transcript": "A calm voice reads a few words."},
                        files={"audio": ("narrator.wav", _wav_bytes(), "audio/wav")}, timeout=120)  # fmt: skip
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def test_every_route_but_health_needs_the_key(server):
    base, _ = server
    assert httpx.get(f"{base}/health").status_code == 200
    for method, path in (("GET", "/metrics"), ("GET", "/v1/voices"), ("POST", "/v1/audio/speech")):
        answer = httpx.request(method, f"{base}{path}", json={})
        assert answer.status_code == 401 and "API key" in answer.json()["error"]["message"]
    wrong = httpx.get(f"{base}/v1/voices", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401


def test_a_registered_voice_speaks_a_24khz_wav(client, voice_id):
    listed = client.get("/v1/voices").json()["data"]
    assert [v["id"] for v in listed] == [voice_id] and listed[0]["transcript"].startswith("A calm voice")
    answer = client.post("/v1/audio/speech", json={"model": "cosyvoice2", "input": "Hello from the server.",
                                                    "voice": voice_id, "seed": 3})  # fmt: skip
    assert answer.status_code == 200 and answer.headers["content-type"] == "audio/wav"
    audio, rate = sf.read(io.BytesIO(answer.content), dtype="float32")
    assert rate == RATE and audio.ndim == 1 and audio.size > RATE // 4 and np.isfinite(audio).all()


@pytest.mark.parametrize("fmt", ["flac", "mp3", "opus"])
def test_other_formats_decode(client, voice_id, fmt):
    answer = client.post(
        "/v1/audio/speech", json={"input": "Short.", "voice": voice_id, "response_format": fmt}
    )
    assert answer.status_code == 200, answer.text
    audio, _rate = sf.read(io.BytesIO(answer.content), dtype="float32")
    assert audio.size > 0


def test_streamed_pcm_arrives_in_pieces_and_is_whole_16_bit_samples(client, voice_id):
    body = {"input": "A streamed take, long enough for a few chunks to come.", "voice": voice_id,
            "response_format": "pcm", "stream": True, "seed": 1}  # fmt: skip
    pieces = []
    with client.stream("POST", "/v1/audio/speech", json=body) as answer:
        assert answer.status_code == 200 and answer.headers["x-sample-rate"] == str(RATE)
        for piece in answer.iter_raw():
            pieces.append(piece)
    data = b"".join(pieces)
    assert len(pieces) > 1 and len(data) % 2 == 0 and len(data) > 2 * RATE // 4
    assert np.abs(np.frombuffer(data, "<i2")).max() > 0


def test_streamed_wav_has_an_open_ended_header_and_plays(client, voice_id):
    body = {"input": "Streamed as a WAV file.", "voice": voice_id, "response_format": "wav", "stream": True}
    data = client.post("/v1/audio/speech", json=body).content
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    audio, rate = sf.read(io.BytesIO(data), dtype="int16")
    assert rate == RATE and audio.size == (len(data) - 44) // 2


def test_health_and_metrics_parse(client, voice_id):
    from prometheus_client.parser import text_string_to_metric_families

    health = client.get("/health").json()
    assert health["state"] == "ready" and health["backend"] == "pytorch" and health["active_takes"] == 0
    client.post("/v1/audio/speech", json={"input": "Counted.", "voice": voice_id})
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    outcomes = {s.labels.get("outcome"): s.value for s in families["cosyvoice_speech_requests"].samples
                if s.name.endswith("_total")}  # fmt: skip
    assert outcomes.get("ok", 0) >= 1
    assert "cosyvoice_first_chunk_seconds" in families and "cosyvoice_active_takes" in families


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"input": "x" * (MAX_INPUT_CHARS + 1)}, 422, "at most 4096"),
        ({"input": "   "}, 422, "empty"),
        ({"input": "Hi.", "voice": "alloy"}, 400, "unknown voice 'alloy'"),
        ({"input": "Hi.", "response_format": "aiff"}, 422, "response_format"),
        ({"input": "Hi.", "response_format": "mp3", "stream": True}, 422, "streaming needs"),
        ({"input": "Hi.", "first_hop_tokens": -1}, 422, "first_hop_tokens"),
        ({"input": "Hi.", "speed": 0}, 422, "speed"),
    ],
)
def test_bad_requests_say_what_is_wrong(client, voice_id, body, status, words):
    answer = client.post("/v1/audio/speech", json={"voice": voice_id, **body})
    assert answer.status_code == status and words in answer.json()["error"]["message"]


def test_an_oversize_body_is_refused_with_413(client):
    answer = client.post("/v1/audio/speech", content=b"{" + b" " * (5 << 20) + b"}",
                         headers={"content-type": "application/json"})  # fmt: skip
    assert answer.status_code == 413 and "at most" in answer.json()["error"]["message"]


def test_a_streamed_take_arrives_whole_while_the_client_reads(client, voice_id, paced_engine):
    body = {"input": "A streamed take on a slow card, read to its end by a patient client.",
            "voice": voice_id, "response_format": "pcm", "stream": True, "seed": 3}  # fmt: skip
    for _ in range(3):
        with client.stream("POST", "/v1/audio/speech", json=body) as answer:
            data = b"".join(answer.iter_raw())
        stats = paced_engine[-1]
        assert not stats.cancelled
        assert len(data) == 2 * round(stats.audio_seconds * RATE)


def test_a_take_may_ask_for_its_first_chunk_sooner(client, voice_id, paced_engine, monkeypatch):
    """The studio's "Start playing sooner" over the API: the take runs with the first hop asked for."""
    from studio.runtime import runner

    asked = []
    paced = runner.run_take
    monkeypatch.setattr(
        runner, "run_take", lambda model, request, **kw: asked.append(request) or paced(model, request, **kw)
    )
    body = {
        "input": "Soon.",
        "voice": voice_id,
        "response_format": "pcm",
        "stream": True,
        "first_hop_tokens": 10,
    }
    with client.stream("POST", "/v1/audio/speech", json=body) as answer:
        assert answer.status_code == 200 and b"".join(answer.iter_raw())
    assert [r.first_hop_tokens for r in asked] == [10]


def test_a_client_that_disconnects_cancels_its_take(server, client, voice_id, paced_engine):
    base, service = server
    body = {"input": "This take is long enough to be abandoned well before it ends by itself, " * 3,
            "voice": voice_id, "response_format": "pcm", "stream": True}  # fmt: skip
    with client.stream("POST", "/v1/audio/speech", json=body) as answer:
        pieces = answer.iter_raw()  # held: a dropped iterator closes the connection at once
        next(pieces)  # the first audio arrived: the take runs
        assert len(service.active) == 1
    deadline = time.monotonic() + 30
    while service.active and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not service.active  # no orphan take in the engine
    while not paced_engine and time.monotonic() < deadline:
        time.sleep(0.05)
    assert paced_engine and paced_engine[-1].cancelled  # the engine stopped it, it did not end by itself
    metrics = client.get("/metrics").text
    assert 'cosyvoice_speech_requests_total{outcome="cancelled"}' in metrics


def test_eight_concurrent_requests_all_succeed(server, voice_id):
    from tests.serve.conftest import API_KEY

    base, _ = server
    results: dict[int, tuple[int, int]] = {}

    def one(index: int) -> None:
        answer = httpx.post(f"{base}/v1/audio/speech", headers={"Authorization": f"Bearer {API_KEY}"},
                            json={"input": f"Request number {index}.", "voice": voice_id, "seed": index},
                            timeout=300)  # fmt: skip
        results[index] = (answer.status_code, len(answer.content))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert sorted(results) == list(range(8)) and all(
        code == 200 and size > 44 for code, size in results.values()
    )


def test_a_voice_can_be_deleted_and_bad_uploads_are_refused(client):
    made = client.post("/v1/voices", data={"name": "Temporary"},
                       files={"audio": ("t.wav", _wav_bytes(3.0), "audio/wav")})  # fmt: skip
    assert made.status_code == 201 and made.json()["transcript"] == ""  # no ASR here: cross-lingual only
    again = client.post("/v1/voices", data={"name": "temporary"}, files={"audio": ("t.wav", _wav_bytes(3.0))})
    assert again.status_code == 409 and "overwrite" in again.json()["error"]["message"]
    broken = client.post("/v1/voices", data={"name": "Broken"}, files={"audio": ("b.wav", b"RIFF not audio")})
    assert broken.status_code == 422 and "not audio" in broken.json()["error"]["message"]
    assert client.delete(f"/v1/voices/{made.json()['id']}").json()["deleted"] is True
    assert client.delete(f"/v1/voices/{made.json()['id']}").status_code == 404


def test_a_reference_sent_with_the_request_is_the_voice(client):
    import base64

    body = {"input": "Spoken in the sent voice.", "reference_text": "A calm voice reads a few words.",
            "reference_audio": base64.b64encode(_wav_bytes(3.0, 16000)).decode()}  # fmt: skip
    answer = client.post("/v1/audio/speech", json=body)
    assert answer.status_code == 200, answer.text
    assert sf.info(io.BytesIO(answer.content)).samplerate == RATE
    bad = client.post("/v1/audio/speech", json={**body, "reference_audio": "!!not base64!!"})
    assert bad.status_code == 422 and "base64" in bad.json()["error"]["message"]
