"""The studio on a remote engine (issue 15, item 2): the engine client's interface over a real speech
server — takes stream back as chunks, Stop cancels, an unreachable or vanished server reads like a crash —
and the studio window itself generating and saving a take through it."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from studio.engine.client import EngineError
from studio.engine.protocol import AudioChunk, EngineState, Error, State, Synthesize, TakeFinished
from studio.engine.remote_client import RemoteEngineClient
from studio.runtime.warmup import synthetic_voice
from tests.serve.conftest import API_KEY, free_port


def _events_until(client, kinds, timeout=120.0):
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = client.get_event(timeout=0.1)
        if event is None:
            continue
        seen.append(event)
        if isinstance(event, kinds):
            return seen
    raise AssertionError(f"no {kinds} within {timeout} s: {seen[-5:]}")


def _take(text="Through the server.", **fields):
    return Synthesize(text, prompt_wav=0.4 * synthetic_voice(16000, 3.0), prompt_sr=16000,
                      prompt_text="A calm voice reads a few words.", seed=2, **fields)  # fmt: skip


def test_a_take_streams_back_and_stop_cancels_it(server):
    base, _service = server
    client = RemoteEngineClient(base, API_KEY, poll_seconds=0.2)
    hello = client.start()
    try:
        assert "server" in hello.python and client.last_state.state is EngineState.READY
        request = _take()
        client.synthesize(request)
        events = _events_until(client, (TakeFinished, Error))
        chunks = [e for e in events if isinstance(e, AudioChunk)]
        finished = events[-1]
        assert isinstance(finished, TakeFinished) and not finished.stats.cancelled
        assert chunks and all(c.sample_rate == 24000 and c.samples.dtype == np.float32 for c in chunks)
        assert finished.stats.audio_seconds == pytest.approx(sum(c.samples.size for c in chunks) / 24000)
        long = _take("A long take that the user stops well before its end, " * 4)
        client.synthesize(long)
        _events_until(client, (AudioChunk,))
        client.cancel(long.request_id)
        stopped = _events_until(client, (TakeFinished, Error))[-1]
        assert isinstance(stopped, TakeFinished) and stopped.stats.cancelled
    finally:
        client.shutdown()


def test_a_wrong_key_or_no_server_fails_clearly(server):
    base, _service = server
    free = free_port()
    with pytest.raises(EngineError, match="cannot reach the engine server"):
        RemoteEngineClient(f"http://127.0.0.1:{free}").start()
    client = RemoteEngineClient(base, "wrong-key", poll_seconds=0.2)
    client.start()  # /health needs no key
    try:
        client.synthesize(_take())
        error = _events_until(client, (TakeFinished, Error))[-1]
        assert isinstance(error, Error) and "401" in error.message and "API key" in error.message
    finally:
        client.shutdown()


def test_a_server_that_goes_away_reads_like_a_crash(server):
    import uvicorn

    from studio.serve.app import create_app

    _base, service = server
    port = free_port()
    second = uvicorn.Server(uvicorn.Config(create_app(service, API_KEY), host="127.0.0.1", port=port,
                                           log_level="warning"))  # fmt: skip
    thread = threading.Thread(target=second.run, daemon=True)
    thread.start()
    while not second.started:
        time.sleep(0.05)
    client = RemoteEngineClient(f"http://127.0.0.1:{port}", API_KEY, poll_seconds=0.2)
    client.start()
    try:
        second.should_exit = True
        thread.join(30)
        deadline = time.monotonic() + 30
        while client.last_state.state is not EngineState.CRASHED and time.monotonic() < deadline:
            time.sleep(0.1)
        events = [client.get_event(timeout=0) for _ in range(50)]
        states = [e for e in events if isinstance(e, State)]
        assert (
            states and states[-1].state is EngineState.CRASHED and "lost the connection" in states[-1].detail
        )
    finally:
        client.shutdown()


def test_the_studio_generates_and_saves_a_take_on_the_server(server, qtbot, tmp_path, monkeypatch):
    from studio.gui.app import create_window
    from studio.settings import Settings

    monkeypatch.setenv("STUDIO_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("STUDIO_DATA_DIR", str(tmp_path / "data"))
    base, _service = server
    window = create_window(Settings(model_dir="", engine_url=base, engine_key=API_KEY, asr_model="",
                                    output_dir=str(tmp_path / "takes")))  # fmt: skip
    qtbot.addWidget(window)
    try:
        assert window.pages.currentWidget() is window.studio_page  # no local model needed
        window.start_engine()
        qtbot.waitUntil(
            lambda: window.engine_status.state in (EngineState.READY, EngineState.BUSY), timeout=30000
        )
        window.voice_panel.set_recording(0.4 * synthetic_voice(16000, 4.0), 16000, origin="a voice")
        qtbot.waitUntil(lambda: window.voice_panel.current_prompt() is not None, timeout=30000)
        window.voice_panel.transcript.setText("A calm voice reads a few words.")
        window.text_panel.editor.setPlainText("Made on the server, saved here.")
        qtbot.waitUntil(window.text_panel.generate_button.isEnabled, timeout=10000)
        with qtbot.waitSignal(window.takes.sig_finished, timeout=120000) as finished:
            window.text_panel.generate_button.click()
        stats, take = finished.args
        assert stats is not None and stats.backend == "remote" and take is not None
        assert window.store.get(take.id).duration_s == pytest.approx(stats.audio_seconds)
    finally:
        window.shutdown()


def test_start_playing_sooner_reaches_the_server(server, monkeypatch):
    from studio.runtime import runner

    asked = []
    real = runner.run_take
    monkeypatch.setattr(
        runner, "run_take", lambda model, request, **kw: asked.append(request) or real(model, request, **kw)
    )
    base, _service = server
    client = RemoteEngineClient(base, API_KEY, poll_seconds=0.2)
    client.start()
    try:
        client.synthesize(_take(first_hop_tokens=10))
        assert isinstance(_events_until(client, (TakeFinished, Error))[-1], TakeFinished)
    finally:
        client.shutdown()
    assert [r.first_hop_tokens for r in asked] == [10]
