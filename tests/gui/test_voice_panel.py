"""The voice panel: import (file or drop) -> cleaned off the GUI thread -> save as a named voice -> pick it."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from studio.gui.voice.voice_panel import VoicePanel
from studio.gui.widgets.jobs import BackgroundJobs
from studio.runtime.warmup import synthetic_voice
from studio.voices import VoiceLibrary

pytestmark = pytest.mark.gui


@pytest.fixture
def panel(qtbot, tmp_path):
    jobs = BackgroundJobs()
    widget = VoicePanel(VoiceLibrary(tmp_path / "voices"), jobs)
    qtbot.addWidget(widget)
    yield widget
    widget.stop()
    jobs.shutdown()


def test_dropped_file_is_cleaned_saved_and_picked_again(panel, qtbot, tmp_path):
    wav = tmp_path / "me.wav"
    padded = np.concatenate([np.zeros(44100), 0.4 * synthetic_voice(44100, 4.0), np.zeros(44100)])
    sf.write(wav, padded.astype(np.float32), 44100)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(wav))])
    drop = QDropEvent(
        QPointF(5, 5),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    panel.dropEvent(drop)
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=60_000)
    prompt = panel.current_prompt()
    assert prompt.sample_rate == 16000
    assert 3.5 < prompt.audio.size / 16000 < 5.0  # the silent second on each side is trimmed
    assert 20 * np.log10(np.abs(prompt.audio).max()) == pytest.approx(-3.0, abs=0.1)
    assert panel.before.duration == pytest.approx(6.0, abs=0.01) and panel.after.duration < 5.0
    assert "→" in panel.report.text()
    assert panel.play_before.isEnabled() and panel.play_after.isEnabled()

    panel.transcript.setText("A calm voice reads.")
    assert panel.save_voice("Calm voice")
    assert panel.saved.currentData() == "calm-voice"
    assert panel.current_prompt().voice_id == "calm-voice"

    panel.set_recording(synthetic_voice(16000, 3.5), 16000)  # a new recording replaces the saved voice
    assert panel.current_prompt() is None and panel.saved.currentIndex() == 0
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=60_000)
    assert panel.current_prompt().voice_id == ""

    panel.saved.setCurrentIndex(panel.saved.findData("calm-voice"))
    panel.on_pick_saved(panel.saved.currentIndex())
    picked = panel.current_prompt()
    assert (picked.voice_id, picked.voice_name, picked.transcript) == (
        "calm-voice",
        "Calm voice",
        "A calm voice reads.",
    )
    np.testing.assert_allclose(picked.audio, prompt.audio, atol=1e-6)


def test_an_unreadable_file_shows_the_audio_core_error(panel, qtbot, tmp_path):
    bad = tmp_path / "notes.wav"
    bad.write_text("not audio at all")
    panel.import_file(str(bad))
    qtbot.waitUntil(lambda: "e57373" in panel.report.text(), timeout=10_000)
    assert panel.current_prompt() is None


def test_the_panel_gives_the_one_length_advice_and_names_an_imported_file(panel, qtbot, tmp_path):
    from studio.request import PROMPT_LENGTH_ADVICE

    assert PROMPT_LENGTH_ADVICE in panel.report.text()
    hiss = tmp_path / "hiss.wav"
    sf.write(hiss, (0.05 * np.random.default_rng(1).standard_normal(16000 * 3)).astype(np.float32), 16000)
    panel.import_file(str(hiss))
    qtbot.waitUntil(lambda: "No speech" in panel.report.text(), timeout=30_000)
    assert "No speech was found in hiss.wav;" in panel.report.text(), panel.report.text()


def test_picking_a_saved_voice_while_a_recording_is_cleaned_keeps_both(panel, qtbot):
    panel.set_recording(0.4 * synthetic_voice(22050, 4.0), 22050)
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=60_000)
    assert panel.save_voice("Kept")
    kept = panel.current_prompt()
    panel.set_recording(0.4 * synthetic_voice(22050, 6.0), 22050)  # cleaning starts
    panel.saved.setCurrentIndex(panel.saved.findData("kept"))
    panel.on_pick_saved(panel.saved.currentIndex())
    qtbot.waitUntil(lambda: not panel.jobs.busy, timeout=60_000)
    np.testing.assert_array_equal(panel.current_prompt().audio, kept.audio)  # the late cleaning is dropped
    panel.on_pick_saved(0)  # the unsaved recording, cleaned again
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=60_000)
    assert panel.current_prompt().voice_id == "" and panel.after.duration > 5.0


def test_a_refused_save_is_told_in_a_sentence(panel, qtbot, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    panel.set_recording(0.4 * synthetic_voice(22050, 4.0), 22050)
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=60_000)
    told = []
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, _title, text: told.append(text))
    assert not panel.save_voice("  ")
    assert told == ["A voice name cannot be empty."]


def test_a_disk_that_refuses_the_unsaved_recording_is_told(qtbot, tmp_path):
    from studio.gui.voice.reference_draft import DraftStore

    blocked = tmp_path / "unsaved-recording"
    blocked.write_text("a file where the folder should be")
    jobs = BackgroundJobs()
    panel = VoicePanel(VoiceLibrary(tmp_path / "voices"), jobs, drafts=DraftStore(blocked))
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.sig_message, timeout=10_000) as told:
        panel.set_recording(0.4 * synthetic_voice(22050, 4.0), 22050)
    assert str(blocked) in told.args[0] and "kept only until the studio closes" in told.args[0]
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=60_000)  # the studio carries on
    jobs.shutdown()
