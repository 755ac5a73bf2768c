"""Without a model folder the window opens on the first-run panel, which accepts only complete folders."""

from __future__ import annotations

import pytest

from studio.gui.first_run import missing_model_files
from studio.model_layout import REQUIRED_FILES
from studio.settings import Settings

pytestmark = pytest.mark.gui


def test_first_run_panel_until_a_complete_model_folder_is_chosen(qtbot, tmp_path, monkeypatch):
    from studio.gui.app import create_window

    window = create_window(Settings(model_dir=""))
    qtbot.addWidget(window)
    monkeypatch.setattr(window, "start_engine", lambda: None)  # the engine is tested elsewhere
    assert window.pages.currentWidget() is window.first_run
    assert "babbles" in window.first_run.findChild(type(window.first_run.message), "Hint").text()

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "cosyvoice2.yaml").write_text("")
    assert not window.first_run.use_folder(str(folder))
    assert "llm.pt" in window.first_run.message.text()
    assert window.pages.currentWidget() is window.first_run

    for name in REQUIRED_FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"")
    (folder / "README.md").write_text("Random-weight CosyVoice2 folder (tiny) written by make-model.")
    assert missing_model_files(folder) == []
    with qtbot.waitSignal(window.first_run.sig_model_ready, timeout=1000):
        assert window.first_run.use_folder(str(folder))
    assert window.pages.currentWidget() is window.studio_page
    assert window.settings.model_dir == str(folder)
    assert "babbles" in window.windowTitle()
    window.shutdown()
