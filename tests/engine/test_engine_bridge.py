"""The Qt bridge: a QThread-owned worker turns real engine events into signals; shutdown leaves no thread."""

from __future__ import annotations

import queue

import pytest

pytest.importorskip("pytestqt")

from studio.engine.protocol import (  # noqa: E402
    PROTOCOL_VERSION,
    EngineState,
    Hello,
    LoadModel,
    Synthesize,
    TakeQueued,
)
from studio.gui.engine.bridge import EngineBridge  # noqa: E402
from studio.runtime.warmup import WARMUP_PROMPT_TEXT, synthetic_voice  # noqa: E402

pytestmark = pytest.mark.gui


def test_bridge_reports_an_error_when_the_engine_is_not_running(qtbot, tmp_path):
    bridge = EngineBridge(log_path=tmp_path / "engine.log")
    request = Synthesize("Hello.", voice_id="anyone")
    with qtbot.waitSignal(bridge.sig_error, timeout=1000) as blocker:
        assert bridge.synthesize(request) == request.request_id
    error = blocker.args[0]
    assert error.request_id == request.request_id and "not running" in error.message
    assert not bridge.running and bridge.shutdown()


def test_bridge_streams_a_take_from_the_real_engine(qtbot, tmp_path, tiny_model_dir):
    bridge = EngineBridge(log_path=tmp_path / "engine.log")
    states, chunks, errors = [], [], []
    bridge.sig_state_changed.connect(states.append)
    bridge.sig_chunk.connect(chunks.append)
    bridge.sig_error.connect(errors.append)
    bridge.start(LoadModel(str(tiny_model_dir), backend="pytorch"))
    try:
        qtbot.waitUntil(
            lambda: any(s.state is EngineState.READY for s in states) or bool(errors), timeout=300_000
        )
        assert not errors, errors
        request = Synthesize(
            "Hello from the bridge.",
            prompt_wav=synthetic_voice(16000, 2.0),
            prompt_sr=16000,
            prompt_text=WARMUP_PROMPT_TEXT,
            stream=True,
            seed=3,
            exact_speech_tokens=40,
        )
        with qtbot.waitSignal(bridge.sig_take_finished, timeout=120_000) as finished:
            bridge.synthesize(request)
        stats = finished.args[0].stats
        assert finished.args[0].request_id == request.request_id and stats.speech_tokens == 40
        mine = [c for c in chunks if c.request_id == request.request_id]
        assert mine and sum(c.samples.size for c in mine) / 24000 == pytest.approx(stats.audio_seconds)
    finally:
        assert bridge.shutdown(wait_ms=60_000)  # True: the worker thread ended within the time
    assert not bridge.running
    qtbot.waitUntil(lambda: states[-1].state is EngineState.STOPPED, timeout=5000)  # queued signals arrive
    assert not bridge.client.is_alive()


class QueueClient:
    """An engine client whose events are whatever the test puts in ``events``."""

    last_state = None

    def __init__(self):
        self.events = queue.Queue()

    def start(self):
        return Hello(PROTOCOL_VERSION, 0, "test", "3")

    def get_event(self, timeout=None):
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def shutdown(self, timeout=30.0):
        pass


def test_a_take_queued_for_memory_reaches_the_gui_thread_as_sig_take_queued(qtbot):
    client = QueueClient()
    bridge = EngineBridge(client=client)
    bridge.start()
    try:
        with qtbot.waitSignal(bridge.sig_take_queued, timeout=5000) as queued:
            client.events.put(TakeQueued("abc"))
        assert queued.args[0] == TakeQueued("abc", "other takes are using it")
    finally:
        assert bridge.shutdown(wait_ms=5000)
