"""The Script view against the real engine process and the tiny model: Render all renders every line into
the project (two voices, a few at a time), an edit re-renders only that line, a moved line keeps its take,
Retake changes one line and no other, Export writes the lines, a joined file of the right length at the
chosen loudness and subtitles; the project is there again after a restart."""

from __future__ import annotations

import json
import re

import numpy as np
import pyloudnorm
import pytest
import soundfile as sf
from PySide6.QtCore import Qt

from studio.engine.protocol import EngineState
from studio.runtime.warmup import synthetic_voice
from studio.settings import data_dir, load_settings
from studio.voices import VoiceLibrary

pytestmark = pytest.mark.gui
ENGINE_TIMEOUT_MS = 240_000
SCRIPT = """[Alice] Good morning, this is the first line.
[Bob] And this is Bob answering her.
He keeps the voice of the line before.

[Alice|Speak slowly and softly] A new paragraph, said slowly.
"""


@pytest.fixture
def library():
    library = VoiceLibrary(data_dir() / "voices")
    library.save("Alice", 0.4 * synthetic_voice(16000, 4.0), 16000, "A calm voice reads a few words.")
    library.save("Bob", 0.3 * synthetic_voice(22050, 3.0), 22050, "")
    return library


def _window(qtbot, tiny_model_dir, monkeypatch, engine: bool, show_script: bool = True):
    import dataclasses

    from studio.gui import main_window
    from studio.gui.app import create_window

    real_request = main_window.load_request
    monkeypatch.setattr(
        main_window, "load_request", lambda s: dataclasses.replace(real_request(s), warmup=False)
    )
    saved = load_settings()  # as the studio starts: what the last session remembered
    window = create_window(dataclasses.replace(saved, model_dir=str(tiny_model_dir), backend="pytorch"))
    qtbot.addWidget(window)
    window.show()
    if engine:
        window.start_engine()
        qtbot.waitUntil(lambda: window.engine_status.state == EngineState.READY, timeout=ENGINE_TIMEOUT_MS)
    if show_script:
        window.views.setCurrentWidget(window.script_view)
    return window


def _render(qtbot, view, button):
    with qtbot.waitSignal(view.controller.sig_finished, timeout=ENGINE_TIMEOUT_MS):
        button.click()
        assert view.stop_button.isEnabled() and not view.add_button.isEnabled()  # no edits while rendering


def _statuses(view):
    return [view.table.status_of(row) for row in range(view.table.rowCount())]


def _files(view):
    return {r.text: (view.folder / r.file).read_bytes() for r in view.controller.records}


