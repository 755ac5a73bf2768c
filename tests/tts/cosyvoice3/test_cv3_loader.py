"""Loading a CosyVoice3 folder: its own yaml, classes and speech tokenizer, strictly, with errors naming the file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from studio.model_layout import COSYVOICE3
from studio.tts.errors import ConfigError, MissingModelFileError, ModelFolderError
from studio.tts.loader import load_model_folder, validate_folder


def _linked_copy(source: Path, target: Path) -> Path:
    """A copy whose files are hard links (cheap); tests replace files rather than edit them in place."""
    shutil.copytree(source, target, copy_function=os.link)
    return target


def _replace(path: Path, data: bytes) -> None:
    path.unlink()  # break the hard link before writing
    path.write_bytes(data)


def _save_state(path: Path, state: dict) -> None:
    path.unlink()
    torch.save(state, path)


@pytest.fixture(scope="module")
def loaded(tiny_cosyvoice3_dir):
    return load_model_folder(tiny_cosyvoice3_dir, device="cpu")


def test_a_tiny_cosyvoice3_folder_validates_and_loads_strictly_as_cosyvoice3(tiny_cosyvoice3_dir, loaded):
    from studio.tts.cosyvoice3.dit import DiT
    from studio.tts.cosyvoice3.flow import CausalMaskedDiffWithDiT, PreLookaheadLayer
    from studio.tts.cosyvoice3.hift import CausalConvRNNF0Predictor, CausalHiFTGenerator
    from studio.tts.cosyvoice3.llm import CosyVoice3LM

    assert validate_folder(tiny_cosyvoice3_dir) == tiny_cosyvoice3_dir
    assert loaded.family == COSYVOICE3 and loaded.config.path.name == "cosyvoice3.yaml"
    assert isinstance(loaded.llm, CosyVoice3LM)
    assert isinstance(loaded.flow, CausalMaskedDiffWithDiT)
    assert isinstance(loaded.flow.pre_lookahead_layer, PreLookaheadLayer)
    assert isinstance(loaded.flow.decoder.estimator, DiT)
    assert isinstance(loaded.hift, CausalHiFTGenerator)
    assert isinstance(loaded.hift.f0_predictor, CausalConvRNNF0Predictor)
    assert loaded.flow.decoder.estimator.static_chunk_size == 50  # !ref <chunk_size> * <token_mel_ratio>
    assert loaded.llm.llm_decoder.out_features == 6561 + 200 and loaded.llm.llm_decoder.bias is None
    for module in (loaded.llm, loaded.flow, loaded.hift):
        assert not module.training
        weights = [p for name, p in module.named_parameters() if not name.startswith("f0_predictor.")]
        assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in weights)  # F0: HiFT's choice
    # strict: every tensor of llm.pt is one of the module's, lm_head of the Qwen2 wrapper included
    saved = torch.load(tiny_cosyvoice3_dir / "llm.pt", weights_only=True)
    assert saved.keys() == loaded.llm.state_dict().keys() and "llm.model.lm_head.weight" in saved
    assert loaded.frontend.speech_tokenizer.path.name == "speech_tokenizer_v3.onnx"
    assert loaded.frontend.text.special_tokens[-1] == "[ǜ]"  # CosyVoice3's tokenizer, from the yaml


def test_the_loaded_flow_and_hift_turn_tokens_into_finite_unclipped_audio(loaded):
    generator = torch.Generator().manual_seed(0)
    token = torch.randint(0, 6561, (1, 20), generator=generator, dtype=torch.int32)
    prompt = torch.randint(0, 6561, (1, 6), generator=generator, dtype=torch.int32)
    mel, _ = loaded.flow.inference(
        token,
        torch.tensor([20]),
        prompt,
        torch.tensor([6]),
        torch.randn(1, 12, 80, generator=generator) - 6,
        torch.tensor([12]),
        torch.randn(1, 192, generator=generator),
    )
    speech, _ = loaded.hift.inference(mel)
    assert mel.shape == (1, 80, 40) and torch.isfinite(mel).all()
    assert speech.shape == (1, 40 * 480) and torch.isfinite(speech).all()
    assert 0 < speech.abs().max() < 0.99


def test_a_truncated_flow_pt_is_named(tiny_cosyvoice3_dir, tmp_path):
    folder = _linked_copy(tiny_cosyvoice3_dir, tmp_path / "m")
    data = (tiny_cosyvoice3_dir / "flow.pt").read_bytes()
    _replace(folder / "flow.pt", data[: len(data) // 2])
    for load in (validate_folder, lambda f: load_model_folder(f, device="cpu")):
        with pytest.raises(ModelFolderError, match=r"flow\.pt: cannot be read .*truncated") as info:
            load(folder)
        assert info.value.path == folder / "flow.pt"


def test_a_cosyvoice2_llm_pt_in_a_cosyvoice3_folder_is_named(tiny_model_dir, tiny_cosyvoice3_dir, tmp_path):
    folder = _linked_copy(tiny_cosyvoice3_dir, tmp_path / "m")
    (folder / "llm.pt").unlink()
    shutil.copy(tiny_model_dir / "llm.pt", folder / "llm.pt")
    for load in (validate_folder, lambda f: load_model_folder(f, device="cpu")):
        with pytest.raises(ModelFolderError, match=r"llm\.pt: does not match cosyvoice3\.yaml") as info:
            load(folder)
        assert info.value.path == folder / "llm.pt"
        assert "llm_embedding.weight" in str(info.value)  # CosyVoice2's sos/task table has no place here


def test_a_cosyvoice2_flow_pt_in_a_cosyvoice3_folder_is_named(tiny_model_dir, tiny_cosyvoice3_dir, tmp_path):
    folder = _linked_copy(tiny_cosyvoice3_dir, tmp_path / "m")
    (folder / "flow.pt").unlink()
    shutil.copy(tiny_model_dir / "flow.pt", folder / "flow.pt")
    with pytest.raises(ModelFolderError, match=r"flow\.pt: does not match cosyvoice3\.yaml"):
        validate_folder(folder)


def test_a_missing_speech_tokenizer_v3_is_named_even_beside_a_v2_one(
    tiny_model_dir, tiny_cosyvoice3_dir, tmp_path
):
    folder = _linked_copy(tiny_cosyvoice3_dir, tmp_path / "m")
    (folder / "speech_tokenizer_v3.onnx").unlink()
    shutil.copy(tiny_model_dir / "speech_tokenizer_v2.onnx", folder / "speech_tokenizer_v2.onnx")
    for load in (validate_folder, lambda f: load_model_folder(f, device="cpu")):
        with pytest.raises(MissingModelFileError, match=r"speech_tokenizer_v3\.onnx: missing") as info:
            load(folder)
        assert info.value.path == folder / "speech_tokenizer_v3.onnx"


def test_a_corrupt_speech_tokenizer_v3_is_named(tiny_cosyvoice3_dir, tmp_path):
    folder = _linked_copy(tiny_cosyvoice3_dir, tmp_path / "m")
    _replace(folder / "speech_tokenizer_v3.onnx", b"not an onnx model")
    with pytest.raises(ModelFolderError, match=r"speech_tokenizer_v3\.onnx"):
        validate_folder(folder)
    with pytest.raises(ModelFolderError, match=r"speech_tokenizer_v3\.onnx"):
        load_model_folder(folder, device="cpu")


def test_hift_pt_with_the_generator_prefix_and_old_weight_norm_keys_loads(
    tiny_cosyvoice3_dir, tmp_path, loaded
):
    folder = _linked_copy(tiny_cosyvoice3_dir, tmp_path / "m")
    state = torch.load(tiny_cosyvoice3_dir / "hift.pt", weights_only=True)
    old_style = {}
    for key, value in state.items():
        key = key.replace("parametrizations.weight.original0", "weight_g")
        old_style[f"generator.{key.replace('parametrizations.weight.original1', 'weight_v')}"] = value
    assert any(k.endswith("weight_g") for k in old_style)
    _save_state(folder / "hift.pt", old_style)
    validate_folder(folder)
    hift = load_model_folder(folder, device="cpu").hift
    mel = torch.randn(1, 80, 10, generator=torch.Generator().manual_seed(1)) - 5
    assert torch.equal(hift.inference(mel)[0], loaded.hift.inference(mel)[0])

    del old_style[next(iter(old_style))]
    _save_state(folder / "hift.pt", old_style)
    with pytest.raises(ModelFolderError, match=r"hift\.pt: does not match cosyvoice3\.yaml"):
        validate_folder(folder)


def test_a_yaml_naming_an_unknown_tokenizer_is_named(tiny_cosyvoice3_dir, tmp_path):
    folder = _linked_copy(tiny_cosyvoice3_dir, tmp_path / "m")
    text = (tiny_cosyvoice3_dir / "cosyvoice3.yaml").read_text()
    assert "version: cosyvoice3" in text
    _replace(folder / "cosyvoice3.yaml", text.replace("version: cosyvoice3", "version: cosyvoice9").encode())
    with pytest.raises(ConfigError, match=r"cosyvoice3\.yaml: get_tokenizer: unknown tokenizer version"):
        validate_folder(folder)


def test_without_its_backbone_the_cosyvoice3_lm_keeps_its_embeddings_and_head(tiny_cosyvoice3_dir):
    from studio.tts.loader import load_llm, read_folder_config

    config = read_folder_config(tiny_cosyvoice3_dir)
    full = load_llm(tiny_cosyvoice3_dir, config, torch.device("cpu"))
    lean = load_llm(tiny_cosyvoice3_dir, config, torch.device("cpu"), backbone=False)
    assert len(lean.llm.model.model.layers) == 0 and len(full.llm.model.model.layers) == 2
    kept = lean.state_dict()
    assert {"speech_embedding.weight", "llm_decoder.weight", "llm.model.model.embed_tokens.weight"} <= set(
        kept
    )
    assert all(torch.equal(tensor, full.state_dict()[name]) for name, tensor in kept.items())
    text, speech = [1, 2, 3], [4, 5]
    assert torch.equal(
        lean.build_prompt_embeds(text, [7], speech), full.build_prompt_embeds(text, [7], speech)
    )
