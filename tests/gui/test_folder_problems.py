"""The studio starts whatever the state of its folders and says, in plain words, which one it cannot use
and why (a read-only or unplugged drive, a file where a folder should be)."""

from __future__ import annotations

import pytest

from studio.settings import Settings

pytestmark = pytest.mark.gui


def _open_studio(qtbot, monkeypatch, output_dir):
    from studio.gui.app import create_window

    window = create_window(Settings(model_dir="", output_dir=str(output_dir)))  # must not raise
    qtbot.addWidget(window)
    monkeypatch.setattr(window, "start_engine", lambda: None)  # the engine is tested elsewhere
    window.report_folder_problems()
    return window


def test_a_read_only_takes_drive_is_named_with_its_cause(qtbot, monkeypatch, small_disk):
    drive = small_disk(64, read_only=True)
    window = _open_studio(qtbot, monkeypatch, drive / "takes")
    texts = [notice.text() for notice in window._notices]
    assert len(texts) == 1 and "read-only" in texts[0] and "EROFS" in texts[0] and str(drive) in texts[0]
    assert window.takes_panel.store.list() == []
    for notice in list(window._notices):
        notice.close()
    window.shutdown()


def test_a_file_where_the_takes_folder_should_be_is_named(qtbot, monkeypatch, tmp_path):
    (tmp_path / "usb").write_text("a file, not a folder")
    window = _open_studio(qtbot, monkeypatch, tmp_path / "usb" / "takes")
    assert any("ENOTDIR" in notice.text() for notice in window._notices)
    assert "ENOTDIR" in window.statusBar().currentMessage()
    for notice in list(window._notices):
        notice.close()
    window.shutdown()
