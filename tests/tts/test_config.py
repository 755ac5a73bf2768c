"""Reading cosyvoice2.yaml and cosyvoice3.yaml: HyperPyYAML tags without upstream code, references,
arithmetic, clear errors."""

from __future__ import annotations

import time

import pytest

from studio.tts.config import AttrDict, Tagged, read_config
from studio.tts.errors import ConfigError
from studio.tts.fabricate.yaml_template import FULL_DIMENSIONS, TINY_DIMENSIONS, render_yaml


@pytest.fixture
def official_yaml(tmp_path):
    path = tmp_path / "cosyvoice2.yaml"
    path.write_text(render_yaml(FULL_DIMENSIONS))
    return path


def test_official_yaml_resolves_references_and_arithmetic(official_yaml):
    config = read_config(official_yaml, {"qwen_pretrain_path": "/models/CosyVoice-BlankEN"})
    llm = config["llm"]
    assert isinstance(llm, Tagged) and llm.target == "cosyvoice.llm.llm.Qwen2LM"
    assert llm.kwargs["llm_input_size"] == 896 and llm.kwargs["speech_token_size"] == 6561
    assert llm.kwargs["llm"].kwargs["pretrain_path"] == "/models/CosyVoice-BlankEN"
    assert config["get_tokenizer"].kwargs["token_path"] == "/models/CosyVoice-BlankEN"
    estimator = config["flow"].kwargs["decoder"].kwargs["estimator"].kwargs
    assert estimator["static_chunk_size"] == 25 * 2  # !ref <chunk_size> * <token_mel_ratio>
    assert estimator["num_decoding_left_chunks"] == -1
    cfm = config["flow"].kwargs["decoder"].kwargs["cfm_params"].kwargs["content"]
    assert cfm["sigma_min"] == pytest.approx(1e-6) and isinstance(cfm["sigma_min"], float)
    assert cfm["inference_cfg_rate"] == pytest.approx(0.7)
    assert config["hift"].kwargs["sampling_rate"] == 24000
    assert config["hifigan"].kwargs["generator"] == config["hift"]  # a reference to a whole section
    assert config.sample_rate == 24000 and config.chunk_size == 25
    assert config["train_conf"]["optim_conf"]["lr"] == pytest.approx(1e-5)


def test_sections_build_our_classes(tmp_path):
    from studio.tts.flow.flow import CausalMaskedDiffWithXvec
    from studio.tts.hift.model import HiFTGenerator

    path = tmp_path / "cosyvoice2.yaml"
    path.write_text(render_yaml(TINY_DIMENSIONS))
    config = read_config(path)
    hift = config.build("hift")
    assert isinstance(hift, HiFTGenerator) and type(hift).__module__.startswith("studio.")
    flow = config.build("flow")
    assert isinstance(flow, CausalMaskedDiffWithXvec)
    assert flow.encoder.output_size() == 512 and flow.pre_lookahead_len == 3
    with pytest.raises(ConfigError, match="not a model section"):
        config.build("hifigan")  # training-only sections are never built


def test_attrdict_reads_as_mapping_and_attributes():
    params = AttrDict({"solver": "euler", "inference_cfg_rate": 0.7})
    assert params.solver == params["solver"] == "euler"
    with pytest.raises(AttributeError):
        _ = params.missing


def test_string_interpolation_and_override(tmp_path):
    path = tmp_path / "cosyvoice2.yaml"
    path.write_text(
        render_yaml(TINY_DIMENSIONS) + "data_dir: /data\nlist_file: !ref <data_dir>/list.txt\n"
        "half: !ref <sample_rate> // 2\n"
    )
    config = read_config(path, {"data_dir": "/elsewhere"})
    assert config["list_file"] == "/elsewhere/list.txt"
    assert config["half"] == 12000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("llm: [unclosed\n", "not valid yaml"),
        ("- a\n- b\n", "mapping"),
        ("a: !ref <nowhere>\nllm: 1\n", "nowhere"),
        ("llm: !new:some.Unknown\nhift: !new:x.Z\n", "expected a .flow"),
    ],
)
def test_bad_yaml_raises_config_error_naming_the_file(tmp_path, text, message):
    path = tmp_path / "cosyvoice2.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        read_config(path)
    assert info.value.path == path


def test_missing_yaml_and_unknown_class(tmp_path):
    with pytest.raises(ConfigError, match="missing"):
        read_config(tmp_path / "cosyvoice2.yaml")
    path = tmp_path / "cosyvoice2.yaml"
    path.write_text(
        render_yaml(TINY_DIMENSIONS).replace(
            "cosyvoice.hifigan.generator.HiFTGenerator", "cosyvoice.hifigan.generator.Other"
        )
    )
    with pytest.raises(ConfigError, match="unknown class 'cosyvoice.hifigan.generator.Other'"):
        read_config(path).build("hift")


@pytest.mark.timeout(5)
@pytest.mark.parametrize("expression", ["<x> ** 9 ** 9 ** 9", "9 ** 9 ** 9 ** 9", "<x> * 99999999999 * <x>"])
def test_huge_arithmetic_is_refused_instead_of_hanging(tmp_path, expression):
    path = tmp_path / "cosyvoice2.yaml"
    path.write_text(render_yaml(TINY_DIMENSIONS) + f"x: 99999999\nbomb: !ref {expression}\n")
    start = time.monotonic()
    with pytest.raises(ConfigError, match="too large") as info:
        read_config(path)
    assert time.monotonic() - start < 1
    assert info.value.path == path and "cosyvoice2.yaml" in str(info.value)


