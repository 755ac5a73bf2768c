"""Settings edited in the dialog are saved, survive a restart, and a changed engine knob restarts the engine."""

from __future__ import annotations

import pytest

from studio.gui.settings_dialog import SettingsDialog, engine_changed
from studio.settings import Settings, load_settings

pytestmark = pytest.mark.gui


def test_dialog_edits_are_persisted_and_applied(qtbot, tmp_path, monkeypatch):
    from studio.gui.app import create_window

    window = create_window(Settings(model_dir=""))
    qtbot.addWidget(window)
    restarts = []
    monkeypatch.setattr(window, "restart_engine", lambda: restarts.append(True))
    dialog = SettingsDialog(window.settings, window)
    dialog.backend.setCurrentIndex(dialog.backend.findData("pytorch"))
    dialog.max_num_seqs.setValue(64)
    dialog.output_dir.setText(str(tmp_path / "my takes"))
    new = dialog.result_settings()
    assert engine_changed(window.settings, new)
    window.apply_settings(new)

    saved = load_settings()
    assert (saved.backend, saved.max_num_seqs, saved.output_dir) == (
        "pytorch",
        64,
        str(tmp_path / "my takes"),
    )
    assert window.store.folder == tmp_path / "my takes" and window.takes_panel.store is window.store
    assert restarts == []  # no model yet: nothing to restart
    assert not engine_changed(saved, dialog.result_settings())
    window.shutdown()
