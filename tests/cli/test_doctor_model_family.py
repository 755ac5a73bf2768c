"""``cosyvoice-studio doctor`` on a CosyVoice3 folder names the family instead of listing CosyVoice2 files."""

from __future__ import annotations

import json

from studio.cli import main
from studio.model_layout import COSYVOICE2, COSYVOICE3


def test_doctor_names_a_cosyvoice3_folder_and_says_which_family_runs(tmp_path, capsys):
    folder = tmp_path / "model"  # a name that does not give the family away
    for name in (*COSYVOICE3.required_files, "config.json"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"")
    report = tmp_path / "doctor.json"

    assert main(["doctor", "--model", str(folder), "--json", str(report)]) == 1

    model = next(check for check in json.loads(report.read_text()) if check["name"] == "model")
    assert model["status"] == "fail"
    assert "CosyVoice3" in model["detail"] and COSYVOICE2.model in model["detail"]
    assert COSYVOICE2.yaml_file not in model["detail"] and "lacks" not in model["detail"]
    assert "download" in model["hint"] and "truncated" not in model["hint"]
    assert f"model: {model['detail']}" in capsys.readouterr().out
