"""End to end with the real engine process and the tiny random Whisper: a reference recorded into the
studio gets its transcript filled in automatically, marked so, and it goes out with the next take."""

from __future__ import annotations

import pytest

from studio.engine.protocol import EngineState
from studio.request import Mode
from studio.runtime.warmup import synthetic_voice
from studio.settings import Settings

pytestmark = pytest.mark.gui


def test_a_recorded_reference_is_transcribed_by_the_engine(qtbot, tiny_asr_dir):
    from studio.gui.app import create_window

    window = create_window(Settings(model_dir="", asr_model=str(tiny_asr_dir)))  # no TTS model needed
    qtbot.addWidget(window)
    window.start_engine()
    try:
        qtbot.waitUntil(lambda: window.engine_status.state == EngineState.STARTING or window.bridge.running)
        panel = window.voice_panel
        panel.set_recording(synthetic_voice(22050, 5.0), 22050, origin="the test voice")
        qtbot.waitUntil(lambda: panel.transcript_box.automatic, timeout=120_000)
        assert panel.transcript.text() and panel.transcript_box.language
        assert "automatic" in panel.transcript_box.status.text()
        panel.transcript_box.cross_lingual_button.click()
        assert window.text_panel.current_request().mode is Mode.CROSS_LINGUAL
        assert panel.current_prompt().transcript == panel.transcript.text()
    finally:
        window.shutdown()
