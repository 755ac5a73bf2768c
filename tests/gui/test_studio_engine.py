"""The studio against the real engine process and the tiny model: a streamed take arrives chunk by chunk,
is on disk (WAV + sidecar) the moment it finishes and exports to a valid WAV; a killed engine shows the
crashed state and Restart engine brings it back."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import soundfile as sf
from PySide6.QtCore import Qt

from studio.engine.protocol import EngineState
from studio.runtime.warmup import synthetic_voice
from studio.settings import Settings

pytestmark = pytest.mark.gui
ENGINE_TIMEOUT_MS = 240_000


@pytest.fixture
def studio(qtbot, tiny_model_dir, monkeypatch):
    import dataclasses

    from studio.gui import main_window
    from studio.gui.app import create_window

    # the warm-up is the engine's own (tested there); skipping it halves this test's CPU time
    real_request = main_window.load_request
    monkeypatch.setattr(
        main_window, "load_request", lambda s: dataclasses.replace(real_request(s), warmup=False)
    )

    window = create_window(Settings(model_dir=str(tiny_model_dir), backend="pytorch"))
    qtbot.addWidget(window)
    window.show()
    window.start_engine()
    yield window
    window.shutdown()


def wait_for_state(qtbot, window, wanted: EngineState, timeout=ENGINE_TIMEOUT_MS):
    qtbot.waitUntil(lambda: window.engine_status.state == wanted, timeout=timeout)


def test_generate_stream_save_export_then_crash_and_restart(qtbot, studio, tmp_path):
    window = studio
    assert window.pages.currentWidget() is window.studio_page
    wait_for_state(qtbot, window, EngineState.READY)
    assert "Ready" in window.engine_status.label.text()

    window.voice_panel.set_recording(synthetic_voice(16000, 4.0), 16000, origin="test voice")
    qtbot.waitUntil(lambda: window.voice_panel.current_prompt() is not None, timeout=30_000)
    # the engine makes the voice's prompt state while the user types (PrepareVoice)
    engine_log = window.bridge.client.log_path
    qtbot.waitUntil(lambda: "voice (recording) prepared" in engine_log.read_text(), timeout=60_000)
    window.voice_panel.transcript.setText("A calm voice reads a few plain words aloud.")
    window.text_panel.editor.setPlainText("Hi there [breath] friend.")
    window.text_panel.random_seed.setChecked(False)
    window.text_panel.seed.setValue(7)
    assert window.text_panel.generate_button.isEnabled()

    chunks = []
    window.takes.sig_chunk.connect(lambda samples, _latency: chunks.append(samples))
    with qtbot.waitSignal(window.takes.sig_finished, timeout=ENGINE_TIMEOUT_MS) as finished:
        window.text_panel.generate_button.click()
        assert window.text_panel.stop_button.isEnabled()
    stats, take = finished.args
    assert chunks, "no audio chunk arrived"
    assert stats is not None and not stats.cancelled and stats.chunks == len(chunks)

    # on disk at once: WAV with exactly the streamed samples, and a sidecar describing the take
    audio, rate = sf.read(window.store.wav_path(take.id), dtype="float32")
    assert rate == 24000
    np.testing.assert_array_equal(audio, np.concatenate(chunks))
    sidecar = json.loads(window.store.sidecar_path(take.id).read_text())
    assert sidecar["text"] == "Hi there [breath] friend."
    assert sidecar["seed"] == 7 and sidecar["mode"] == "zero-shot"
    assert sidecar["stats"]["rtf"] == pytest.approx(stats.rtf)
    assert window.preview.waveform.samples.size == audio.size
    assert "RTF" in window.preview.stats.text()
    assert not window.text_panel.stop_button.isEnabled()

    # the takes list shows it; exporting writes a valid 16-bit WAV of the same audio
    listed = window.takes_panel.tree.topLevelItem(0)
    assert listed.data(0, 256) == take.id and listed.isSelected()
    out = tmp_path / "exports"
    out.mkdir()
    written = window.takes_panel.export_selected(folder=out)
    assert len(written) == 1 and written[0].suffix == ".wav"
    info = sf.info(written[0])
    assert (info.samplerate, info.channels, info.subtype) == (24000, 1, "PCM_16")
    exported, _ = sf.read(written[0], dtype="float32")
    np.testing.assert_allclose(exported, audio, atol=1.5 / 32767)

    # Esc stops a take mid-stream: the engine cancels it, the partial take is kept and marked stopped
    window.text_panel.editor.setPlainText(
        "This take is long enough to be stopped well before it ends by itself."
    )
    first_chunk = []
    window.takes.sig_chunk.connect(lambda samples, _latency: first_chunk.append(samples))
    window.text_panel.generate_button.click()
    qtbot.waitUntil(lambda: bool(first_chunk), timeout=ENGINE_TIMEOUT_MS)
    with qtbot.waitSignal(window.takes.sig_finished, timeout=60_000) as stopped:
        qtbot.keyClick(window.text_panel.editor, Qt.Key.Key_Escape)
    stats, partial = stopped.args
    assert stats.cancelled
    assert partial is not None and partial.name.startswith("(stopped)")
    assert not window.player.is_playing

    # kill the engine: the status bar shows the crash and offers Restart, which brings it back
    pid = window.bridge.client.pid
    os.kill(pid, signal.SIGKILL)
    wait_for_state(qtbot, window, EngineState.CRASHED, timeout=30_000)
    assert window.engine_status.restart_button.isVisible()
    assert "crashed" in window.engine_status.label.text().lower()
    assert not window.text_panel.generate_button.isEnabled()
    window.engine_status.restart_button.click()
    wait_for_state(qtbot, window, EngineState.READY)
    assert window.bridge.client.pid != pid
    assert not window.engine_status.restart_button.isVisible()
    assert window.text_panel.generate_button.isEnabled()
