"""The take list as a history (issue 13, item 3): a details pane with everything a take was made with,
regenerate with those settings, use its text, search, the Delete key with a question and an undo, and
export under a chosen name with a confirmation that shows the folder."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QObject, Qt, Slot
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QFileDialog, QMessageBox

from studio.request import Mode
from studio.runtime.warmup import synthetic_voice

pytestmark = pytest.mark.gui


def _take(window, text, **fields):
    audio = (0.1 * np.sin(np.arange(12000) * 0.05)).astype(np.float32)
    take = window.store.add(audio, 24000, text=text, **fields)
    window.takes_panel.refresh(select=take.id)
    return take


def _saved_voice(window, qtbot, name="Narrator"):
    panel = window.voice_panel
    panel.set_recording(0.4 * synthetic_voice(16000, 4.0), 16000, origin="test")
    qtbot.waitUntil(lambda: panel.current_prompt() is not None, timeout=30000)
    panel.transcript.setText("the words of the voice")
    assert panel.save_voice(name)
    return panel.saved.currentData()


def _rows(panel):
    return [panel.tree.topLevelItem(i).text(0) for i in range(panel.tree.topLevelItemCount())]


def test_the_details_pane_shows_everything_the_take_was_made_with(window):
    long_text = "A sentence long enough to be cut in the list. " * 4
    _take(window, long_text.strip(), voice="Ann", mode="instruct", seed=42,
          settings={"speed": 1.25, "instruct": "speak slowly"},
          stats={"backend": "vllm", "first_chunk_latency": 0.64, "gui_first_chunk_latency": 0.776,
                 "rtf": 0.31})  # fmt: skip
    summary = window.takes_panel.details.summary.toPlainText()
    for part in (long_text.strip(), "Ann", Mode.INSTRUCT.label, "speak slowly", "42", "1.25×", "vllm",
                 "776 ms (engine 640 ms)", "0.31", "0.5 s"):  # fmt: skip
        assert part in summary, part
    assert (
        window.takes_panel.tree.topLevelItem(0).text(2) == "776 ms"
    )  # the list shows what the preview showed
    assert long_text.strip() in window.takes_panel.tree.topLevelItem(0).toolTip(0)


def test_regenerate_puts_back_text_voice_mode_instruction_speed_and_seed_and_starts(
    window, qtbot, monkeypatch
):
    slug = _saved_voice(window, qtbot)
    take = _take(window, "Regenerate me.", voice="Narrator", mode="instruct", seed=1234,
                 settings={"speed": 0.8, "instruct": "whisper", "voice_id": slug})  # fmt: skip
    window.voice_panel.saved.setCurrentIndex(0)  # the user moved on to something else
    window.text_panel.editor.setPlainText("other text")
    window.text_panel.mode.setCurrentIndex(window.text_panel.mode.findData(Mode.ZERO_SHOT.value))
    window.text_panel.random_seed.setChecked(True)
    window.text_panel.set_engine_ready(True)
    started = []
    monkeypatch.setattr(window.takes, "start", lambda request, prompt: started.append((request, prompt)))
    details = window.takes_panel.details
    assert "Seed" in details.summary.toPlainText() and "1234" in details.summary.toPlainText()
    details.regenerate_button.click()  # a new variation: a new seed
    details.same_seed_action.trigger()  # the same take again
    (new_variation, new_prompt), (same_again, same_prompt) = started
    for request in (new_variation, same_again):
        assert (request.text, request.mode, request.instruct, request.speed) == (
            "Regenerate me.",
            Mode.INSTRUCT,
            "whisper",
            0.8,
        )
    assert new_variation.seed != 1234 and same_again.seed == 1234
    assert (
        new_prompt.voice_id == same_prompt.voice_id == slug and window.voice_panel.saved.currentData() == slug
    )
    assert "1234" in details.same_seed_action.text()  # the menu says which seed it keeps
    assert details.same_seed_action in details.regenerate_menu.actions()
    assert take.id  # the take itself is untouched


def test_show_file_without_a_file_manager_names_the_path_and_copies_it(window, qtbot, monkeypatch):
    from PySide6.QtGui import QGuiApplication

    from studio.gui.widgets import desktop

    take = _take(window, "where am I")
    monkeypatch.setattr(desktop.QDesktopServices, "openUrl", lambda url: False)
    window.takes_panel.details.show_file_button.click()
    wav = str(window.store.wav_path(take.id))
    (box,) = [b for b in window.takes_panel.findChildren(QMessageBox) if b.isVisible()]
    assert wav in box.text()
    (copy,) = [b for b in box.buttons() if b.text() == "Copy path"]
    copy.click()
    assert QGuiApplication.clipboard().text() == wav


def test_use_this_text_sets_only_the_text(window):
    _take(window, "Only these words.", mode="cross-lingual", seed=7)
    window.text_panel.seed.setValue(99)
    window.takes_panel.details.use_text_button.click()
    assert window.text_panel.editor.toPlainText() == "Only these words."
    assert (
        window.text_panel.seed.value() == 99 and window.text_panel.mode.currentData() == Mode.ZERO_SHOT.value
    )


def test_search_filters_by_every_word(window):
    for text in ("The quick brown fox", "A slow brown bear", "Quick silver"):
        _take(window, text)
    panel = window.takes_panel
    panel.search.setText("brown")
    assert sorted(_rows(panel)) == ["A slow brown bear", "The quick brown fox"]
    panel.search.setText("QUICK brown")
    assert _rows(panel) == ["The quick brown fox"] and "matching" in panel.folder_label.text()
    panel.search.clear()
    assert len(_rows(panel)) == 3


def test_the_delete_key_asks_and_undo_brings_the_takes_back(window, qtbot, monkeypatch):
    window.show()
    keep = _take(window, "stays")
    gone = _take(window, "goes away")
    wav = window.store.wav_path(gone.id).read_bytes()
    answers = [QMessageBox.StandardButton.No, QMessageBox.StandardButton.Yes]
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: answers.pop(0))
    tree = window.takes_panel.tree
    tree.setFocus()
    qtbot.waitUntil(tree.hasFocus)
    qtbot.keyClick(tree, Qt.Key.Key_Delete)  # asked; No keeps it
    assert sorted(_rows(window.takes_panel)) == ["goes away", "stays"]
    qtbot.keyClick(tree, Qt.Key.Key_Delete)  # Yes
    assert _rows(window.takes_panel) == ["stays"] and [t.id for t in window.store.list()] == [keep.id]
    assert window.takes_panel.undo_button.isVisible()
    qtbot.keyClick(tree, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert sorted(_rows(window.takes_panel)) == ["goes away", "stays"]
    assert (
        window.store.wav_path(gone.id).read_bytes() == wav and not window.takes_panel.undo_button.isVisible()
    )
    assert window.takes_panel.selected_ids() == [gone.id]


class _FileManager(QObject):
    def __init__(self):
        super().__init__()
        self.opened = []

    @Slot("QUrl")
    def open(self, url):
        self.opened.append(url.toLocalFile())


def test_export_one_take_under_a_chosen_name_confirms_and_shows_the_folder(
    window, tmp_path, monkeypatch, qtbot
):
    _take(window, "export me")
    target = tmp_path / "exports" / "final mix.wav"
    target.parent.mkdir()
    asked = {}

    def save_dialog(parent, caption, suggested, filters):
        asked["suggested"] = suggested
        return str(target), filters

    monkeypatch.setattr(QFileDialog, "getSaveFileName", save_dialog)
    file_manager = _FileManager()
    QDesktopServices.setUrlHandler("file", file_manager, "open")
    try:
        window.export_action.trigger()
        assert asked["suggested"].endswith("export me.wav")
        assert target.is_file()
        panel = window.takes_panel
        assert not panel.export_bar.isHidden() and str(target) in panel.export_note.toolTip()
        panel.show_export_button.click()
        assert file_manager.opened == [str(target.parent)]
    finally:
        QDesktopServices.unsetUrlHandler("file")
