"""The text panel: tags insert at the cursor, modes show their fields, Ctrl+Enter and Esc work."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor

from studio.gui.text_panel import EVENT_TAGS, TextPanel

pytestmark = pytest.mark.gui


@pytest.fixture
def panel(qtbot):
    widget = TextPanel()
    qtbot.addWidget(widget)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def test_tag_buttons_insert_at_the_cursor_and_wrap_the_selection(panel):
    panel.editor.setPlainText("Hello world")
    cursor = panel.editor.textCursor()
    cursor.setPosition(5)
    panel.editor.setTextCursor(cursor)
    panel.insert_tag("[laughter]")
    assert panel.editor.toPlainText() == "Hello[laughter] world"
    cursor = panel.editor.textCursor()
    cursor.movePosition(QTextCursor.MoveOperation.End)
    cursor.movePosition(QTextCursor.MoveOperation.Left, QTextCursor.MoveMode.KeepAnchor, 5)
    panel.editor.setTextCursor(cursor)
    panel.wrap_selection("<strong>", "</strong>")
    assert panel.editor.toPlainText() == "Hello[laughter] <strong>world</strong>"
    labels = {button.text() for button in panel.findChildren(type(panel.generate_button))}
    assert {tag.strip("[]") for tag in EVENT_TAGS} <= labels
    assert {"<strong>…</strong>", "<laughter>…</laughter>"} <= labels


def test_instruct_mode_shows_the_instruction_field(panel):
    assert not panel.instruct.isVisible()
    panel.mode.setCurrentIndex(panel.mode.findData("instruct"))
    assert panel.instruct.isVisible()
    panel.instruct.setText("speak slowly")
    panel.editor.setPlainText("text")
    request = panel.current_request()
    assert (request.mode, request.instruct) == ("instruct", "speak slowly")


def test_ctrl_enter_generates_only_when_ready_and_esc_stops(panel, qtbot):
    generated, stopped = [], []
    panel.sig_generate.connect(generated.append)
    panel.sig_stop.connect(lambda: stopped.append(True))
    panel.editor.setPlainText("Say this")
    panel.random_seed.setChecked(False)
    panel.seed.setValue(1234)
    panel.speed.setValue(1.25)
    qtbot.keyClick(panel.editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert generated == []  # the engine is not ready
    panel.set_engine_ready(True)
    qtbot.keyClick(panel.editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert len(generated) == 1
    request = generated[0]
    assert (request.text, request.seed, request.speed, request.stream) == ("Say this", 1234, 1.25, True)
    qtbot.keyClick(panel.editor, Qt.Key.Key_Escape)
    assert stopped == []  # nothing running
    panel.set_busy(True)
    assert not panel.generate_button.isEnabled()
    qtbot.keyClick(panel.editor, Qt.Key.Key_Escape)
    assert stopped == [True]


def test_random_seeds_differ_between_takes(panel):
    panel.editor.setPlainText("x")
    seeds = {panel.current_request().seed for _ in range(5)}
    assert len(seeds) > 1
