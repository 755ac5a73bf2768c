"""The text panel: tags insert at the cursor, modes show their fields, Ctrl+Enter and Esc work."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QApplication, QPushButton

from studio.gui.take.text_panel import TextPanel
from studio.tags import EVENT_TAGS

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


def _tab_walk(qtbot, start, steps):
    """The widgets Tab reaches from ``start``, in order."""
    start.setFocus()
    reached = []
    for _ in range(steps):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        reached.append(QApplication.focusWidget())
    return reached


def _tag_buttons(panel):
    return [button for button in panel.findChildren(QPushButton) if button.objectName() == "TagButton"]


def test_tab_from_the_text_reaches_mode_then_generate_and_the_tags_are_one_stop(panel, qtbot):
    panel.set_engine_ready(True)
    panel.editor.setPlainText("Say this")
    qtbot.waitUntil(lambda: QApplication.activeWindow() is panel or panel.isActiveWindow(), timeout=2000)
    buttons = _tag_buttons(panel)
    assert len(buttons) == 14
    walk = _tab_walk(qtbot, panel.editor, 12)
    assert walk[0] is panel.mode
    before_generate = walk[: walk.index(panel.generate_button)]
    assert not set(before_generate) & set(buttons), "Tab meets tag buttons before Generate"
    assert sum(widget in buttons for widget in walk[: walk.index(panel.editor)]) == 1  # one stop, then round


def test_arrow_keys_move_between_the_tags_and_space_inserts_one(panel, qtbot):
    panel.set_engine_ready(True)  # Generate enabled: it takes focus
    panel.editor.setPlainText("Hi")
    panel.editor.moveCursor(QTextCursor.MoveOperation.End)
    buttons = _tag_buttons(panel)
    walk = _tab_walk(qtbot, panel.generate_button, 1)
    assert walk == [buttons[0]]
    qtbot.keyClick(buttons[0], Qt.Key.Key_Right)
    qtbot.keyClick(buttons[1], Qt.Key.Key_Right)
    assert QApplication.focusWidget() is buttons[2]
    qtbot.keyClick(buttons[2], Qt.Key.Key_Left)
    assert QApplication.focusWidget() is buttons[1]
    qtbot.keyClick(buttons[1], Qt.Key.Key_End)
    assert QApplication.focusWidget() is buttons[-1]
    qtbot.keyClick(buttons[-1], Qt.Key.Key_Right)  # round to the first
    assert QApplication.focusWidget() is buttons[0]
    qtbot.keyClick(buttons[0], Qt.Key.Key_Right)
    qtbot.keyClick(buttons[1], Qt.Key.Key_Space)
    assert panel.editor.toPlainText() == "Hi" + EVENT_TAGS[1]
    assert QApplication.focusWidget() is panel.editor  # back to typing
    assert _tab_walk(qtbot, panel.generate_button, 1) == [buttons[1]]  # the stop is the tag used last


def _edge_colour(widget, focused):
    """The colour of the widget's left edge, one pixel in, halfway down (where a focus ring is drawn)."""
    if focused:
        widget.setFocus()
    else:
        widget.clearFocus()
    image = widget.grab().toImage()
    return image.pixelColor(1, image.height() // 2)


def test_focused_widgets_wear_a_clearly_visible_ring(qtbot):
    from studio.gui.app import load_style

    panel = TextPanel()
    panel.setStyleSheet(load_style())
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitExposed(panel)
    panel.activateWindow()
    qtbot.waitUntil(panel.isActiveWindow, timeout=2000)
    panel.set_engine_ready(True)
    panel.editor.setPlainText("Say this")
    for widget in (_tag_buttons(panel)[0], panel.generate_button, panel.mode, panel.editor, panel.stream):
        plain, ring = _edge_colour(widget, False), _edge_colour(widget, True)
        assert widget.hasFocus()
        distance = sum(abs(a - b) for a, b in zip(plain.getRgb()[:3], ring.getRgb()[:3], strict=True))
        assert distance >= 200, (
            f"{widget.objectName() or type(widget).__name__}: {plain.name()} -> {ring.name()}"
        )
