"""The first-run screen, `doctor` and the loader agree on what a complete model folder is."""

from __future__ import annotations

import pytest

from studio.commands.doctor import check_model
from studio.gui.first_run import missing_model_files
from studio.model_layout import REQUIRED_FILES
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


def test_a_folder_the_first_run_screen_accepts_loads(tiny_model_dir, tmp_path):
    from studio.tts.loader import load_model_folder

    folder = _linked_copy(tiny_model_dir, tmp_path / "model")
    assert missing_model_files(folder) == []
    assert check_model(str(folder)).status == "pass"
    parts = load_model_folder(folder, device="cpu")
    assert parts.model_dir == folder and parts.frontend is not None
