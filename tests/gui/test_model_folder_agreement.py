"""The first-run screen, `doctor` and the loader agree on what a complete model folder is, and on what they say
of a folder of the other model family (CosyVoice3)."""

from __future__ import annotations

import pytest

from studio.commands.doctor import check_model
from studio.gui.first_run import missing_model_files
from studio.model_layout import COSYVOICE3, REQUIRED_FILES, foreign_family_problem
from studio.tts.errors import MissingModelFileError, ModelFolderError
from studio.tts.loader import check_folder

pytestmark = pytest.mark.gui


def _linked_copy(source, target, leave_out: str | None = None):
    """``target`` holding links to every file of ``source`` except ``leave_out``."""
    for path in source.rglob("*"):
        relative = path.relative_to(source).as_posix()
        if path.is_file() and relative != leave_out:
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            (target / relative).symlink_to(path)
    return target


@pytest.mark.parametrize("left_out", REQUIRED_FILES)
def test_a_folder_missing_any_required_file_is_refused_by_all_three(tiny_model_dir, tmp_path, left_out):
    folder = _linked_copy(tiny_model_dir, tmp_path / "model", leave_out=left_out)
    assert missing_model_files(folder) == [left_out]
    assert check_model(str(folder)).status == "fail" and left_out in check_model(str(folder)).detail
    with pytest.raises(MissingModelFileError) as caught:
        check_folder(folder)
    assert caught.value.path == folder / left_out


def test_a_folder_the_first_run_screen_accepts_loads(tiny_model_dir, tmp_path):
    from studio.tts.loader import load_model_folder

    folder = _linked_copy(tiny_model_dir, tmp_path / "model")
    assert missing_model_files(folder) == []
    assert check_model(str(folder)).status == "pass"
    parts = load_model_folder(folder, device="cpu")
    assert parts.model_dir == folder and parts.frontend is not None


def _cosyvoice3_folder(folder):
    """A folder in the Fun-CosyVoice3-0.5B layout: cosyvoice3.yaml, the v3 speech tokenizer, the rest by name."""
    for name in (*COSYVOICE3.required_files, "config.json"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"{}" if name.endswith(".json") else b"")
    return folder


def test_a_cosyvoice3_folder_is_named_as_such_by_all_three(qtbot, tmp_path):
    from studio.gui.first_run import FirstRunPanel

    folder = _cosyvoice3_folder(tmp_path / "Fun-CosyVoice3-0.5B-2512")
    problem = foreign_family_problem(folder)
    assert problem is not None and "CosyVoice3" in problem and "CosyVoice2-0.5B" in problem

    check = check_model(str(folder))
    assert check.status == "fail" and problem in check.detail and "missing" not in check.detail and check.hint
    with pytest.raises(ModelFolderError) as caught:
        check_folder(folder)
    assert not isinstance(caught.value, MissingModelFileError)
    assert caught.value.path == folder / "cosyvoice3.yaml" and caught.value.problem == problem

    panel = FirstRunPanel(tmp_path / "models")
    qtbot.addWidget(panel)
    with qtbot.assertNotEmitted(panel.sig_model_ready):
        assert not panel.use_folder(str(folder))
    assert problem in panel.message.text() and "missing" not in panel.message.text()


def test_a_cosyvoice2_folder_that_also_holds_a_cosyvoice3_yaml_stays_a_cosyvoice2_folder(
    tiny_model_dir, tmp_path
):
    folder = _linked_copy(tiny_model_dir, tmp_path / "model", leave_out="flow.pt")
    (folder / "cosyvoice3.yaml").write_text("")
    assert foreign_family_problem(folder) is None
    assert missing_model_files(folder) == ["flow.pt"]
    assert "flow.pt" in check_model(str(folder)).detail
    with pytest.raises(MissingModelFileError):
        check_folder(folder)


def test_a_studio_set_to_a_cosyvoice3_folder_opens_on_the_first_run_screen_saying_why(
    qtbot, tmp_path, monkeypatch
):
    from studio.gui.app import create_window
    from studio.settings import Settings

    folder = _cosyvoice3_folder(tmp_path / "model")
    window = create_window(Settings(model_dir=str(folder)))
    qtbot.addWidget(window)
    monkeypatch.setattr(window, "start_engine", lambda: None)  # no model to load: nothing to start
    assert window.pages.currentWidget() is window.first_run
    assert foreign_family_problem(folder) in window.first_run.message.text()
    window.shutdown()
