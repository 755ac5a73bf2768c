"""A busy server refuses at once instead of queueing without end (issue 34): with ``max_queued`` takes already
waiting, a speech request gets 503 in OpenAI's error shape with ``Retry-After``, counted in /metrics, and the
OpenAI SDK sees it as a server error; the takes already accepted still finish."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.serve.conftest import API_KEY, register_voice, running_server

AUTH = {"Authorization": f"Bearer {API_KEY}"}
TEXT = "A busy evening at the station, with trains arriving late and people waiting on every platform."


@pytest.fixture(scope="module")
def busy_server(tiny_model_dir, tmp_path_factory):
    """One worker and a queue of one: a second take waits for the worker, a third is refused."""
    import torch

    from studio.serve.service import SpeechService
    from studio.voices import VoiceLibrary

    torch.set_num_threads(1)
    voices = VoiceLibrary(tmp_path_factory.mktemp("busy-voices"))
    service = SpeechService(
        str(tiny_model_dir), voices, backend="pytorch", warmup=False, workers=1, max_queued=1
    )
    for base in running_server(service):
        yield base, service


def _until(condition, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_request_beyond_the_queue_limit_gets_503_with_retry_after(busy_server, paced_engine):
    import openai

    base, service = busy_server
    voice = register_voice(base, "Busy")
    answers: dict[str, httpx.Response] = {}

    def speak(name: str) -> None:
        body = {"input": TEXT, "voice": voice, "response_format": "pcm", "seed": 1}
        answers[name] = httpx.post(f"{base}/v1/audio/speech", json=body, headers=AUTH, timeout=300)

    first = threading.Thread(target=speak, args=("first",))
    first.start()
    _until(lambda: len(service.active) == 1 and service.queued == 0)  # the one worker runs it
    second = threading.Thread(target=speak, args=("second",))
    second.start()
    _until(lambda: service.queued == 1)  # waits for the worker: the queue is full

    refused = httpx.post(f"{base}/v1/audio/speech", json={"input": "Hello.", "voice": voice}, headers=AUTH)
    assert refused.status_code == 503, refused.text
    error = refused.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "server_error" and error["code"] == "server_busy" and "busy" in error["message"]
    assert int(refused.headers["Retry-After"]) >= 1

    sdk = openai.OpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0)
    with pytest.raises(openai.InternalServerError) as raised:
        sdk.audio.speech.create(model="cosyvoice2", voice=voice, input="Hello.")
    assert raised.value.status_code == 503 and int(raised.value.response.headers["retry-after"]) >= 1

    metrics = httpx.get(f"{base}/metrics", headers=AUTH).text
    assert 'cosyvoice_http_responses_total{status="503"} 2.0' in metrics

    first.join(300)
    second.join(300)
    assert answers["first"].status_code == 200 and answers["second"].status_code == 200
    assert answers["first"].content and answers["second"].content
    assert service.queued == 0
    after = httpx.post(
        f"{base}/v1/audio/speech", json={"input": "Hello again.", "voice": voice}, headers=AUTH
    )
    assert after.status_code == 200, after.text  # the queue emptied: accepted again
