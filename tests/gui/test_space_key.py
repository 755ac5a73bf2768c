"""Space after the preview's own buttons (issue 37, item 2): after a click on Pause, Space resumes; after a
click on Stop, Space plays again instead of typing into the takes search box; F1's list names Space."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from studio.gui.help_menu import SHORTCUTS

pytestmark = pytest.mark.gui

RATE = 24000


def _playing_take(window, qtbot):
    window.show()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    tone = (0.2 * np.sin(np.arange(RATE * 6) * 0.05)).astype(np.float32)
    take = window.store.add(tone, RATE, text="a take to play", name="take to play")
    window.takes_panel.refresh(select=take.id)
    if not window.playback.play_take(take.id):
        pytest.skip("no audio output device here")
    return window.playback.transport


def _press_space(qtbot):
    """Space as the keyboard sends it: to whichever widget has the focus."""
    focus = QApplication.focusWidget()
    assert focus is not None, "Space would go nowhere: no widget has the focus"
    qtbot.keyClick(focus, Qt.Key.Key_Space)


def test_space_resumes_after_a_click_on_pause(window, qtbot):
    transport = _playing_take(window, qtbot)
    play = window.preview.play_button
    qtbot.mouseClick(play, Qt.MouseButton.LeftButton)
    assert transport.state == "paused"
    for expected in ("playing", "paused", "playing"):
        _press_space(qtbot)
        qtbot.waitUntil(lambda expected=expected: transport.state == expected, timeout=2000)
        with qtbot.assertNotEmitted(transport.sig_state, wait=300):
            pass  # one Space, one toggle: no second click follows (a button animates its click for 100 ms)
    window.playback.stop()


def test_space_plays_again_after_a_click_on_stop_and_types_nothing(window, qtbot):
    transport = _playing_take(window, qtbot)
    qtbot.mouseClick(window.preview.stop_playback_button, Qt.MouseButton.LeftButton)
    assert transport.state == "stopped"
    assert QApplication.focusWidget() is not window.takes_panel.search
    _press_space(qtbot)
    qtbot.waitUntil(lambda: transport.state == "playing", timeout=2000)
    assert window.takes_panel.search.text() == ""
    window.playback.stop()


def test_f1_lists_space():
    keys = {keys: what for keys, what in SHORTCUTS}
    assert "play or pause" in keys.get("Space", "")
