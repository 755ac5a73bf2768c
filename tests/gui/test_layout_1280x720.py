"""The studio at 1280x720 (issue 37, item 5): a long crash message stays clear of the waveform's time axis,
the GPU panel's texts are not cut, an export notice moves neither the takes list nor the buttons, its close
button shows a real icon, and a take's details are read without scrolling."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, QRect
from PySide6.QtWidgets import QApplication, QLabel, QWidget

from studio.gpu.nvml import GpuSnapshot, NvmlUnavailable
from studio.gui.engine.gpu_panel import GIB

pytestmark = pytest.mark.gui
CRASH = (
    "the engine crashed: it was killed by signal 9 (out of memory?); the 1.2 s received were kept as "
    "“(partial) hello there my friend”"
)


def _studio_at_1280x720(window, qtbot):
    window.resize(1280, 720)
    window.show()
    qtbot.waitExposed(window)
    return window


def _in(widget: QWidget, ancestor: QWidget) -> QRect:
    """``widget``'s rectangle in ``ancestor``'s coordinates."""
    return QRect(widget.mapTo(ancestor, QPoint(0, 0)), widget.size())


def _fully_shown(label: QLabel) -> bool:
    """The label is as large as its text needs (wrapped labels: the height for their width)."""
    if label.wordWrap():
        return label.height() >= label.heightForWidth(label.width())
    return label.width() >= label.sizeHint().width() and label.height() >= label.sizeHint().height()


def _settle(qtbot, window):
    """Apply the layouts' pending requests (a widget that asks for a new size posts one to its parent)."""
    for _ in range(8):
        QApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
        QApplication.processEvents()


def test_a_long_crash_message_leaves_the_waveform_and_its_time_axis_clear(window, qtbot):
    _studio_at_1280x720(window, qtbot)
    preview = window.preview
    _settle(qtbot, window)
    waveform_height = preview.waveform.height()
    preview.fail_take(CRASH)
    _settle(qtbot, window)
    stats, waveform = _in(preview.stats, preview), _in(preview.waveform, preview)
    assert not stats.intersects(waveform), (stats, waveform)
    assert waveform.height() == waveform_height  # the text panel above gives the message its room
    assert preview.rect().contains(stats) and preview.rect().contains(waveform)
    assert _fully_shown(preview.stats)


def _takes(window, count):
    audio = (0.1 * np.sin(np.arange(12000) * 0.05)).astype(np.float32)
    takes = [
        window.store.add(
            audio,
            24000,
            text=f"Take number {n}, a sentence of a usual length.",
            voice="Ann",
            mode="instruct",
            seed=1234 + n,
            settings={"speed": 1.25, "instruct": "speak slowly"},
            stats={
                "backend": "vllm",
                "first_chunk_latency": 0.64,
                "gui_first_chunk_latency": 0.776,
                "rtf": 0.31,
            },
        )
        for n in range(count)
    ]
    window.takes_panel.refresh(select=takes[-1].id)
    return takes


def _gpu_snapshot():
    return [GpuSnapshot(0, "NVIDIA H200", (9, 0), "580.95.05", int(141 * GIB), int(97.3 * GIB), 100, {})]


def _no_gpu():
    raise NvmlUnavailable("no NVIDIA driver: the NVML library was not found")


@pytest.mark.parametrize("query", [_no_gpu, _gpu_snapshot], ids=["no GPU", "a GPU"])
def test_the_gpu_panel_shows_its_texts_whole(window, qtbot, query):
    panel = window.gpu_panel
    panel._query = query
    _studio_at_1280x720(window, qtbot)
    _takes(window, 6)  # a take's details shown above the panel, as in use
    panel.on_sample()
    panel.stop()
    _settle(qtbot, window)
    labels = [label for label in panel.findChildren(QLabel) if label.isVisible()]
    assert len(labels) >= 2
    for label in labels:
        assert panel.rect().contains(_in(label, panel)), label.text()
        assert _fully_shown(label), label.text()
    assert window.width() <= 1280


def test_an_export_notice_moves_neither_the_list_nor_the_buttons(window, qtbot, tmp_path):
    _studio_at_1280x720(window, qtbot)
    _takes(window, 6)
    panel = window.takes_panel
    _settle(qtbot, window)
    before = {w: _in(w, window) for w in (panel.tree, panel.export_button, panel.play_button)}
    out = tmp_path / "exports"
    out.mkdir()
    panel.export_selected(folder=out)
    _settle(qtbot, window)
    assert panel.export_bar.isVisible()
    assert {w: _in(w, window) for w in before} == before
    assert str(out) in panel.export_note.toolTip()  # the note is one line; the whole path is in its tooltip
    close = panel.close_export_button
    assert not close.icon().isNull() and not close.text() and close.toolTip()
    assert close.width() >= close.sizeHint().width() and panel.export_bar.rect().contains(
        _in(close, panel.export_bar)
    )
    close.click()
    _settle(qtbot, window)
    assert not panel.export_bar.isVisible() and panel.folder_label.isVisible()
    assert {w: _in(w, window) for w in before} == before


def test_the_details_of_a_take_are_read_without_scrolling(window, qtbot):
    _studio_at_1280x720(window, qtbot)
    _takes(window, 6)
    _settle(qtbot, window)
    details = window.takes_panel.details
    assert "1239" in details.summary.toPlainText()
    assert details.summary.verticalScrollBar().maximum() == 0
    tree = window.takes_panel.tree
    fourth = tree.visualItemRect(tree.topLevelItem(3))
    assert tree.viewport().rect().contains(fourth)  # the list still shows four takes

    audio = np.zeros(12000, np.float32)
    long = window.store.add(audio, 24000, text="A much longer take text that goes on. " * 30, seed=7)
    window.takes_panel.refresh(select=long.id)
    _settle(qtbot, window)
    assert window.height() <= 720 and window.minimumSizeHint().height() <= 690  # its text scrolls instead
    assert tree.viewport().rect().contains(tree.visualItemRect(tree.topLevelItem(3)))


def test_save_voice_is_in_view_after_an_import(window, qtbot, tmp_path):
    """An imported reference, cleaned and graded: Save voice… is on screen without scrolling the voice panel."""
    import soundfile as sf

    from studio.runtime.warmup import synthetic_voice

    _studio_at_1280x720(window, qtbot)
    wav = tmp_path / "me.wav"
    voice = 0.03 * synthetic_voice(24000, 7.0) + 0.002 * np.random.default_rng(0).standard_normal(7 * 24000)
    sf.write(wav, voice.astype(np.float32), 24000)  # quiet and noisy: the check gives two advices
    panel = window.voice_panel
    panel.import_file(str(wav))
    qtbot.waitUntil(lambda: panel.current_prompt() is not None and bool(panel.quality.text()), timeout=60_000)
    panel.transcript_box.set_unavailable("The ASR model is not on this computer; type the transcript.")
    _settle(qtbot, window)
    scroll = panel.parentWidget().parentWidget()  # the voice panel's scroll area (its viewport, then it)
    viewport = scroll.viewport()
    assert viewport.rect().contains(_in(panel.save_button, viewport)), (
        _in(panel.save_button, viewport),
        viewport.rect(),
    )
