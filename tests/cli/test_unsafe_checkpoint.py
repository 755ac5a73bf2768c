"""A crafted checkpoint (a pickle that calls code) is refused by name on every CLI path: no traceback, and
never torch's advice to retry the load with ``weights_only=False``; the CLI turns any uncaught failure into
one line."""

from __future__ import annotations

import shutil

import pytest
import soundfile as sf
import torch

from studio.cli import main
from studio.runtime.warmup import WARMUP_PROMPT_TEXT, synthetic_voice
from studio.tts.errors import ModelFolderError


class _Crafted:
    def __reduce__(self):
        return (print, ("this ran while loading the checkpoint",))


@pytest.fixture
def crafted_pt(tmp_path):
    path = tmp_path / "llm.pt"
    torch.save({"weight": torch.zeros(2), "payload": _Crafted()}, path)
    return path


def test_the_vllm_export_and_the_loader_refuse_a_crafted_checkpoint_by_name(crafted_pt, capsys):
    from studio.tts.llm.vllm import export
    from studio.tts.loader import read_state_dict

    for load in (export.weights_dtype, read_state_dict):
        with pytest.raises(ModelFolderError) as info:
            load(crafted_pt)
        assert info.value.path == crafted_pt and "weights-only load refused it" in str(info.value)
        assert "weights_only" not in str(info.value)
    assert "this ran" not in capsys.readouterr().out


@pytest.mark.parametrize("backend", [[], ["--vllm"]])
def test_synth_with_a_crafted_llm_pt_is_one_clear_line(tmp_path, tiny_model_dir, crafted_pt, capsys, backend):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    shutil.copy(crafted_pt, model / "llm.pt")
    prompt = tmp_path / "prompt.wav"
    sf.write(prompt, synthetic_voice(16000, 3.0), 16000)
    out = ["--prompt-text", WARMUP_PROMPT_TEXT, "--out", str(tmp_path / "t.wav")]
    rc = main(["synth", "--model", str(model), "--text", "Hi.", "--prompt-wav", str(prompt), *backend, *out])
    err = capsys.readouterr().err
    assert rc != 0 and "Traceback" not in err and "weights_only" not in err
    assert "llm.pt" in err


def test_an_uncaught_failure_is_one_line(monkeypatch, capsys):
    from studio.commands import doctor

    def broken(args):
        raise RuntimeError("something inside broke\nuse weights_only=False to fix it")

    monkeypatch.setattr(doctor, "run", broken)
    monkeypatch.delenv("STUDIO_DEBUG", raising=False)
    assert main(["doctor"]) == 1
    err = capsys.readouterr().err
    assert (
        err.strip()
        == "error: doctor failed: RuntimeError: something inside broke (STUDIO_DEBUG=1 shows the traceback)"
    )
