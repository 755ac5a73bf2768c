"""Closing and reopening the studio gives back the session as it was left (text, mode, instruction, speed,
seed, Reduce noise, the picked voice, the export format), written as it changes; Generate waits for a voice."""

from __future__ import annotations

import pytest

from studio.engine.protocol import EngineState, State
from studio.engine.warmup import synthetic_voice
from studio.request import Mode
from studio.settings import Settings, load_settings

pytestmark = pytest.mark.gui


def _open(qtbot, monkeypatch, settings):
    from studio.gui.app import create_window

    window = create_window(settings)
    qtbot.addWidget(window)
    monkeypatch.setattr(window, "start_engine", lambda: None)  # the engine is tested elsewhere
    return window


def test_the_session_comes_back_after_a_restart(qtbot, monkeypatch, tmp_path, tiny_model_dir):
    window = _open(qtbot, monkeypatch, Settings(model_dir=str(tiny_model_dir), asr_model=""))
    panel, text = window.voice_panel, window.text_panel
    panel.set_recording(0.4 * synthetic_voice(22050, 4.0), 22050, "a voice")
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=60_000)
    panel.transcript.setText("a calm voice")
    assert panel.save_voice("Narrator")
    text.editor.setPlainText("Once upon a time.")
    text.mode.setCurrentIndex(text.mode.findData(Mode.INSTRUCT.value))
    text.instruct.setText("whisper it")
    text.speed.setValue(1.25)
    text.random_seed.setChecked(False)
    text.seed.setValue(4242)
    panel.denoise_prompt.blockSignals(True)
    panel.denoise_prompt.setChecked(True)
    panel.denoise_prompt.blockSignals(False)
    window.takes_panel.export_format.setCurrentIndex(window.takes_panel.export_format.count() - 1)
    export_format = window.takes_panel.export_format.currentData()
    qtbot.waitUntil(lambda: load_settings().extra.get("session", {}).get("seed") == 4242, timeout=5000)
    window.close()  # flushes too

    again = _open(qtbot, monkeypatch, load_settings())
    request = again.text_panel.current_request()
    assert (request.text, request.mode, request.instruct, request.speed, request.seed) == (
        "Once upon a time.", Mode.INSTRUCT, "whisper it", 1.25, 4242,
    )  # fmt: skip
    assert again.voice_panel.denoise_prompt.isChecked()
    assert (
        again.voice_panel.current_prompt() is not None
        and again.voice_panel.current_prompt().voice_name == "Narrator"
    )
    assert again.takes_panel.export_format.currentData() == export_format
    again.on_engine_state(State(EngineState.READY, "ready"))
    assert again.text_panel.generate_button.isEnabled()
    again.shutdown()


def test_generate_waits_for_a_voice(qtbot, monkeypatch, tiny_model_dir):
    window = _open(qtbot, monkeypatch, Settings(model_dir=str(tiny_model_dir), asr_model=""))
    window.text_panel.editor.setPlainText("Hello.")
    window.on_engine_state(State(EngineState.READY, "ready"))
    button = window.text_panel.generate_button
    assert not button.isEnabled() and "voice first" in button.toolTip()
    window.voice_panel.set_recording(0.4 * synthetic_voice(22050, 4.0), 22050, "a voice")
    qtbot.waitUntil(button.isEnabled, timeout=60_000)
    window.shutdown()
