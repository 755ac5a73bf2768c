"""The first-run screen, `doctor` and the loader agree on what a complete model folder is, for both families
(CosyVoice2 and CosyVoice3), and name the family of the folder they look at."""

from __future__ import annotations

import pytest

from studio.commands.doctor import check_model
from studio.gui.first_run import missing_model_files
from studio.model_layout import COSYVOICE2, COSYVOICE3, REQUIRED_FILES, folder_family
from studio.tts.errors import MissingModelFileError
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


@pytest.mark.parametrize(
    "left_out", COSYVOICE3.required_files[1:]
)  # without its yaml it is no CosyVoice3 folder
def test_a_cosyvoice3_folder_missing_any_of_its_files_is_refused_by_all_three(
    tiny_cosyvoice3_dir, tmp_path, left_out
):
    folder = _linked_copy(tiny_cosyvoice3_dir, tmp_path / "model", leave_out=left_out)
    assert missing_model_files(folder) == [left_out]
    check = check_model(str(folder))
    assert check.status == "fail" and left_out in check.detail and "CosyVoice3 folder" in check.detail
    with pytest.raises(MissingModelFileError) as caught:
        check_folder(folder)
    assert caught.value.path == folder / left_out


@pytest.mark.parametrize("family", [COSYVOICE2, COSYVOICE3], ids=lambda family: family.name)
def test_a_folder_the_first_run_screen_accepts_loads_and_is_named_by_its_family(
    qtbot, tiny_model_dir, tiny_cosyvoice3_dir, tmp_path, family
):
    from studio.gui.first_run import FirstRunPanel
    from studio.tts.loader import load_model_folder

    source = tiny_model_dir if family == COSYVOICE2 else tiny_cosyvoice3_dir
    folder = _linked_copy(source, tmp_path / "model")
    assert missing_model_files(folder) == []
    check = check_model(str(folder))
    assert check.status == "pass"
    assert f"{family.name} folder ({family.model}): all {len(family.required_files)} required files" in (
        check.detail
    )
    panel = FirstRunPanel(tmp_path / "models")
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.sig_model_ready) as ready:
        assert panel.use_folder(str(folder))
    assert ready.args == [str(folder)] and family.folder_kind in panel.message.text()
    parts = load_model_folder(folder, device="cpu")
    assert parts.model_dir == folder and parts.family == family and parts.frontend is not None


def test_a_cosyvoice2_folder_that_also_holds_a_cosyvoice3_yaml_stays_a_cosyvoice2_folder(
    tiny_model_dir, tmp_path
):
    folder = _linked_copy(tiny_model_dir, tmp_path / "model", leave_out="flow.pt")
    (folder / "cosyvoice3.yaml").write_text("")
    assert folder_family(folder) == COSYVOICE2
    assert missing_model_files(folder) == ["flow.pt"]
    assert "flow.pt" in check_model(str(folder)).detail
    with pytest.raises(MissingModelFileError):
        check_folder(folder)


def test_a_studio_set_to_an_incomplete_cosyvoice3_folder_opens_on_the_first_run_screen_saying_why(
    qtbot, tiny_cosyvoice3_dir, tmp_path, monkeypatch
):
    from studio.gui.app import create_window
    from studio.settings import Settings

    folder = _linked_copy(tiny_cosyvoice3_dir, tmp_path / "model", leave_out="speech_tokenizer_v3.onnx")
    window = create_window(Settings(model_dir=str(folder)))
    qtbot.addWidget(window)
    monkeypatch.setattr(window, "start_engine", lambda: None)  # no model to load: nothing to start
    assert window.pages.currentWidget() is window.first_run
    message = window.first_run.message.text()
    assert "incomplete CosyVoice3 folder (Fun-CosyVoice3-0.5B)" in message
    assert "speech_tokenizer_v3.onnx" in message
    window.shutdown()