def test_render_all_edit_move_retake_and_export(qtbot, tiny_model_dir, monkeypatch, tmp_path, library):
    window = _window(qtbot, tiny_model_dir, monkeypatch, engine=True)
    view = window.script_view
    script = tmp_path / "My story.txt"
    script.write_text(SCRIPT, encoding="utf-8")
    view.open_script(str(script))
    assert view.folder.name == "My story" and view.table.rowCount() == 4
    assert view.table.item(3, 0).text() == "¶ 4" and view.table.item(3, 3).text() == "Speak slowly and softly"
    assert not view.export_button.isEnabled()  # nothing rendered yet

    _render(qtbot, view, view.render_button)
    assert _statuses(view) == ["✓ rendered"] * 4 and view.progress.value() == 4
    manifest = json.loads((view.folder / "script.json").read_text())
    assert [x["voice"] for x in manifest["lines"]] == ["Alice", "Bob", "Bob", "Alice"]
    assert all(sf.info(view.folder / x["file"]).frames > 0 for x in manifest["lines"])
    first = _files(view)

    view.table.selectRow(1)
    view.remove_lines()  # removed by mistake: its take goes aside, Undo brings line and take back
    assert view.table.rowCount() == 3 and view.undo_button.isVisible()
    view.undo_remove()
    assert view.table.rowCount() == 4 and view.table.item(1, 1).text() == "Bob"
    assert all(s.startswith("✓") for s in _statuses(view))  # nothing to render again
    assert _files(view) == first  # the same takes, not made again

    view.table.selectRow(1)
    if view.play(to_end=True):  # where there is an audio device: from line 2 to the end, with the gaps
        transport = window.playback.transport
        rest, rate = sum(sf.info(view.folder / r.file).frames for r in view.controller.records[1:]), 24000
        assert transport.state == "playing" and transport.clip.sample_rate == rate
        assert transport.clip.samples.size == rest + int(0.25 * rate) + int(0.75 * rate)  # a gap, a paragraph
        transport.stop()
    view.table.item(2, 2).setText("He says something else now.")  # the user edits line 3
    assert (
        view.table.status_of(2) == "edited"
        and (view.folder / "script.txt").read_text().count("else now") == 1
    )
    view.table.selectRow(0)
    view.move(1)  # line 1 goes below line 2
    _render(qtbot, view, view.render_button)
    assert _statuses(view) == ["✓ unchanged", "✓ unchanged", "✓ rendered", "✓ unchanged"]
    assert "1 line(s) rendered" in view.status.text()
    after = _files(view)
    assert after["Good morning, this is the first line."] == first["Good morning, this is the first line."]
    assert view.controller.records[1].file == "002.wav"  # it moved with its line

    view.table.selectRow(3)
    assert view.retake_button.isEnabled()
    _render(qtbot, view, view.retake_button)
    retaken = _files(view)
    changed = [text for text in retaken if retaken[text] != after[text]]
    assert changed == ["A new paragraph, said slowly."]  # one line, and only it

    bar = view.export_bar
    bar.format_combo.setCurrentIndex(bar.format_combo.findData("flac"))
    bar.loudness_check.setChecked(True)
    bar.loudness.setValue(-24.0)
    bar.gap.setValue(300)
    out = tmp_path / "exports"
    with qtbot.waitSignal(view.sig_message, timeout=60_000, check_params_cb=lambda m: "Exported" in m):
        view.export(str(out))
        assert not view.add_button.isEnabled() and not view.render_button.isEnabled()  # files are being read
    assert view.add_button.isEnabled()
    target = out / "My story"
    lines = [sf.info(target / f"00{n}.flac").frames for n in range(1, 5)]
    joined, rate = sf.read(target / "joined.flac", dtype="float64")
    assert joined.size == sum(lines) + 2 * int(0.3 * rate) + int(0.9 * rate)  # 300 ms gaps, a paragraph: 900
    assert abs(pyloudnorm.Meter(rate).integrated_loudness(joined) + 24) < 0.5
    srt = (target / "joined.srt").read_text()
    assert len(re.findall(r"-->", srt)) == 4 and "He says something else now." in srt
    assert np.any(sf.read(target / "001.flac")[0])
    window.shutdown()


def test_the_script_and_its_takes_are_there_after_a_restart(
    qtbot, tiny_model_dir, monkeypatch, tmp_path, library
):
    window = _window(qtbot, tiny_model_dir, monkeypatch, engine=False)
    view = window.script_view
    assert not view.render_button.isEnabled()  # no engine: says so rather than failing later
    view.add_line()
    view.table.item(0, 2).setText("A line typed in the studio.")
    view.add_line()
    view.table.item(1, 1).setText("Carol")
    view.table.item(1, 2).setText("Carol has no saved voice.")
    folder = view.folder
    window.close()

    window = _window(qtbot, tiny_model_dir, monkeypatch, engine=False)
    view = window.script_view
    assert view.folder == folder and view.table.rowCount() == 2
    assert view.table.item(0, 2).text() == "A line typed in the studio."
    assert "unknown voice Carol: save it in the voice panel" in view.status.text()
    assert "known: Alice, Bob" in view.status.text() and not view.play_button.isEnabled()
    window.shutdown()


