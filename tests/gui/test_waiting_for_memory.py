"""A take the engine holds back for GPU memory (TakeQueued) reads as waiting, not as a hang: the preview's status
line and the Script tab's line status say so until the take's first chunk arrives, and a take whose audio
pauses mid-take (it waits to grow its state) says so until its next chunk.

The window runs without an engine process: the bridge's client takes the requests, and the test emits the
bridge's signals as the engine's events would (the engine's side is tests/engine/test_engine_take_queued.py)."""

from __future__ import annotations

import numpy as np
import pytest

from studio.engine.protocol import AudioChunk, TakeFinished, TakeQueued, TakeStats
from studio.gui.take.text_panel import TextRequest
from studio.gui.voice.voice_panel import Prompt
from studio.request import Mode
from studio.runtime.warmup import synthetic_voice
from studio.settings import data_dir
from studio.voices import VoiceLibrary

pytestmark = pytest.mark.gui
WAITING = "Waiting for GPU memory… (other takes are using it)"
PAUSED = "Paused: waiting for GPU memory to go on (other takes are using it) · 0.1 s so far"
SCRIPT = "[Alice] The first line.\n[Alice] The second line.\n"


@pytest.fixture
def sent(window, monkeypatch):
    """The requests the window sends to the engine, in order."""
    requests = []
    monkeypatch.setattr(window.bridge.client, "synthesize", lambda request: requests.append(request))
    monkeypatch.setattr(window.bridge.client, "cancel", lambda request_id: None)
    return requests


def _chunk(request_id: str, index: int = 0) -> AudioChunk:
    return AudioChunk(request_id, index, np.full(2400, 0.1, np.float32), 24000)


def _stats(chunks: int) -> TakeStats:
    return TakeStats(0.5, 1.0, 0.1 * chunks, 10.0, 10, chunks)


def test_the_preview_says_a_queued_take_waits_for_memory_until_its_first_chunk(window, sent, qtbot):
    text = TextRequest(
        text="Hello there.", mode=Mode.CROSS_LINGUAL, instruct="", speed=1.0, seed=3, stream=True
    )
    prompt = Prompt(np.zeros(16000, np.float32), 16000, transcript="", voice_name="Ada")
    assert window.takes.start(text, prompt)
    request_id = sent[-1].request_id
    preview = window.preview
    assert preview.stats.text() == "Waiting for the first chunk…"

    window.bridge.sig_take_queued.emit(TakeQueued("another-take"))  # someone else's take: not ours
    assert preview.stats.text() == "Waiting for the first chunk…"
    window.bridge.sig_take_queued.emit(TakeQueued(request_id))
    qtbot.waitUntil(lambda: preview.stats.text() == WAITING, timeout=2000)
    assert preview.waveform.placeholder == WAITING

    window.bridge.sig_chunk.emit(_chunk(request_id))
    qtbot.waitUntil(lambda: preview.stats.text().startswith("First audio after"), timeout=2000)
    assert "GPU memory" not in preview.stats.text() and preview.waveform.placeholder == ""
    window.bridge.sig_take_queued.emit(TakeQueued(request_id))  # mid-take: it waits to grow its state
    qtbot.waitUntil(lambda: preview.stats.text() == PAUSED, timeout=2000)
    assert preview.waveform.placeholder == "" and preview.waveform.duration == pytest.approx(0.1)
    window.bridge.sig_chunk.emit(_chunk(request_id, 1))  # it goes on: the pause is over
    qtbot.waitUntil(lambda: preview.stats.text().startswith("First audio after"), timeout=2000)

    window.bridge.sig_take_finished.emit(TakeFinished(request_id, _stats(2)))
    qtbot.waitUntil(lambda: not window.takes.busy, timeout=2000)


def test_a_script_line_waiting_for_memory_shows_it_on_its_status_until_its_audio_comes(
    window, sent, qtbot, tmp_path
):
    VoiceLibrary(data_dir() / "voices").save(
        "Alice", 0.4 * synthetic_voice(16000, 3.0), 16000, "A calm voice."
    )
    view = window.script_view
    script = tmp_path / "Story.txt"
    script.write_text(SCRIPT, encoding="utf-8")
    view.open_script(str(script))
    view.render_all()
    qtbot.waitUntil(lambda: len(sent) == 2, timeout=2000)
    first, second = (request.request_id for request in sent)
    assert [view.table.status_of(row) for row in range(2)] == ["rendering…", "rendering…"]

    window.bridge.sig_take_queued.emit(TakeQueued(second))
    assert [view.table.status_of(row) for row in range(2)] == ["rendering…", "waiting for GPU memory…"]
    with qtbot.assertNotEmitted(view.controller.sig_line):
        view.controller.retake(2)  # a waiting line is in flight: no second take of it

    window.bridge.sig_chunk.emit(_chunk(second))
    assert view.table.status_of(1) == "rendering…"
    window.bridge.sig_take_queued.emit(TakeQueued(second))  # mid-take: it waits to go on
    assert view.table.status_of(1) == "waiting for GPU memory…"
    window.bridge.sig_chunk.emit(_chunk(second, 1))
    assert view.table.status_of(1) == "rendering…"
    window.bridge.sig_chunk.emit(_chunk(first))
    with qtbot.waitSignal(view.controller.sig_finished, timeout=5000):
        window.bridge.sig_take_finished.emit(TakeFinished(first, _stats(1)))
        window.bridge.sig_take_finished.emit(TakeFinished(second, _stats(1)))
    assert [view.table.status_of(row) for row in range(2)] == ["✓ rendered", "✓ rendered"]
