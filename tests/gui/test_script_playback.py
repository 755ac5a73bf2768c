"""Playing in the Script tab shows what plays: a marker on the line's row (it follows the lines while
"From here" plays on), the line and the position, a Stop; Space pauses and resumes there (and plays the
selected line when nothing plays), Esc stops."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from studio.runtime.warmup import synthetic_voice
from studio.settings import data_dir
from studio.voices import VoiceLibrary

pytestmark = pytest.mark.gui
RATE = 24000
SECONDS = (1.0, 1.5, 2.0)  # the three lines' lengths


@pytest.fixture
def view(window, qtbot):
    VoiceLibrary(data_dir() / "voices").save("Alice", 0.4 * synthetic_voice(16000, 3.0), 16000, "")
    window.show()
    window.views.setCurrentWidget(window.script_view)
    view = window.script_view
    view.refresh_voices()
    view.new_project()
    for number in range(len(SECONDS)):
        view.table.add_line("Alice", f"Line number {number + 1}.")
    records = view.controller.plan(view.folder, view.table.lines())
    for record, seconds in zip(records, SECONDS, strict=True):  # as the engine's takes would be written
        tone = 0.2 * np.sin(np.arange(int(RATE * seconds)) * 0.05)
        view.controller.render.finish_line(record, tone.astype(np.float32), RATE)
        view.table.show_record(record)
    view.controller.render.save(records)
    view.table.setFocus()
    qtbot.waitUntil(view.table.hasFocus)
    return view


def _playing_rows(view):
    return [row for row in range(view.table.rowCount()) if view.table.item(row, 0).text().startswith("▶")]


def _play_or_skip(view, button):
    button.click()
    if view.transport.state != "playing":
        pytest.skip("no audio output device here")


def test_a_line_playing_shows_its_row_its_position_and_a_stop(view, qtbot):
    assert not view.stop_playing_button.isEnabled() and view.play_position.text() == ""
    view.table.selectRow(1)
    _play_or_skip(view, view.play_button)
    assert _playing_rows(view) == [1]
    assert view.stop_playing_button.isEnabled()
    qtbot.waitUntil(lambda: view.transport.position > 0.1, timeout=5000)
    assert view.play_position.text().startswith("▶ Line 2 · 0:00.")
    assert view.play_position.text().endswith("/ 0:01.5")

    qtbot.keyClick(view.table, Qt.Key.Key_Space)
    assert view.transport.state == "paused" and _playing_rows(view) == [1]
    assert view.play_position.text().startswith("❚❚ Line 2")
    qtbot.keyClick(view.table, Qt.Key.Key_Space)
    assert view.transport.state == "playing"

    qtbot.keyClick(view.table, Qt.Key.Key_Escape)
    assert view.transport.state == "stopped"
    assert _playing_rows(view) == [] and view.play_position.text() == ""
    assert not view.stop_playing_button.isEnabled()
    assert [view.table.item(row, 0).text() for row in range(3)] == ["1", "2", "3"]


def test_playing_from_a_line_moves_the_marker_along_the_lines(view, qtbot):
    view.table.selectRow(0)
    _play_or_skip(view, view.play_from_button)
    assert _playing_rows(view) == [0]
    gap = view.controller.render.gap_before(view.controller.records[1])
    view.transport.seek(SECONDS[0] + gap + 0.2)  # into line 2
    assert _playing_rows(view) == [1] and view.play_position.text().startswith("▶ Line 2")
    view.transport.seek(SECONDS[0] + SECONDS[1] + 2 * gap + 0.2)  # into line 3
    assert _playing_rows(view) == [2]
    view.stop_playing_button.click()
    assert view.transport.state == "stopped" and _playing_rows(view) == []


def test_space_with_nothing_playing_plays_the_selected_line(view, qtbot):
    view.table.selectRow(0)
    _play_or_skip(view, view.play_button)  # there is an audio device
    view.transport.stop()
    view.table.selectRow(2)
    qtbot.keyClick(view.table, Qt.Key.Key_Space)
    assert view.transport.state == "playing"
    assert view.transport.clip.duration == pytest.approx(SECONDS[2]) and _playing_rows(view) == [2]
    view.transport.stop()


def test_another_clip_taking_over_clears_the_marker(view, qtbot):
    view.table.selectRow(0)
    _play_or_skip(view, view.play_button)
    take = view.window().store.add(np.zeros(RATE, np.float32), RATE, text="a take")
    view.window().playback.play_take(take.id)
    assert _playing_rows(view) == [] and view.play_position.text() == ""
    view.transport.stop()


def test_the_focused_table_wears_the_focus_ring(view):
    def edge():
        image = view.table.grab().toImage()
        return image.pixelColor(1, image.height() // 2).getRgb()[:3]

    ring = edge()
    view.new_button.setFocus()
    assert not view.table.hasFocus()
    plain = edge()
    assert sum(abs(a - b) for a, b in zip(ring, plain, strict=True)) >= 200, (ring, plain)


def test_esc_while_editing_a_line_still_cancels_the_edit(view, qtbot):
    from PySide6.QtWidgets import QAbstractItemView, QApplication

    assert view.table.state() != QAbstractItemView.State.EditingState
    view.table.setCurrentCell(0, 2)
    view.table.editItem(view.table.item(0, 2))
    qtbot.waitUntil(lambda: view.table.state() == QAbstractItemView.State.EditingState)
    editor = QApplication.focusWidget()
    assert editor is not view.table
    qtbot.keyClicks(editor, " and more")
    qtbot.keyClick(editor, Qt.Key.Key_Escape)
    assert view.table.state() != QAbstractItemView.State.EditingState
    assert view.table.item(0, 2).text() == "Line number 1."
