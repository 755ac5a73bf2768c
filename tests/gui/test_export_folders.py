"""One last export folder (issue 37, item 11): every export dialog (one take, several takes, the Script)
starts in the folder exported to last, which is updated after each export and kept in the settings
across restarts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PySide6.QtWidgets import QFileDialog

from studio.settings import Settings, load_settings

pytestmark = pytest.mark.gui


def _takes(window, count):
    audio = (0.1 * np.sin(np.arange(12000) * 0.05)).astype(np.float32)
    takes = [window.store.add(audio, 24000, text=f"take {n}") for n in range(count)]
    window.takes_panel.refresh()
    window.takes_panel.tree.selectAll()
    return takes


def _studio(qtbot, monkeypatch, settings):
    from studio.gui.app import create_window

    window = create_window(settings)
    qtbot.addWidget(window)
    monkeypatch.setattr(window, "start_engine", lambda: None)
    return window


def test_every_export_dialog_starts_in_the_last_export_folder_and_it_survives_a_restart(
    qtbot, monkeypatch, tmp_path, tiny_model_dir
):
    first, second = tmp_path / "first exports", tmp_path / "second exports"
    first.mkdir()
    second.mkdir()
    settings = Settings(
        model_dir=str(tiny_model_dir),
        output_dir=str(tmp_path / "takes"),
        asr_model="",
        last_export_folder=str(first),
    )
    window = _studio(qtbot, monkeypatch, settings)
    started_in = []

    def choose_folder(parent, caption, start):
        started_in.append(start)
        return str(second)

    monkeypatch.setattr(QFileDialog, "getExistingDirectory", choose_folder)
    _takes(window, 2)
    written = window.takes_panel.export_selected()  # several takes: a folder dialog
    assert started_in == [str(first)]
    assert {path.parent for path in written} == {second}
    assert window.settings.last_export_folder == str(second)
    assert load_settings().last_export_folder == str(second)  # on disk at once

    script = window.script_view
    monkeypatch.setattr(
        QFileDialog, "getExistingDirectory", lambda parent, caption, start: started_in.append(start) or ""
    )
    script.export()  # cancelled: only where it started matters
    assert started_in[-1] == str(second)
    window.shutdown()

    restarted = _studio(
        qtbot, monkeypatch, dataclasses.replace(load_settings(), model_dir=str(tiny_model_dir))
    )
    asked = {}

    def save_as(parent, caption, suggested, filters):
        asked["suggested"] = suggested
        return "", filters

    monkeypatch.setattr(QFileDialog, "getSaveFileName", save_as)
    restarted.takes_panel.tree.clearSelection()
    restarted.takes_panel.tree.topLevelItem(0).setSelected(True)
    restarted.takes_panel.export_selected()  # one take: a file dialog in that folder
    assert asked["suggested"].startswith(str(second) + "/")
    restarted.shutdown()


def test_a_script_export_moves_the_last_export_folder_for_the_takes_too(window, qtbot, monkeypatch, tmp_path):
    chosen = tmp_path / "script exports"
    chosen.mkdir()
    script = window.script_view
    script.folder = tmp_path / "a project"
    submitted = []
    monkeypatch.setattr(script.jobs, "submit", lambda *args, **kwargs: submitted.append(args))
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda parent, caption, start: str(chosen))
    script.export()
    assert submitted and submitted[0][3] == chosen / "a project"
    assert window.settings.last_export_folder == str(chosen)
    started_in = []
    monkeypatch.setattr(
        QFileDialog, "getExistingDirectory", lambda parent, caption, start: started_in.append(start) or ""
    )
    _takes(window, 2)
    window.takes_panel.export_selected()
    assert started_in == [str(chosen)]


def test_a_missing_last_export_folder_starts_the_dialogs_at_home(window, monkeypatch, tmp_path):
    from pathlib import Path

    window.export_folder.remember(tmp_path / "gone")
    started_in = []
    monkeypatch.setattr(
        QFileDialog, "getExistingDirectory", lambda parent, caption, start: started_in.append(start) or ""
    )
    _takes(window, 2)
    window.takes_panel.export_selected()
    assert started_in == [str(Path.home())]


def test_saving_a_refused_take_elsewhere_starts_in_the_last_export_folder(window, monkeypatch, tmp_path):
    from studio.recovery import KeptTake

    last, chosen = tmp_path / "exports", tmp_path / "rescued"
    last.mkdir()
    chosen.mkdir()
    window.export_folder.remember(last)
    suggested = []

    def save_as(parent, caption, suggestion, filters):
        suggested.append(suggestion)
        return str(chosen / "kept.wav"), filters

    monkeypatch.setattr(QFileDialog, "getSaveFileName", save_as)
    kept = KeptTake(np.zeros(2400, np.float32), 24000, {"text": "a kept take"}, "The disk is full.")
    window.takes.sig_kept.emit(kept)
    (notice,) = window._notices
    notice.save_button.click()
    assert suggested == [str(last / "a kept take.wav")]
    assert (chosen / "kept.wav").is_file() and window.settings.last_export_folder == str(chosen)
    notice.close()