def test_without_saved_voices_the_view_says_how_to_get_one(qtbot, tiny_model_dir, monkeypatch):
    window = _window(qtbot, tiny_model_dir, monkeypatch, engine=False)
    view = window.script_view
    assert "No saved voices yet" in view.status.text() and "Save voice" in view.status.text()
    VoiceLibrary(data_dir() / "voices").save("Dana", 0.4 * synthetic_voice(16000, 3.0), 16000, "")
    view.refresh_voices()  # as when the tab is shown again
    assert view.status.text() == "" and view.voice_combo.currentText() == "Dana"
    view.add_line()
    view.table.item(0, 2).setText("The first line.")
    view.add_line()
    view.table.item(1, 2).setText("The second line.")
    view.table.setFocus()
    qtbot.waitUntil(view.table.hasFocus)
    view.table.selectRow(0)
    qtbot.keyClick(view.table, Qt.Key.Key_Delete)
    assert view.table.rowCount() == 1 and view.table.item(0, 2).text() == "The second line."
    assert "[Dana] The second line." in (view.folder / "script.txt").read_text()
    view.add_line()
    view.table.item(1, 2).setText("A third line.")
    VoiceLibrary(data_dir() / "voices").save("Eve", 0.4 * synthetic_voice(16000, 3.0), 16000, "")
    view.refresh_voices()
    view.voice_combo.setCurrentText("Eve")
    edits = []
    view.table.sig_edited.connect(edits.append)
    view.table.selectAll()
    view.set_voice()
    assert len(edits) == 1  # one edit for the rows: one save, one look at the takes
    assert (view.folder / "script.txt").read_text().count("[Eve]") == 2
    view.at_once.setValue(8)
    assert view.controller.concurrency == 8
    view.export_bar.format_combo.setCurrentIndex(view.export_bar.format_combo.findData("opus"))
    window.close()  # the session keeps the view and its options

    window = _window(qtbot, tiny_model_dir, monkeypatch, engine=False, show_script=False)
    view = window.script_view
    assert view.at_once.value() == 8 and view.controller.concurrency == 8
    assert view.export_bar.format_combo.currentData() == "opus" and window.views.currentWidget() is view
    window.shutdown()


def test_a_crashed_engine_keeps_the_finished_lines_and_render_all_finishes_the_rest(
    qtbot, tiny_model_dir, monkeypatch, tmp_path, library
):
    import os
    import signal

    window = _window(qtbot, tiny_model_dir, monkeypatch, engine=True)
    view = window.script_view
    view.controller.concurrency = 1  # one line at a time: the kill lands with lines still to come
    script = tmp_path / "Crash.txt"
    script.write_text(SCRIPT, encoding="utf-8")
    view.open_script(str(script))
    first_done = []
    view.controller.sig_line.connect(
        lambda r: first_done.append(r.number) if r.status == "rendered" else None
    )
    with qtbot.waitSignal(view.controller.sig_finished, timeout=ENGINE_TIMEOUT_MS) as ended:
        view.render_button.click()
        qtbot.waitUntil(lambda: bool(first_done), timeout=ENGINE_TIMEOUT_MS)
        os.kill(window.bridge.client.pid, signal.SIGKILL)
    summary = ended.args[0]
    assert (
        "take lost" in summary and "not rendered (stopped)" in summary
    )  # the rest were not sent to a dead engine
    kept = [r for r in view.controller.records if r.status == "rendered"]
    assert kept and all((view.folder / r.file).is_file() for r in kept)
    before = {r.file: (view.folder / r.file).read_bytes() for r in kept}
    qtbot.waitUntil(
        lambda: window.engine_status.state == EngineState.CRASHED, timeout=30_000
    )  # after the take's Error
    assert not view.render_button.isEnabled()  # the engine is down

    window.engine_status.restart_button.click()
    qtbot.waitUntil(lambda: view.render_button.isEnabled(), timeout=ENGINE_TIMEOUT_MS)
    _render(qtbot, view, view.render_button)
    assert all(s.startswith("✓") for s in _statuses(view))
    assert all((view.folder / name).read_bytes() == data for name, data in before.items())  # not made again
    window.shutdown()
