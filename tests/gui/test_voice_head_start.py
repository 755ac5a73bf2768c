"""The voice's head start: the studio asks the engine to make the chosen voice's prompt state while the user
types (`PrepareVoice`), once per voice and loaded model, a recording by its audio and a library voice by its
id, as the take will send it. The engine's side is tests/engine/test_engine_prepare_voice.py."""

from __future__ import annotations

import numpy as np
import pytest

from studio.engine.protocol import EngineState, PrepareVoice, State
from studio.runtime.warmup import synthetic_voice
from studio.settings import data_dir
from studio.voices import VoiceLibrary

pytestmark = pytest.mark.gui


@pytest.fixture
def asked(window, monkeypatch):
    """What the window sends the engine, in order."""
    sent = []
    monkeypatch.setattr(window.bridge.client, "send", sent.append)
    return sent


def prepared(sent) -> list[PrepareVoice]:
    return [request for request in sent if isinstance(request, PrepareVoice)]


def test_a_voice_is_prepared_once_per_voice_and_model_while_the_engine_is_ready(window, asked, qtbot):
    head_start = window.voice_head_start
    voice = 0.4 * synthetic_voice(16000, 3.0, seed=11)
    window.voice_panel.set_recording(voice, 16000, "a voice")
    qtbot.waitUntil(lambda: window.voice_panel.current_prompt() is not None, timeout=60_000)
    assert not prepared(asked)  # no engine ready yet: nothing to ask

    head_start.on_engine_state(State(EngineState.READY, "ready"))
    (first,) = prepared(asked)
    cleaned = window.voice_panel.current_prompt()
    assert first.voice_id == "" and first.prompt_sr == cleaned.sample_rate
    np.testing.assert_array_equal(first.prompt_wav, cleaned.audio)  # what the take will send

    window.voice_panel.transcript.setText("A transcript typed now.")  # the prompt state does not change
    head_start.on_engine_state(State(EngineState.BUSY, "1 take(s) running"))
    head_start.on_engine_state(State(EngineState.READY, "ready"))
    assert len(prepared(asked)) == 1

    head_start.on_engine_state(State(EngineState.LOADING, "loading another model"))
    assert len(prepared(asked)) == 1  # not while loading
    head_start.on_engine_state(State(EngineState.READY, "ready"))
    assert len(prepared(asked)) == 2  # the new model has no prompt state yet

    VoiceLibrary(data_dir() / "voices").save("Alice", 0.4 * synthetic_voice(16000, 3.0), 16000, "A voice.")
    panel = window.voice_panel
    panel.refresh_voices()
    panel.on_pick_saved(panel.saved.findData("alice"))  # the user picks it in the list
    qtbot.waitUntil(lambda: len(prepared(asked)) == 3, timeout=10_000)
    assert prepared(asked)[-1] == PrepareVoice(voice_id="alice")  # by id, as its take is sent
