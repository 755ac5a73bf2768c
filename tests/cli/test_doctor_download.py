"""doctor reports what it finds without crashing on a GPU-less machine; download fails fast offline."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from studio.cli import main
from studio.commands import doctor
from studio.model_layout import FLOW_FILE, LLM_FILE, REQUIRED_FILES, YAML_FILE


def test_doctor_runs_and_says_what_it_found(tmp_path, capsys):
    report = tmp_path / "doctor.json"
    rc = main(["doctor", "--model", str(tmp_path / "no-model"), "--json", str(report)])
    out = capsys.readouterr().out
    checks = {c["name"]: c for c in json.loads(report.read_text())}
    assert {"python", "torch", "vllm", "onnxruntime", "model"} <= set(checks)
    assert checks["python"]["status"] == "pass"
    assert checks["model"]["status"] == "fail" and "fix:" in out  # a missing folder fails, with a hint
    assert rc == 1
    for check in checks.values():
        assert check["status"] in ("pass", "warn", "fail") and check["detail"]
        assert f"{check['name']}: {check['detail']}" in out


def _linked_copy(source: Path, target: Path, *, copied: str | None = None) -> Path:
    """``target`` with a symlink to every file of ``source`` but ``copied``, which is a real copy to damage."""
    for file in source.rglob("*"):
        if file.is_file():
            relative = file.relative_to(source)
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            if str(relative) == copied:
                shutil.copyfile(file, target / relative)
            else:
                (target / relative).symlink_to(file)
    return target / copied if copied else target


def test_doctor_model_folder_completeness(tmp_path, tiny_model_dir):
    _linked_copy(tiny_model_dir, tmp_path)  # doctor reads the files: they must be real ones
    assert all((tmp_path / name).is_file() for name in REQUIRED_FILES)
    assert doctor.check_model(str(tmp_path)).status == "pass"
    (tmp_path / "flow.pt").unlink()
    check = doctor.check_model(str(tmp_path))
    assert check.status == "fail" and "flow.pt" in check.detail and check.hint


def test_doctor_passes_an_intact_model_folder(tmp_path, tiny_model_dir):
    _linked_copy(tiny_model_dir, tmp_path)
    check = doctor.check_model(str(tmp_path))
    assert check.status == "pass" and "matching cosyvoice2.yaml" in check.detail and not check.hint


def _assert_fails_naming(folder: Path, *names: str) -> None:
    check = doctor.check_model(str(folder))
    assert check.status == "fail", check
    for name in names:
        assert name in check.detail, check.detail
    assert "cosyvoice-studio download --to" in check.hint


def test_doctor_fails_a_truncated_llm_checkpoint(tmp_path, tiny_model_dir):
    llm = _linked_copy(tiny_model_dir, tmp_path, copied=LLM_FILE)
    with llm.open("r+b") as file:
        file.truncate(llm.stat().st_size // 2)
    _assert_fails_naming(tmp_path, LLM_FILE, "truncated or corrupt")


def test_doctor_fails_a_yaml_with_a_syntax_error(tmp_path, tiny_model_dir):
    yaml_file = _linked_copy(tiny_model_dir, tmp_path, copied=YAML_FILE)
    yaml_file.write_text(yaml_file.read_text() + "broken: [unclosed\n")
    _assert_fails_naming(tmp_path, YAML_FILE, "not valid yaml")


def test_doctor_fails_a_flow_checkpoint_with_a_wrong_shape(tmp_path, tiny_model_dir):
    import torch

    flow = _linked_copy(tiny_model_dir, tmp_path, copied=FLOW_FILE)
    state = torch.load(flow, map_location="cpu", weights_only=True)
    key = next(k for k, v in state.items() if v.dim() == 2)
    state[key] = torch.zeros(state[key].shape[0] + 1, state[key].shape[1])
    torch.save(state, flow)
    _assert_fails_naming(tmp_path, FLOW_FILE, key, "shape mismatch")


def _rtx_5090():
    from studio.gpu.nvml import GpuSnapshot

    return GpuSnapshot(0, "NVIDIA GeForce RTX 5090", (12, 0), "575.51", 32 * 2**30, 2**30, 3)


@pytest.mark.parametrize(
    ("torch_version", "cuda", "expected"),
    [
        ("2.6.0+cu124", "12.4", "needs torch >= 2.7 built for CUDA >= 12.8"),
        ("2.8.0+cu126", "12.6", "needs torch >= 2.7 built for CUDA >= 12.8"),
        ("2.13.0+cpu", None, "CPU-only build but a GPU is present"),
    ],
)
def test_doctor_fails_torch_builds_that_cannot_drive_an_rtx_5090(monkeypatch, torch_version, cuda, expected):
    import torch

    monkeypatch.setattr(torch, "__version__", torch_version)
    monkeypatch.setattr(torch.version, "cuda", cuda)
    (check,) = doctor.check_torch([_rtx_5090()])
    assert check.status == "fail" and expected in check.detail and check.hint


def test_doctor_accepts_a_matching_build(monkeypatch):
    import torch

    monkeypatch.setattr(torch, "__version__", "2.8.0+cu128")
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_90", "sm_100", "sm_120"])
    (check,) = doctor.check_torch([_rtx_5090()])
    assert check.status == "pass" and "sm_120" in check.detail


def test_download_fails_fast_with_a_clear_message(tmp_path, capsys):
    start = time.monotonic()
    rc = main(["download", "--to", str(tmp_path / "cv2"), "--timeout", "3"])
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert rc == 1
    assert elapsed < 20
    assert "could not be downloaded" in err and "huggingface_hub" in err and "fix:" in err
    assert "--model" in err and not (tmp_path / "cv2").exists()  # no empty "model" folder left behind


def test_a_cosyvoice3_download_names_its_release_and_its_default_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STUDIO_DATA_DIR", str(tmp_path / "data"))
    rc = main(["download", "--family", "cosyvoice3", "--timeout", "3"])
    captured = capsys.readouterr()
    assert rc == 1
    target = tmp_path / "data" / "models" / "Fun-CosyVoice3-0.5B-2512"
    assert f"downloading FunAudioLLM/Fun-CosyVoice3-0.5B-2512 into {target}" in captured.out
    assert "copy a Fun-CosyVoice3-0.5B-2512 folder" in captured.err and not target.exists()


def test_a_download_from_the_studio_advises_the_studio_and_keeps_a_folder_that_was_there(tmp_path, capsys):
    existing = tmp_path / "models" / "CosyVoice2-0.5B"
    existing.mkdir(parents=True)
    rc = main(["download", "--from-studio", "--to", str(existing), "--timeout", "3"])
    err = capsys.readouterr().err
    assert rc == 1 and "Choose a model folder" in err and "--model" not in err
    assert existing.is_dir()  # the user's folder is not ours to remove


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in ("synth", "bench", "doctor", "download"):
        assert name in out


def test_doctor_json_prints_the_findings_and_version_answers(tmp_path, capsys):
    from studio import __version__

    rc = main(["doctor", "--model", str(tmp_path / "no-model"), "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert rc == 1 and checks["model"]["status"] == "fail" and checks["python"]["status"] == "pass"
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"cosyvoice-studio {__version__}"


@pytest.mark.parametrize("where", ["missing", "under_a_file"])
def test_doctor_reads_settings_without_a_writable_config_folder(tmp_path, monkeypatch, capsys, where):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    config = tmp_path / "gone" / "config" if where == "missing" else blocker / "config"
    monkeypatch.setenv("STUDIO_CONFIG_DIR", str(config))
    rc = main(["doctor", "--json", str(tmp_path / "doctor.json")])
    captured = capsys.readouterr()
    assert rc in (0, 1) and "Traceback" not in captured.err
    assert json.loads((tmp_path / "doctor.json").read_text())
    assert not config.exists()  # reading settings creates nothing


def test_doctor_json_onto_a_full_disk_leaves_no_file_and_says_so(tmp_path, capsys, small_disk):
    disk = small_disk(64, full=True)
    rc = main(["doctor", "--model", str(tmp_path / "no-model"), "--json", str(disk / "doctor.json")])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert "report was not written" in err and "doctor.json" in err and "full" in err
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no empty report, no temporary file
