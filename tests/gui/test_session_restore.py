"""Closing and reopening the studio gives back the session as it was left (text, mode, instruction, speed,
seed, Reduce noise, the picked voice, the export format), written as it changes; Generate waits for a voice."""

from __future__ import annotations

import numpy as np
import pytest

from studio.engine.protocol import EngineState, State
from studio.request import Mode
from studio.runtime.warmup import synthetic_voice
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


def _draft_folder():
    from studio.settings import data_dir

    return data_dir(create=False) / "unsaved-recording"


def test_an_unsaved_recording_comes_back_after_a_restart(qtbot, monkeypatch, tiny_model_dir):
    window = _open(qtbot, monkeypatch, Settings(model_dir=str(tiny_model_dir), asr_model=""))
    panel = window.voice_panel
    original = 0.4 * synthetic_voice(22050, 4.0)
    panel.set_recording(original, 22050)
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=60_000)
    panel.transcript.setText("words I typed")
    window.text_panel.editor.setPlainText("Hello.")
    prompt = panel.current_prompt()
    window.close()  # no Save voice

    again = _open(qtbot, monkeypatch, load_settings())
    panel = again.voice_panel
    restored = panel.current_prompt()
    assert restored is not None and (restored.voice_id, restored.transcript) == ("", "words I typed")
    np.testing.assert_array_equal(restored.audio, prompt.audio)
    np.testing.assert_allclose(panel.reference_clip("original").samples, original, atol=1e-7)
    seconds = prompt.audio.size / prompt.sample_rate  # the prompt's length, as saved voices are listed
    assert panel.saved.currentIndex() == 0
    assert panel.saved.currentText() == f"— unsaved recording ({seconds:.1f} s) —"
    assert panel.report.text() == window.voice_panel.report.text()  # the cleanup summary, as it was
    assert not panel.transcript_box.retranscribe_button.isEnabled()  # no ASR model configured
    again.on_engine_state(State(EngineState.READY, "ready"))
    assert again.text_panel.generate_button.isEnabled()
    again.shutdown()


def test_the_saved_voice_picked_last_comes_back_and_the_unsaved_recording_stays_listed(
    qtbot, monkeypatch, tiny_model_dir
):
    window = _open(qtbot, monkeypatch, Settings(model_dir=str(tiny_model_dir), asr_model=""))
    panel = window.voice_panel
    panel.set_recording(0.4 * synthetic_voice(22050, 4.0), 22050)
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=60_000)
    panel.transcript.setText("the narrator")
    assert panel.save_voice("Narrator")
    assert panel.saved.itemText(0) == "— new recording —"  # saved: nothing unsaved any more
    panel.set_recording(0.4 * synthetic_voice(16000, 5.0), 16000)
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=60_000)
    panel.transcript.setText("a second try")
    unsaved = panel.current_prompt()
    panel.saved.setCurrentIndex(panel.saved.findData("narrator"))
    panel.on_pick_saved(panel.saved.currentIndex())
    window.close()

    again = _open(qtbot, monkeypatch, load_settings())
    panel = again.voice_panel
    assert panel.saved.currentData() == "narrator" and panel.current_prompt().voice_name == "Narrator"
    assert "unsaved recording" in panel.saved.itemText(0)
    panel.saved.setCurrentIndex(0)
    panel.on_pick_saved(0)
    back = panel.current_prompt()
    assert (back.voice_id, back.transcript) == ("", "a second try")
    np.testing.assert_array_equal(back.audio, unsaved.audio)
    assert panel.save_voice("Second")  # saved at last: the unsaved recording is gone from disk and list
    assert panel.saved.itemText(0) == "— new recording —" and not any(_draft_folder().iterdir())
    again.shutdown()


def test_an_unsaved_recording_survives_a_crash_of_the_studio(qtbot, monkeypatch, tiny_model_dir):
    window = _open(qtbot, monkeypatch, Settings(model_dir=str(tiny_model_dir), asr_model=""))
    panel = window.voice_panel
    panel.set_recording(0.4 * synthetic_voice(22050, 4.0), 22050, origin="take one.wav")
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=60_000)
    qtbot.keyClicks(panel.transcript, "typed before the crash")
    qtbot.waitUntil(
        lambda: "typed before the crash" in (_draft_folder() / "draft.json").read_text(), timeout=5000
    )
    window.shutdown()  # the window never closes: nothing is flushed at close

    again = _open(qtbot, monkeypatch, load_settings())
    restored = again.voice_panel.current_prompt()
    assert restored is not None and restored.transcript == "typed before the crash"
    again.shutdown()


def test_the_unsaved_recording_can_be_discarded(qtbot, monkeypatch, tiny_model_dir):
    from PySide6.QtWidgets import QMessageBox

    window = _open(qtbot, monkeypatch, Settings(model_dir=str(tiny_model_dir), asr_model=""))
    panel = window.voice_panel
    panel.set_recording(0.4 * synthetic_voice(22050, 4.0), 22050)
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=60_000)
    assert panel.delete_voice_button.isEnabled()
    asked = []
    monkeypatch.setattr(
        QMessageBox, "question", lambda *a, **k: asked.append(a[2]) or QMessageBox.StandardButton.Yes
    )
    panel.delete_voice_button.click()
    assert asked and "unsaved recording" in asked[0]
    assert panel.current_prompt() is None and panel.saved.itemText(0) == "— new recording —"
    window.close()
    again = _open(qtbot, monkeypatch, load_settings())
    assert again.voice_panel.current_prompt() is None
    again.shutdown()


def test_quitting_while_an_import_is_read_raises_nothing(qtbot, monkeypatch, tmp_path, tiny_model_dir):
    import soundfile as sf
    from PySide6.QtWidgets import QApplication

    window = _open(qtbot, monkeypatch, Settings(model_dir=str(tiny_model_dir), asr_model=""))
    wav = tmp_path / "late.wav"
    sf.write(wav, 0.4 * synthetic_voice(22050, 4.0), 22050)
    window.voice_panel.import_file(str(wav))
    window.close()  # the file is read after the jobs shut down: its result must not start new jobs
    QApplication.processEvents()  # delivers the read file's result
    assert window.voice_panel.current_prompt() is None


def test_a_recording_still_running_at_quit_comes_back(qtbot, monkeypatch, tiny_model_dir):
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice
    from PySide6.QtMultimedia import QAudioFormat

    window = _open(qtbot, monkeypatch, Settings(model_dir=str(tiny_model_dir), asr_model=""))
    voice = 0.4 * synthetic_voice(16000, 4.0)
    microphone = QBuffer()
    microphone.setData(QByteArray(np.round(voice * 32767).astype("<i2").tobytes()))
    assert microphone.open(QIODevice.OpenModeFlag.ReadOnly)
    recorder = window.voice_panel.recorder
    recorder.start_from_device(microphone, 16000, QAudioFormat.SampleFormat.Int16, 1)
    qtbot.waitUntil(microphone.atEnd, timeout=5000)
    window.close()  # still recording

    again = _open(qtbot, monkeypatch, load_settings())
    panel = again.voice_panel
    np.testing.assert_allclose(panel.reference_clip("original").samples, voice, atol=1e-4)
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=60_000)  # cleaned again
    assert "unsaved recording" in panel.saved.currentText()
    again.shutdown()
