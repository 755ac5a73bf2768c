"""Synthesis on the tiny model: the three modes, lengths, seeds, speed, saved voices and request errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from studio.tts.cosyvoice2 import SynthesisSpec
from studio.tts.errors import SynthesisError

SAMPLES_PER_TOKEN = 960  # 2 mel frames per speech token, 480 samples per frame at 24 kHz


def _run(model, **kwargs) -> tuple[list[dict], torch.Tensor]:
    outputs = list(model.synthesize(SynthesisSpec(**kwargs)))
    return outputs, torch.cat([o["tts_speech"] for o in outputs], dim=1)


def _check_audio(speech: torch.Tensor) -> None:
    assert speech.dtype == torch.float32 and speech.dim() == 2 and speech.shape[0] == 1
    assert torch.isfinite(speech).all()
    assert speech.abs().max() <= 0.99 + 1e-6
    assert speech.abs().max() > 0  # not silence


@pytest.mark.parametrize("mode", ["zero_shot", "cross_lingual", "instruct2"])
def test_each_mode_gives_24khz_float32_of_a_plausible_length(tiny_cosyvoice, prompt_wav16k, mode):
    model = tiny_cosyvoice
    text = "Hi there."
    outputs, speech = _run(
        model,
        text=text,
        mode=mode,
        prompt_wav=prompt_wav16k,
        prompt_sr=16000,
        prompt_text="A short prompt.",
        instruct_text="Speak slowly.",
        seed=3,
    )
    assert model.sample_rate == 24000
    _check_audio(speech)
    tokens = outputs[-1]["speech_tokens"]
    text_tokens = len(model.model.frontend.text.encode(model.model.frontend.text.split(text)[0]))
    assert 2 * text_tokens <= tokens <= 20 * text_tokens  # upstream's length bounds
    assert speech.shape[1] == tokens * SAMPLES_PER_TOKEN
    assert set(outputs[-1]["timings"]) == {"llm", "flow", "hift"}


def test_upstream_entry_points_accept_a_16k_tensor(tiny_cosyvoice, prompt_wav16k):
    prompt = torch.from_numpy(prompt_wav16k).unsqueeze(0)  # upstream's prompt_speech_16k
    out = list(tiny_cosyvoice.inference_cross_lingual("Okay.", prompt, stream=False, exact_speech_tokens=20))
    assert len(out) == 1 and out[0]["tts_speech"].shape == (1, 20 * SAMPLES_PER_TOKEN)


def test_seed_makes_requests_reproducible(tiny_cosyvoice, prompt_wav16k):
    common = dict(text="Hello.", mode="cross_lingual", prompt_wav=prompt_wav16k, exact_speech_tokens=30)
    _, first = _run(tiny_cosyvoice, seed=11, **common)
    _, again = _run(tiny_cosyvoice, seed=11, **common)
    _, other = _run(tiny_cosyvoice, seed=12, **common)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


def test_exact_speech_tokens_and_speed(tiny_cosyvoice, prompt_wav16k):
    common = dict(
        text="Hello.", mode="cross_lingual", prompt_wav=prompt_wav16k, seed=5, exact_speech_tokens=40
    )
    outputs, normal = _run(tiny_cosyvoice, **common)
    assert outputs[-1]["speech_tokens"] == 40 and normal.shape[1] == 40 * SAMPLES_PER_TOKEN
    _, fast = _run(tiny_cosyvoice, speed=2.0, **common)
    assert fast.shape[1] == 40 * SAMPLES_PER_TOKEN // 2


def test_text_is_split_into_sentences_with_a_yield_each(tiny_cosyvoice, prompt_wav16k):
    text = "The quick brown fox jumps over the lazy dog near the river bank today. " * 6
    pieces = tiny_cosyvoice.model.frontend.text.split(text)
    assert len(pieces) == 2  # long text is cut into pieces of at most ~80 tokens
    outputs, speech = _run(
        tiny_cosyvoice,
        text=text,
        mode="cross_lingual",
        prompt_wav=prompt_wav16k,
        seed=1,
        exact_speech_tokens=12,
    )
    assert len(outputs) == 2
    assert [o["speech_tokens"] for o in outputs] == [12, 24]
    assert speech.shape[1] == 24 * SAMPLES_PER_TOKEN


def test_saved_voice_never_replaces_the_instruction(tiny_cosyvoice, prompt_wav16k, monkeypatch, tmp_path):
    model = tiny_cosyvoice
    monkeypatch.setattr(model, "spk2info", dict(model.spk2info))  # keep the shared model clean
    monkeypatch.setattr(model, "voices_file", tmp_path / "voices" / "spk2info.pt")
    assert model.add_zero_shot_spk("The transcript of my voice.", prompt_wav16k, "me")
    seen = []
    original = model.backend.generate

    def spy(prompt_embeds, **kwargs):
        seen.append(prompt_embeds)
        return original(prompt_embeds, **kwargs)

    monkeypatch.setattr(model.backend, "generate", spy)
    list(
        model.inference_instruct2(
            "Hello.", "Speak happily.", None, zero_shot_spk_id="me", exact_speech_tokens=5
        )
    )
    frontend, llm = model.model.frontend.text, model.model.llm
    text_ids = frontend.encode(frontend.split("Hello.")[0])
    expected = llm.build_prompt_embeds(text_ids, frontend.encode("Speak happily.<|endofprompt|>"))[0]
    assert torch.equal(seen[0], expected)
    # zero-shot with the saved voice uses its transcript and speech tokens
    list(model.inference_zero_shot("Hello.", "", None, zero_shot_spk_id="me", exact_speech_tokens=5))
    voice = model.spk2info["me"]
    expected = llm.build_prompt_embeds(
        text_ids, voice["prompt_text"].reshape(-1), voice["llm_prompt_speech_token"].reshape(-1)
    )[0]
    assert torch.equal(seen[1], expected)
    saved = model.save_spkinfo()
    assert saved == tmp_path / "voices" / "spk2info.pt"
    reloaded = torch.load(saved, weights_only=True)
    assert torch.equal(reloaded["me"]["flow_prompt_speech_token"], voice["flow_prompt_speech_token"])


def test_voices_dir_follows_studio_data_dir(monkeypatch, tmp_path, tiny_model_dir):
    from studio.tts.cosyvoice2 import voices_dir

    monkeypatch.setenv("STUDIO_DATA_DIR", str(tmp_path))
    folder = voices_dir(tiny_model_dir)
    assert folder.parent == tmp_path / "voices" and folder.name.startswith(tiny_model_dir.name)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(mode="sing"), "unknown mode"),
        (dict(text="   "), "empty"),
        (dict(prompt_wav=None), "prompt recording"),
        (dict(mode="zero_shot", prompt_text=""), "transcript"),
        (dict(mode="instruct2", instruct_text=""), "instruction"),
        (dict(spk_id="nobody", prompt_wav=None), "unknown saved voice"),
        (dict(speed=10.0), "speed"),
        (dict(prompt_wav=np.zeros(16000 * 31, np.float32)), "30 s"),
        (dict(prompt_wav="/no/such/file.wav"), "not found"),
    ],
)
def test_bad_requests_raise_clear_errors_before_any_work(tiny_cosyvoice, prompt_wav16k, kwargs, message):
    spec = dict(text="Hello.", mode="cross_lingual", prompt_wav=prompt_wav16k, prompt_sr=16000)
    spec.update(kwargs)
    with pytest.raises(SynthesisError, match=message):
        tiny_cosyvoice.synthesize(SynthesisSpec(**spec))


def test_vllm_request_gives_a_clear_error_when_unavailable(tiny_model_dir, monkeypatch):
    import sys

    from studio.tts.cosyvoice2 import CosyVoice2
    from studio.tts.errors import BackendUnavailableError

    monkeypatch.setitem(sys.modules, "studio.tts.llm.vllm.backend", None)  # as if the module were absent
    with pytest.raises(BackendUnavailableError, match="vLLM backend not available"):
        CosyVoice2(tiny_model_dir, load_vllm=True)


def test_load_jit_and_load_trt_warn_and_run_the_pytorch_modules(tiny_model_dir, caplog):
    import logging

    from studio.tts.cosyvoice2 import CosyVoice2

    with caplog.at_level(logging.WARNING, logger="studio.tts.cosyvoice2"):
        model = CosyVoice2(tiny_model_dir, load_jit=True, load_trt=True)
    assert model.backend_name == "pytorch"
    assert "load_jit/load_trt are not supported" in caplog.text
