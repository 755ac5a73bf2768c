"""A real server for the API tests: uvicorn on 127.0.0.1 (a free port) in a thread, the tiny model on the
PyTorch backend, a private voice library, and a key."""

from __future__ import annotations

import socket
import threading
import time

import pytest

API_KEY = "test-key-123"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def running_server(service):
    """Serve ``service`` with uvicorn on a free port in a thread, load its model; yields the base URL."""
    import httpx
    import uvicorn

    from studio.serve.app import create_app

    port = free_port()
    config = uvicorn.Config(create_app(service, API_KEY), host="127.0.0.1", port=port, log_level="warning")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, name="uvicorn", daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert httpx.get(f"{base}/health").json()["state"] == "starting"  # up before the model loads
    service.load()
    try:
        yield base
    finally:
        uv.should_exit = True
        thread.join(30)
        service.close()


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    import torch

    from studio.serve.service import SpeechService
    from studio.voices import VoiceLibrary

    torch.set_num_threads(1)  # two cores: one intra-op thread per take keeps concurrent takes quick
    voices = VoiceLibrary(tmp_path_factory.mktemp("voices"))
    service = SpeechService(str(tiny_model_dir), voices, backend="pytorch", warmup=False)
    for base in running_server(service):
        yield base, service


def wav_bytes(seconds: float, rate: int = 16000, fmt: str = "WAV", silent: bool = False) -> bytes:
    """A speech-like recording (or silence) as the bytes of an audio file."""
    import io

    import numpy as np
    import soundfile as sf

    from studio.runtime.warmup import synthetic_voice

    samples = np.zeros(int(seconds * rate), np.float32) if silent else 0.4 * synthetic_voice(rate, seconds)
    buffer = io.BytesIO()
    sf.write(buffer, samples, rate, format=fmt, subtype="PCM_16")
    return buffer.getvalue()


def register_voice(base: str, name: str, seconds: float = 3.0) -> str:
    """Register a voice through the API; its id."""
    import httpx

    made = httpx.post(
        f"{base}/v1/voices",
        headers={"Authorization": f"Bearer {API_KEY}"},
        data={"name": name, "transcript": "A calm voice."},
        files={"audio": ("voice.wav", wav_bytes(seconds))},
        timeout=120,
    )
    assert made.status_code == 201, made.text
    return made.json()["id"]


@pytest.fixture
def client(server):
    import httpx

    base, _service = server
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120) as http:
        yield http


@pytest.fixture
def paced_engine(monkeypatch):
    """The real engine, paused after each chunk like a slow card: the tiny model can otherwise finish a take
    before its first bytes reach the client. Yields the stats of the takes it ran."""
    from studio.runtime import runner

    real_run_take, finished = runner.run_take, []

    def paced_run_take(model, request, *, on_chunk=None, **kwargs):
        def paced(samples):
            on_chunk(samples)
            time.sleep(0.3)

        finished.append(real_run_take(model, request, on_chunk=paced, **kwargs))
        return finished[-1]

    monkeypatch.setattr(runner, "run_take", paced_run_take)
    return finished


@pytest.fixture
def failing_after_a_chunk(monkeypatch):
    """The real engine, failing each take with a RuntimeError right after its first chunk (a card that fell
    off the bus mid-take)."""
    from studio.runtime import runner

    real_run_take = runner.run_take

    def fails_after_a_chunk(model, request, *, on_chunk=None, **kwargs):
        def then_fail(samples):
            on_chunk(samples)
            raise RuntimeError("the card fell off the bus")

        return real_run_take(model, request, on_chunk=then_fail, **kwargs)

    monkeypatch.setattr(runner, "run_take", fails_after_a_chunk)
