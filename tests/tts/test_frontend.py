"""The frontend: ONNX model wrappers (stand-in graphs with the official names), prompt features, text splitting."""

from __future__ import annotations

import math

import numpy as np
import pytest
import soundfile
import torch

from studio.tts.fabricate.tokenizer import write_tokenizer_folder
from studio.tts.frontend.features import flow_mel, kaldi_fbank, whisper_log_mel
from studio.tts.frontend.onnx_models import OnnxModelError, SpeakerEmbedder, SpeechTokenizer
from studio.tts.frontend.text import TextFrontend
from studio.tts.loader import load_frontend

EMBED_WEIGHT = np.random.default_rng(0).standard_normal((80, 192)).astype(np.float32)


def _save(graph, path):
    import onnx

    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))


def write_campplus_standin(path, input_name="input"):
    """[B, T, 80] -> max over T -> @ W [80, 192]: an embedding that depends on the features."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [
            helper.make_node("ReduceMax", [input_name], ["pooled"], axes=[1], keepdims=0),
            helper.make_node("MatMul", ["pooled", "w"], ["embedding"]),
        ],
        "campplus_standin",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["B", "T", 80])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["B", 192])],
        [numpy_helper.from_array(EMBED_WEIGHT, "w")],
    )
    _save(graph, path)


def write_speech_tokenizer_standin(path):
    """Every 4th frame, mean over mels, |x| * 1000 mod 6561 -> indices [1, ceil(T/4)] int64."""
    from onnx import TensorProto, helper, numpy_helper

    consts = {"starts": [0], "ends": [2**31 - 1], "axes": [2], "steps": [4], "vocab": 6561}
    inits = [numpy_helper.from_array(np.array(v, dtype=np.int64), k) for k, v in consts.items()]
    inits.append(numpy_helper.from_array(np.array(1000.0, dtype=np.float32), "scale"))
    nodes = [
        helper.make_node("Slice", ["feats", "starts", "ends", "axes", "steps"], ["strided"]),
        helper.make_node("ReduceMean", ["strided"], ["mean"], axes=[1], keepdims=0),
        helper.make_node("Abs", ["mean"], ["abs"]),
        helper.make_node("Mul", ["abs", "scale"], ["scaled"]),
        helper.make_node("Floor", ["scaled"], ["floored"]),
        helper.make_node("Cast", ["floored"], ["ints"], to=TensorProto.INT64),
        helper.make_node("Mod", ["ints", "vocab"], ["indices"]),
    ]
    graph = helper.make_graph(
        nodes,
        "speech_tokenizer_standin",
        [
            helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, 128, "T"]),
            helper.make_tensor_value_info("feats_length", TensorProto.INT32, [1]),
        ],
        [helper.make_tensor_value_info("indices", TensorProto.INT64, [1, "N"])],
        inits,
    )
    _save(graph, path)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cosyvoice2")
    write_tokenizer_folder(folder / "CosyVoice-BlankEN", vocab_size=600)
    write_campplus_standin(folder / "campplus.onnx")
    write_speech_tokenizer_standin(folder / "speech_tokenizer_v2.onnx")
    return folder


@pytest.fixture(scope="module")
def frontend(model_dir):
    return load_frontend(model_dir, torch.device("cpu"))


def _tone(sr, seconds, channels=1):
    t = np.arange(int(sr * seconds)) / sr
    wav = 0.3 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 2 * t)) / 2
    wav = wav + 0.01 * np.random.default_rng(1).standard_normal(t.size)
    return np.stack([wav] * channels, axis=1).astype(np.float32) if channels > 1 else wav.astype(np.float32)


def test_speaker_embedder_runs_mean_normalised_fbank(model_dir):
    wav = torch.from_numpy(_tone(16000, 1.0))
    fbank = kaldi_fbank(wav)
    expected = (fbank - fbank.mean(0)).max(0).values.numpy() @ EMBED_WEIGHT
    got = SpeakerEmbedder(model_dir / "campplus.onnx").embed(wav)
    assert got.shape == (1, 192) and got.dtype == torch.float32
    np.testing.assert_allclose(got[0].numpy(), expected, rtol=1e-4, atol=1e-4)


def test_speech_tokenizer_gives_quarter_rate_int32_tokens(model_dir):
    wav = torch.from_numpy(_tone(16000, 1.01))
    mel = whisper_log_mel(wav)
    tokens = SpeechTokenizer(model_dir / "speech_tokenizer_v2.onnx").tokenize(wav)
    assert tokens.dtype == torch.int32 and tokens.shape == (1, math.ceil(mel.shape[1] / 4))
    expected = np.floor(np.abs(mel[:, ::4].mean(0).numpy()) * 1000).astype(np.int64) % 6561
    assert np.array_equal(tokens[0].numpy(), expected)


def test_onnx_errors_name_the_file(tmp_path):
    broken = tmp_path / "campplus.onnx"
    broken.write_bytes(b"not an onnx model at all")
    with pytest.raises(OnnxModelError, match="campplus.onnx"):
        SpeakerEmbedder(broken)
    with pytest.raises(OnnxModelError, match="missing.onnx: file not found"):
        SpeechTokenizer(tmp_path / "missing.onnx")
    renamed = tmp_path / "speech_tokenizer_v2.onnx"
    write_campplus_standin(renamed, input_name="feats_wrong")
    with pytest.raises(OnnxModelError, match="speech_tokenizer_v2.onnx.*'feats'"):
        SpeechTokenizer(renamed)


def test_prompt_features_are_aligned_two_frames_per_token(frontend):
    wav = _tone(22050, 3.3)
    features = frontend.prompt_features(wav, 22050)
    tokens, feat, emb = features.speech_token, features.speech_feat, features.embedding
    assert tokens.dtype == torch.int32 and feat.dtype == torch.float32 and emb.shape == (1, 192)
    n_mel = flow_mel(torch.zeros(int(24000 * 3.3))).shape[2]
    n_tokens = math.ceil(int(16000 * 3.3) // 160 / 4)
    assert tokens.shape == (1, min(n_mel // 2, n_tokens))
    assert feat.shape == (1, 2 * tokens.shape[1], 80)


def test_prompt_features_from_stereo_file_equal_mono_array(frontend, tmp_path):
    stereo = _tone(24000, 2.0, channels=2)
    path = tmp_path / "prompt.wav"
    soundfile.write(path, stereo, 24000, subtype="FLOAT")
    from_file = frontend.prompt_features(path)
    from_array = frontend.prompt_features(stereo[:, 0], 24000)
    assert torch.equal(from_file.speech_token, from_array.speech_token)
    assert torch.allclose(from_file.speech_feat, from_array.speech_feat)


def test_prompt_features_reject_bad_prompts(frontend):
    with pytest.raises(ValueError, match="at most 30 s"):
        frontend.prompt_features(np.zeros(16000 * 31, dtype=np.float32), 16000)
    with pytest.raises(ValueError, match="too short"):
        frontend.prompt_features(np.zeros(800, dtype=np.float32), 16000)
    with pytest.raises(ValueError, match="sample rate"):
        frontend.prompt_features(np.zeros(16000, dtype=np.float32), 0)
    with pytest.raises(ValueError, match="NaN"):
        frontend.prompt_features(np.full(16000, np.nan, dtype=np.float32), 16000)


def test_split_normalises_offline_and_packs_sentences(frontend):
    text: TextFrontend = frontend.text
    assert text.split("I have 23 apples.") == ["I have twenty three apples."]
    assert text.split("今天是2024年5月3日") == ["今天是二零二四年五月三日。"]
    long = " ".join(f"This is sentence number {i} of a long paragraph that goes on." for i in range(12))
    pieces = text.split(long)
    assert len(pieces) > 1 and all(len(text.encode(p)) <= 100 for p in pieces)
    assert text.split("keep 23 as is", text_frontend=False) == ["keep 23 as is"]
    assert text.normalize("用开心的语气说<|endofprompt|>") == "用开心的语气说<|endofprompt|>"


@pytest.mark.parametrize("bad", ["", "   \n\t", "...!?"])
def test_split_rejects_text_with_nothing_to_say(frontend, bad):
    with pytest.raises(ValueError, match="text"):
        frontend.text.split(bad)


def test_text_frontend_needs_a_tokenizer_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer_config.json"):
        TextFrontend(tmp_path)


def test_normalisation_needs_no_network(monkeypatch):
    import socket

    from studio.tts.frontend.text_normalize import TextNormalizer

    def no_network(*args, **kwargs):
        raise OSError("network is off in this test")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    normalizer = TextNormalizer()
    assert normalizer.normalize("I paid 42 dollars.") == ("I paid forty two dollars.", "en")
    assert normalizer.normalize("价格是25.5元") == ("价格是二十五点五元", "zh")


def test_a_text_is_normalised_once_then_served_from_the_cache(monkeypatch):
    from studio.tts.frontend.text_normalize import TextNormalizer

    normalizer = TextNormalizer()
    zh, en = normalizer._models()
    seen: list[str] = []
    normalize = en.normalize
    monkeypatch.setattr(en, "normalize", lambda text: seen.append(text) or normalize(text))
    first = normalizer.normalize("Take 3 of 12 dollars.")
    for _ in range(3):
        assert (
            normalizer.normalize("Take 3 of 12 dollars.") == first == ("Take three of twelve dollars.", "en")
        )
    assert normalizer.split("Take 3 of 12 dollars.", len) == ["Take three of twelve dollars."]
    assert seen == ["Take 3 of 12 dollars."]  # wetext ran once for four normalisations and a split
    normalizer.normalize("Another 7.")
    assert seen == ["Take 3 of 12 dollars.", "Another 7."]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("See reference [1] for details.", "See reference [1] for details."),
        ("[3db]", "[3db]"),
        ("I paid 42 dollars. See [2]. Then 3 more.", "I paid forty two dollars. See [2]. Then three more."),
    ],
)
def test_a_normaliser_failure_falls_back_to_the_sentence_as_written(text, expected, caplog):
    from studio.tts.frontend.text_normalize import TextNormalizer

    normalizer = TextNormalizer()
    with caplog.at_level("WARNING", logger="studio.tts.frontend.text_normalize"):
        assert normalizer.normalize(text) == (expected, "en")
        assert normalizer.split(text, len)
    assert "spoken as written" in caplog.text
