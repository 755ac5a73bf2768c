"""The transport (issue 13, item 2): play/pause/stop of any clip, Space, click-to-seek on the preview
and the reference waveforms, a playhead only on the waveform whose audio plays; and D8, the preview of a
take made without streaming shows a placeholder, not the previous take's outline."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt

from studio.runtime.warmup import synthetic_voice

pytestmark = pytest.mark.gui

RATE = 24000


def _tone(seconds: float, rate: int = RATE) -> np.ndarray:
    return (0.2 * np.sin(np.arange(int(rate * seconds)) * 0.05)).astype(np.float32)


def _stored_take(window, seconds=6.0):
    take = window.store.add(_tone(seconds), RATE, text="a long take", name="long take")
    window.takes_panel.refresh(select=take.id)
    return take


def _play_or_skip(window, take_id):
    if not window.playback.play_take(take_id):
        pytest.skip("no audio output device here")


def test_pause_keeps_the_place_and_resume_goes_on(window, qtbot):
    take = _stored_take(window)
    _play_or_skip(window, take.id)
    transport = window.playback.transport
    assert transport.state == "playing" and window.preview.play_button.text() == "❚❚ Pause"
    window.preview.play_button.click()  # pause
    assert transport.state == "paused" and window.player.is_paused
    assert window.preview.play_button.text() == "▶ Play" and window.preview.stop_playback_button.isEnabled()
    window.preview.play_button.click()  # resume, not a restart
    assert transport.state == "playing" and not window.player.is_paused
    window.preview.stop_playback_button.click()
    assert transport.state == "stopped" and not window.player.is_playing


def test_seek_while_paused_stays_paused_and_resumes_there(window):
    take = _stored_take(window)
    _play_or_skip(window, take.id)
    transport = window.playback.transport
    transport.pause()
    transport.seek(4.0)
    assert transport.state == "paused" and transport.position == pytest.approx(4.0)
    assert "0:04.0 / 0:06.0" == window.preview.time_label.text()
    transport.resume()
    assert transport.state == "playing" and window.player.position >= 4.0


def test_a_click_on_the_preview_seeks_there(window, qtbot):
    window.resize(1400, 900)
    window.show()
    take = _stored_take(window)
    _play_or_skip(window, take.id)
    view = window.preview.waveform
    qtbot.waitUntil(lambda: view.viewport().width() > 200)
    box = view.getPlotItem().vb.sceneBoundingRect()
    x = box.left() + 0.75 * box.width()  # three quarters into a 6 s take
    point = view.mapFromScene(x, box.center().y())
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(point.x(), point.y()))
    assert window.playback.transport.state == "playing"
    assert window.player.position == pytest.approx(4.5, abs=0.2)


def test_space_pauses_and_resumes_but_types_a_space_in_the_text(window, qtbot):
    window.show()
    take = _stored_take(window)
    _play_or_skip(window, take.id)
    window.takes_panel.tree.setFocus()
    qtbot.waitUntil(window.takes_panel.tree.hasFocus)
    qtbot.keyClick(window.takes_panel.tree, Qt.Key.Key_Space)
    assert window.playback.transport.state == "paused"
    qtbot.keyClick(window.takes_panel.tree, Qt.Key.Key_Space)
    assert window.playback.transport.state == "playing"
    editor = window.text_panel.editor
    editor.setFocus()
    qtbot.waitUntil(editor.hasFocus)
    editor.setPlainText("ab")
    editor.moveCursor(editor.textCursor().MoveOperation.End)
    qtbot.keyClick(editor, Qt.Key.Key_Space)
    assert editor.toPlainText() == "ab " and window.playback.transport.state == "playing"


def test_the_playhead_shows_on_the_reference_that_plays_only(window, qtbot):
    panel = window.voice_panel
    panel.set_recording(0.4 * synthetic_voice(16000, 4.0), 16000, origin="test")
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=30000)
    panel.play_before.click()
    if window.playback.transport.state != "playing":
        pytest.skip("no audio output device here")
    window.playback.transport.seek(1.5)
    assert panel.before._cursor.isVisible() and panel.before._cursor.value() == pytest.approx(1.5)
    assert not panel.after._cursor.isVisible() and not window.preview.waveform._cursor.isVisible()
    panel.after.sig_seek.emit(0.5)  # a click on the other waveform plays that one from there
    assert window.playback.transport.key == panel.reference_key("cleaned")
    assert panel.after._cursor.isVisible() and not panel.before._cursor.isVisible()
    panel.set_recording(
        0.4 * synthetic_voice(16000, 3.0, seed=1), 16000, origin="another"
    )  # new audio: not the clip playing
    window.playback.transport.seek(0.2)
    assert not panel.after._cursor.isVisible() and not panel.before._cursor.isVisible()
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=30000)


def test_a_take_made_without_streaming_waits_on_a_placeholder_not_an_old_outline(window):
    take = _stored_take(window, seconds=2.0)
    window.playback.play_take(take.id)  # the preview shows an earlier take
    window.playback.stop()
    window.preview.begin_take(streaming=False)
    view = window.preview.waveform
    assert view.samples.size == 0 and not view._fill.isVisible()
    assert "appears once it is complete" in view.placeholder
    window.preview.finish_take(0.5, 0.2, 1.0, cancelled=False)
    assert view.placeholder == ""
