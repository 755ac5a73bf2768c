"""CosyVoice3's text tokenizer (its special tokens, in upstream's order) and its speech tokenizer file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from studio.tts.fabricate.tokenizer import QWEN_SPECIAL_TOKENS, write_tokenizer_folder
from studio.tts.frontend.special_tokens import (
    COSYVOICE2_SPECIAL_TOKENS,
    COSYVOICE3_SPECIAL_TOKENS,
    special_tokens_for,
)
from studio.tts.frontend.text import TextFrontend
from studio.tts.loader import load_frontend


@pytest.fixture(scope="module")
def blanken(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model") / "CosyVoice-BlankEN"
    write_tokenizer_folder(folder, vocab_size=600, special_tokens=COSYVOICE3_SPECIAL_TOKENS)
    return folder


@pytest.fixture(scope="module")
def cosyvoice3_text(blanken):
    return TextFrontend(blanken, special_tokens=COSYVOICE3_SPECIAL_TOKENS)


def test_endofprompt_and_breath_are_one_id_each_and_every_special_token_is_distinct(cosyvoice3_text):
    assert len(cosyvoice3_text.encode("<|endofprompt|>")) == 1
    assert len(cosyvoice3_text.encode("[breath]")) == 1
    ids = [cosyvoice3_text.encode(token) for token in COSYVOICE3_SPECIAL_TOKENS]
    assert all(len(i) == 1 for i in ids) and len({i[0] for i in ids}) == len(COSYVOICE3_SPECIAL_TOKENS)
    text = "You are a helpful assistant.<|endofprompt|>[breath]Hello [AA1] [ǐng] there."
    encoded = cosyvoice3_text.encode(text)
    for token in ("<|endofprompt|>", "[breath]", "[AA1]", "[ǐng]"):
        assert encoded.count(cosyvoice3_text.token_id(token)) == 1, token


def test_endofprompt_takes_the_id_after_qwens_own_specials_in_both_families(blanken, cosyvoice3_text):
    """With the official vocabulary that id is 151646, the one upstream's LM looks for."""
    cosyvoice2_text = TextFrontend(blanken, special_tokens=COSYVOICE2_SPECIAL_TOKENS)
    first_added = cosyvoice2_text.token_id("<|endoftext|>") + len(QWEN_SPECIAL_TOKENS)
    assert cosyvoice2_text.token_id("<|endofprompt|>") == first_added
    assert cosyvoice3_text.token_id("<|endofprompt|>") == first_added
    assert cosyvoice3_text.token_id("<|endofsystem|>") == first_added + len(COSYVOICE2_SPECIAL_TOKENS) - 2
    assert len(cosyvoice3_text) == len(cosyvoice2_text) + len(COSYVOICE3_SPECIAL_TOKENS) - len(
        COSYVOICE2_SPECIAL_TOKENS
    )
    with pytest.raises(KeyError, match="endofsystem"):
        cosyvoice2_text.token_id("<|endofsystem|>")
    assert len(cosyvoice2_text.encode("[AA1]")) > 1  # only CosyVoice3's tokenizer knows the phones


def test_the_cosyvoice3_list_extends_cosyvoice2s_which_is_unchanged():
    assert COSYVOICE3_SPECIAL_TOKENS[: len(COSYVOICE2_SPECIAL_TOKENS)] == COSYVOICE2_SPECIAL_TOKENS
    assert len(COSYVOICE2_SPECIAL_TOKENS) == 19 and len(COSYVOICE3_SPECIAL_TOKENS) == 280
    assert len(set(COSYVOICE3_SPECIAL_TOKENS)) == len(COSYVOICE3_SPECIAL_TOKENS)
    assert special_tokens_for("cosyvoice3") is COSYVOICE3_SPECIAL_TOKENS
    with pytest.raises(ValueError, match="unknown tokenizer version 'cosyvoice1'"):
        special_tokens_for("cosyvoice1")


def test_the_frontend_of_a_cosyvoice3_folder_uses_its_tokenizer_and_speech_tokenizer(tiny_cosyvoice3_dir):
    frontend = load_frontend(tiny_cosyvoice3_dir, torch.device("cpu"))
    assert frontend.speech_tokenizer.path.name == "speech_tokenizer_v3.onnx"
    assert frontend.text.special_tokens == COSYVOICE3_SPECIAL_TOKENS
    assert len(frontend.text.encode("[breath]")) == 1
    t = np.arange(24000 * 2) / 24000
    wav = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    features = frontend.prompt_features(wav, 24000)
    tokens = features.speech_token.shape[1]
    assert tokens > 0 and features.speech_feat.shape == (1, 2 * tokens, 80)
    assert features.embedding.shape == (1, 192)


def test_the_speech_tokenizer_feeds_its_inputs_by_position_whatever_their_names(tmp_path):
    """Upstream feeds the v2 and v3 files alike, by input position; the names need not be v2's."""
    import onnx

    from studio.tts.fabricate.onnx_files import write_speech_tokenizer
    from studio.tts.frontend.onnx_models import SpeechTokenizer

    named = write_speech_tokenizer(tmp_path / "speech_tokenizer_v3.onnx", np.random.default_rng(0))
    model = onnx.load(str(named))
    renames = {"feats": "mel", "feats_length": "mel_length", "indices": "tokens"}
    for value in (*model.graph.input, *model.graph.output):
        value.name = renames[value.name]
    for node in model.graph.node:
        node.input[:] = [renames.get(name, name) for name in node.input]
        node.output[:] = [renames.get(name, name) for name in node.output]
    renamed = tmp_path / "renamed.onnx"
    onnx.save(model, str(renamed))
    log_mel = torch.randn(128, 40, generator=torch.Generator().manual_seed(0))
    expected = SpeechTokenizer(named).run(log_mel)
    assert expected.shape == (1, 10)
    assert torch.equal(SpeechTokenizer(renamed).run(log_mel), expected)


def test_the_prompt_mel_reaches_the_nyquist_frequency_as_cosyvoice3_yaml_says(
    tiny_cosyvoice3_dir, tiny_model_dir
):
    """cosyvoice3.yaml's feat_extractor has fmax null (CosyVoice2's: 8000): the flow's prompt mel differs."""
    from studio.tts.frontend.features import flow_mel

    cv3 = load_frontend(tiny_cosyvoice3_dir, torch.device("cpu"))
    cv2 = load_frontend(tiny_model_dir, torch.device("cpu"))
    assert (cv3.flow_mel_fmax, cv2.flow_mel_fmax) == (None, 8000.0)
    t = np.arange(24000) / 24000
    wav = (0.3 * np.sin(2 * np.pi * 220 * t) + 0.1 * np.sin(2 * np.pi * 9000 * t)).astype(np.float32)
    feat = cv3.prompt_features(wav, 24000).speech_feat
    expected = flow_mel(torch.from_numpy(wav), None)[0].transpose(0, 1)
    torch.testing.assert_close(feat.reshape(expected.shape), expected)
    assert not torch.allclose(expected, flow_mel(torch.from_numpy(wav), 8000)[0].transpose(0, 1))
