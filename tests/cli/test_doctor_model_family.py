"""``cosyvoice-studio doctor`` names the family of the folder it checks (CosyVoice2 or CosyVoice3)."""

from __future__ import annotations

import json

from studio.cli import main
from studio.model_layout import COSYVOICE3


def _doctor_model_check(folder, tmp_path) -> tuple[int, dict]:
    report = tmp_path / "doctor.json"
    code = main(["doctor", "--model", str(folder), "--json", str(report)])
    return code, next(check for check in json.loads(report.read_text()) if check["name"] == "model")


def test_doctor_passes_a_cosyvoice3_folder_and_names_its_family(tiny_cosyvoice3_dir, tmp_path, capsys):
    _, model = _doctor_model_check(tiny_cosyvoice3_dir, tmp_path)
    assert model["status"] == "pass"
    assert (
        f"CosyVoice3 folder (Fun-CosyVoice3-0.5B): all {len(COSYVOICE3.required_files)} required files"
        in (model["detail"])
    )
    assert "matching cosyvoice3.yaml" in model["detail"]
    assert f"model: {model['detail']}" in capsys.readouterr().out


def test_doctor_lists_what_a_cosyvoice3_folder_lacks_by_its_family(tmp_path):
    folder = tmp_path / "model"  # a name that does not give the family away
    for name in (*COSYVOICE3.required_files, "config.json"):
        if name != "speech_tokenizer_v3.onnx":
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(b"")
    code, model = _doctor_model_check(folder, tmp_path)
    assert code == 1 and model["status"] == "fail"
    assert "CosyVoice3 folder" in model["detail"] and "lacks speech_tokenizer_v3.onnx" in model["detail"]
    assert "speech_tokenizer_v2.onnx" not in model["detail"] and "cosyvoice2.yaml" not in model["detail"]
    assert "Fun-CosyVoice3-0.5B release" in model["hint"]


def test_doctor_names_the_broken_file_of_a_cosyvoice3_folder(tiny_cosyvoice3_dir, tmp_path):
    folder = tmp_path / "model"
    for path in tiny_cosyvoice3_dir.rglob("*"):
        if path.is_file():
            relative = path.relative_to(tiny_cosyvoice3_dir)
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            (folder / relative).symlink_to(path)
    data = (tiny_cosyvoice3_dir / "flow.pt").read_bytes()
    (folder / "flow.pt").unlink()
    (folder / "flow.pt").write_bytes(data[: len(data) // 2])
    code, model = _doctor_model_check(folder, tmp_path)
    assert code == 1 and model["status"] == "fail" and "flow.pt" in model["detail"]
    assert "delete flow.pt" in model["hint"] and "Fun-CosyVoice3-0.5B release" in model["hint"]
