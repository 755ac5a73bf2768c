"""Defects a new user tripped over (issue 13), each reproduced as it was found: Delete that did not ask,
private exported files, a stale preview caption, no way back from Choose model, a saved voice without its
original, Tab trapped in the text box, no way to stop playback, instructions stored for other modes."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from studio.engine.protocol import EngineState, State
from studio.gui.engine.engine_status import describe_state
from studio.runtime.warmup import synthetic_voice
from studio.settings import Settings
from studio.takes import TakeStore

pytestmark = pytest.mark.gui


def _add_take(store: TakeStore, name="first take", seconds=0.5):
    return store.add(0.1 * np.sin(np.arange(int(24000 * seconds)) * 0.05).astype(np.float32), 24000,
                     text=name, name=name)  # fmt: skip


def test_the_delete_button_asks_before_deleting(window, monkeypatch):
    take = _add_take(window.store)
    window.takes_panel.refresh(select=take.id)
    asked = []
    monkeypatch.setattr(
        QMessageBox, "question", lambda *a, **k: asked.append(a) or QMessageBox.StandardButton.No
    )
    window.takes_panel.delete_button.click()
    assert asked and [t.id for t in window.store.list()] == [take.id]  # asked, and No kept it


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_exported_files_follow_the_umask(window, tmp_path, umask, mode):
    take = _add_take(window.store)
    window.takes_panel.refresh(select=take.id)
    out = tmp_path / "out"
    out.mkdir()
    old = os.umask(umask)
    try:
        (written,) = window.takes_panel.export_selected(out)
    finally:
        os.umask(old)
    assert stat.S_IMODE(written.stat().st_mode) == mode


def test_playing_a_take_shows_its_own_caption(window):
    first, second = _add_take(window.store, "first take"), _add_take(window.store, "second take", 1.0)
    window.preview.finish_take(0.2, 0.1, 0.5, False)  # the caption of a take just made
    window.play_take(second.id)
    assert "second take" in window.preview.stats.text() and "RTF" not in window.preview.stats.text()
    window.play_take(first.id)
    assert "first take" in window.preview.stats.text()


def test_choose_model_can_go_back_to_the_studio(window):
    window.model_action.trigger()
    assert window.pages.currentWidget() is window.first_run and window.first_run.back_button.isVisibleTo(
        window
    )
    window.first_run.back_button.click()
    assert window.pages.currentWidget() is window.studio_page


def test_a_picked_saved_voice_shows_and_plays_its_original(window, qtbot):
    panel = window.voice_panel
    original = 0.4 * synthetic_voice(22050, 4.0)
    panel.set_recording(original, 22050, "the test voice")
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=60_000)
    panel.transcript.setText("a calm voice")
    assert panel.save_voice("Kept")
    panel.set_recording(0.4 * synthetic_voice(22050, 6.0), 22050, "another voice")
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=60_000)
    panel.on_pick_saved(panel.saved.findData(panel.library.list()[0].slug))
    assert panel.before.duration == pytest.approx(4.0, abs=0.01) and panel.play_before.isEnabled()


def test_tab_leaves_the_text_box_and_the_plots_take_no_focus(window, qtbot):
    window.show()
    editor = window.text_panel.editor
    editor.setFocus()
    qtbot.waitUntil(editor.hasFocus)
    qtbot.keyClick(editor, Qt.Key.Key_Tab)
    assert "\t" not in editor.toPlainText() and not editor.hasFocus()
    assert window.preview.waveform.focusPolicy() == Qt.FocusPolicy.NoFocus
    assert window.voice_panel.before.focusPolicy() == Qt.FocusPolicy.NoFocus


def test_playback_of_a_finished_take_can_be_stopped(window, qtbot):
    if not window.player.play(np.zeros(24000 * 5, np.float32), 24000):
        pytest.skip("no audio output device here")
    qtbot.waitUntil(window.preview.stop_playback_button.isEnabled, timeout=5000)
    window.preview.stop_playback_button.click()
    assert not window.player.is_playing and not window.preview.stop_playback_button.isEnabled()
    window.player.play(np.zeros(24000 * 5, np.float32), 24000)
    window.text_panel._on_escape()  # Esc with no take running stops playback
    assert not window.player.is_playing


def test_other_modes_do_not_store_an_instruction_and_crash_text_starts_with_a_capital(qtbot, tmp_path):
    from studio.engine.protocol import AudioChunk, TakeFinished, TakeStats
    from studio.gui.take.take_controller import TakeController
    from studio.gui.take.text_panel import TextRequest
    from studio.gui.voice.voice_panel import Prompt
    from studio.request import Mode
    from tests.gui.test_take_controller import RecordingBridge

    bridge = RecordingBridge()
    takes = TakeController(bridge, TakeStore(tmp_path / "takes"))
    text = TextRequest("Hello.", Mode.CROSS_LINGUAL, instruct="speak slowly", speed=1.0, seed=1, stream=True)
    takes.start(text, Prompt(np.zeros(16000, np.float32), 16000, ""))
    request_id = bridge.sent[0].request_id
    bridge.sig_chunk.emit(AudioChunk(request_id, 0, np.ones(100, np.float32) * 0.1, 24000))
    with qtbot.waitSignal(takes.sig_finished) as finished:
        bridge.sig_take_finished.emit(TakeFinished(request_id, TakeStats(0.1, 0.1, 0.1, 1.0, 5, 1)))
    assert finished.args[1].settings["instruct"] == ""
    assert describe_state(State(EngineState.CRASHED, "the engine process was killed")).startswith(
        "Engine crashed: The engine"
    )


def test_the_text_shows_its_length_and_help_lists_the_shortcuts(window):
    from studio.gui.take.text_panel import estimated_seconds

    window.text_panel.editor.setPlainText("Hello there [breath] my good friend, how are you today?")
    assert window.text_panel.length.text() == "55 characters · about 3 s of speech"  # 9 words at 2.6 a second
    assert estimated_seconds("[laughter] <strong></strong>") == 0  # tags are not spoken
    assert estimated_seconds("收到好友从远方寄来的生日礼物") == pytest.approx(14 / 4.5)
    box = window.help.show_shortcuts()
    assert "Ctrl+Enter" in box.text() and "Esc" in box.text()
    box.close()


def test_the_first_run_buttons_are_not_cut_at_1280x720(qtbot, monkeypatch):
    from studio.gui.app import create_window

    window = create_window(Settings(model_dir=""))
    qtbot.addWidget(window)
    monkeypatch.setattr(window, "start_engine", lambda: None)
    window.resize(1280, 720)
    window.show()
    qtbot.waitExposed(window)
    for button in (
        window.first_run.choose_button,
        window.first_run.download_button,
        window.first_run.demo_button,
    ):
        assert button.width() >= button.sizeHint().width(), button.text()
    window.shutdown()


def test_the_studio_fits_1280x720_and_instruct_mode_does_not_widen_the_text_panel(window, qtbot):
    window.resize(1280, 720)
    window.show()
    qtbot.waitExposed(window)
    assert window.minimumSizeHint().width() <= 1280 and window.width() <= 1280
    assert window.minimumSizeHint().height() <= 690  # 720 less a title bar
    text = window.text_panel
    before = text.minimumSizeHint().width()
    text.mode.setCurrentIndex(text.mode.findData("instruct"))
    text.instruct.setText("Speak slowly and warmly, like a bedtime story told by the fire")
    qtbot.wait(50)
    assert text.minimumSizeHint().width() == before and window.width() <= 1280
    window.preview.show_take("Welcome to the studio where a take has a very long name indeed " * 2, 5.7, True)
    qtbot.wait(50)
    assert window.minimumSizeHint().width() <= 1280 and window.width() <= 1280
    rows = window.takes_panel.tree
    assert rows.height() >= 3 * rows.fontMetrics().height()  # several rows, not one


def test_a_recording_gives_the_voice_panel_no_horizontal_scrollbar(window, qtbot):
    window.resize(1280, 720)
    window.show()
    panel = window.voice_panel
    panel.set_recording(0.4 * synthetic_voice(16000, 4.0), 16000, origin="a voice")
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=30000)
    qtbot.wait(50)
    scroll = panel.parentWidget().parentWidget()  # the voice column's scroll area
    assert not scroll.horizontalScrollBar().isVisible()
    assert panel.width() >= panel.minimumSizeHint().width()


def test_spin_box_arrows_are_visible_against_their_button(window, qtbot):
    window.show()
    speed = window.text_panel.speed
    qtbot.waitExposed(speed)
    image = speed.grab().toImage()
    width, height = image.width(), image.height()
    button = [
        image.pixelColor(x, y).lightness() for x in range(width - 18, width - 2) for y in range(2, height - 2)
    ]
    assert max(button) - min(button) > 120, "the arrows do not stand out from their buttons"


def test_an_import_after_a_recording_resets_the_recording_timer(window, qtbot, tmp_path):
    import soundfile as sf

    panel = window.voice_panel
    panel.on_elapsed(11.5)  # a recording ran for 11.5 s
    panel.on_recorded(0.4 * synthetic_voice(16000, 3.0), 16000)
    assert panel.timer_label.text().startswith("11.5")
    wav = tmp_path / "other.wav"
    sf.write(wav, 0.4 * synthetic_voice(22050, 4.0), 22050)
    panel.import_file(str(wav))
    qtbot.waitUntil(lambda: panel.before.duration == pytest.approx(4.0, abs=0.01), timeout=10000)
    assert panel.timer_label.text().startswith("0.0 /")
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=30000)


def test_the_finished_take_shows_the_latency_that_was_streamed_and_saved(window):
    from studio.engine.protocol import TakeStats

    take = window.store.add(np.zeros(2400, np.float32), 24000, text="timed",
                            stats={"first_chunk_latency": 0.64, "gui_first_chunk_latency": 0.776})  # fmt: skip
    window.preview.add_chunk(np.zeros(2400, np.float32), 24000, 0.776)
    assert "776 ms" in window.preview.stats.text()  # while streaming: the GUI's measure
    stats = TakeStats(0.64, 1.0, 0.1, 10.0, 5, 1)
    window.on_take_finished(stats, take)
    assert "776 ms" in window.preview.stats.text() and "640" not in window.preview.stats.text()
    assert window.takes_panel.tree.topLevelItem(0).text(2) == "776 ms"  # the list says the same


def test_the_engine_crash_dialog_starts_its_sentence_with_a_capital(qtbot):
    from studio.engine.client import describe_exit
    from studio.engine.protocol import Error
    from studio.gui.engine.engine_status import EngineStatus

    status = EngineStatus()
    qtbot.addWidget(status)
    crash = f"{describe_exit(-9)}. The engine's last log lines are in the details."  # as the client words it
    status.on_engine_error(Error(None, crash, "the log lines"))
    box = status.show_details()
    assert box.text().startswith("The engine process was killed by SIGKILL"), box.text()
    assert box.detailedText() == "the log lines"
    box.close()