@pytest.mark.timeout(5)
def test_long_arithmetic_and_division_by_zero_are_config_errors(tmp_path):
    path = tmp_path / "cosyvoice2.yaml"
    path.write_text(render_yaml(TINY_DIMENSIONS) + "long: !ref " + " + ".join(["<sample_rate>"] * 60) + "\n")
    with pytest.raises(ConfigError, match="too large"):
        read_config(path)
    path.write_text(render_yaml(TINY_DIMENSIONS) + "zero: !ref <sample_rate> // 0\n")
    with pytest.raises(ConfigError, match="cannot be evaluated"):
        read_config(path)
    path.write_text(render_yaml(TINY_DIMENSIONS) + "ok: !ref 2 ** 10 * <sample_rate> - 3 ** 4\n")
    assert read_config(path)["ok"] == 2**10 * 24000 - 81


def _billion_laughs(levels: int = 9) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(10)
@pytest.mark.parametrize("where", ["top", "section"])
def test_billion_laughs_is_refused_quickly_naming_the_file(tmp_path, where):
    path = tmp_path / "cosyvoice2.yaml"
    bomb = _billion_laughs()
    if where == "section":
        bomb += "extra: !ref <l9>\n"
    path.write_text(render_yaml(TINY_DIMENSIONS) + bomb)
    start = time.monotonic()
    with pytest.raises(ConfigError, match="expand to more than") as info:
        read_config(path)
    assert time.monotonic() - start < 2
    assert info.value.path == path


def test_small_aliases_are_shared_and_still_resolve(tmp_path):
    path = tmp_path / "cosyvoice2.yaml"
    path.write_text(render_yaml(TINY_DIMENSIONS) + "a: &a [1, 2, !ref <sample_rate>]\nb: [*a, *a]\n")
    config = read_config(path)
    assert config["b"] == [[1, 2, 24000], [1, 2, 24000]]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "text", ["rec: &r [1, *r]\n", "rec: &r {x: *r}\n", "deep: " + "[" * 5000 + "]" * 5000 + "\n"]
)
def test_recursive_or_deep_yaml_names_the_file(tmp_path, text):
    path = tmp_path / "cosyvoice2.yaml"
    path.write_text(render_yaml(TINY_DIMENSIONS) + text)
    with pytest.raises(ConfigError) as info:
        read_config(path)
    assert info.value.path == path and "cosyvoice2.yaml" in str(info.value)


def test_the_cosyvoice3_yaml_builds_our_cosyvoice3_classes(tmp_path):
    from studio.tts.cosyvoice3.dit import DiT
    from studio.tts.cosyvoice3.flow import CausalMaskedDiffWithDiT, PreLookaheadLayer
    from studio.tts.cosyvoice3.hift import CausalConvRNNF0Predictor, CausalHiFTGenerator
    from studio.tts.fabricate import yaml_template_cv3

    path = tmp_path / "cosyvoice3.yaml"
    path.write_text(yaml_template_cv3.render_yaml(yaml_template_cv3.TINY_DIMENSIONS))
    config = read_config(path)
    estimator = config["flow"].kwargs["decoder"].kwargs["estimator"]
    assert estimator.target == "cosyvoice.flow.DiT.dit.DiT" and estimator.kwargs["static_chunk_size"] == 50
    flow = config.build("flow")
    assert isinstance(flow, CausalMaskedDiffWithDiT) and isinstance(flow.decoder.estimator, DiT)
    assert isinstance(flow.pre_lookahead_layer, PreLookaheadLayer) and flow.pre_lookahead_len == 3
    hift = config.build("hift")
    assert isinstance(hift, CausalHiFTGenerator) and isinstance(hift.f0_predictor, CausalConvRNNF0Predictor)
    assert hift.conv_pre_look_right == 4


def test_the_tokenizer_version_and_the_prompt_mel_come_from_the_yaml(tmp_path):
    from studio.tts.fabricate import yaml_template_cv3

    cosyvoice2 = tmp_path / "cosyvoice2.yaml"
    cosyvoice2.write_text(render_yaml(FULL_DIMENSIONS))
    assert read_config(cosyvoice2).tokenizer_version == "cosyvoice2"  # upstream's default: no version given
    assert read_config(cosyvoice2).prompt_mel_fmax == 8000.0
    cosyvoice3 = tmp_path / "cosyvoice3.yaml"
    text = yaml_template_cv3.render_yaml(yaml_template_cv3.FULL_DIMENSIONS)
    cosyvoice3.write_text(text)
    assert read_config(cosyvoice3).tokenizer_version == "cosyvoice3"
    assert read_config(cosyvoice3).prompt_mel_fmax is None  # up to the Nyquist frequency
    cosyvoice3.write_text(text.replace("version: cosyvoice3", "version: [3]"))
    with pytest.raises(ConfigError, match=r"cosyvoice3\.yaml: get_tokenizer's version must be a name"):
        _ = read_config(cosyvoice3).tokenizer_version
    cosyvoice3.write_text(text.replace("fmax: null", "fmax: -1"))
    with pytest.raises(ConfigError, match=r"cosyvoice3\.yaml: feat_extractor's fmax must be a positive"):
        _ = read_config(cosyvoice3).prompt_mel_fmax
