"""The prompt features cache: a repeated prompt skips the ONNX models and the mel, bad audio still raises."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch

import studio.tts.frontend.prompt as frontend_module
from studio.tts.cosyvoice2 import SynthesisSpec
from studio.tts.frontend.prompt import ENV_CACHE_ENTRIES, Frontend


@pytest.fixture(autouse=True)
def _default_bound(monkeypatch):
    """Frontends built here read the default bound, whatever the environment running the tests says."""
    monkeypatch.delenv(ENV_CACHE_ENTRIES, raising=False)


@pytest.fixture
def loaded(tiny_cosyvoice):
    """The tiny model's tokenizer and ONNX models; each test wraps them in a Frontend of its own."""
    return tiny_cosyvoice.model.frontend


def _frontend(loaded, **kwargs) -> Frontend:
    return Frontend(loaded.text, loaded.speaker_embedder, loaded.speech_tokenizer, **kwargs)


@pytest.fixture
def calls(loaded, monkeypatch):
    """Counts of real runs of the speech tokenizer, the speaker embedder and the flow mel (they still run)."""
    counts = {"tokenize": 0, "embed": 0, "flow_mel": 0}

    def counting(name, real):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(
        loaded.speech_tokenizer, "tokenize", counting("tokenize", loaded.speech_tokenizer.tokenize)
    )
    monkeypatch.setattr(loaded.speaker_embedder, "embed", counting("embed", loaded.speaker_embedder.embed))
    monkeypatch.setattr(frontend_module, "flow_mel", counting("flow_mel", frontend_module.flow_mel))
    return counts


def _assert_same(a, b) -> None:
    for name in ("speech_token", "speech_feat", "embedding"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_second_call_skips_the_models_and_returns_equal_features(loaded, calls, prompt_wav16k):
    frontend = _frontend(loaded)
    first = frontend.prompt_features(prompt_wav16k, 16000)
    assert calls == {"tokenize": 1, "embed": 1, "flow_mel": 1}
    second = frontend.prompt_features(prompt_wav16k.copy(), 16000)
    assert calls == {"tokenize": 1, "embed": 1, "flow_mel": 1}
    _assert_same(first, second)
    _assert_same(second, _frontend(loaded, max_cached_prompts=0).prompt_features(prompt_wav16k, 16000))
    assert frontend.prompt_cache_stats() == {"hits": 1, "misses": 1, "entries": 1, "max_entries": 32}


def test_a_path_and_the_same_samples_share_an_entry(loaded, calls, prompt_wav16k, tmp_path):
    path = tmp_path / "prompt.wav"
    soundfile.write(str(path), prompt_wav16k, 16000, subtype="FLOAT")
    frontend = _frontend(loaded)
    from_path = frontend.prompt_features(path)
    from_array = frontend.prompt_features(torch.from_numpy(prompt_wav16k).unsqueeze(0), 16000)
    _assert_same(from_path, from_array)
    assert calls["tokenize"] == 1
    assert frontend.prompt_cache_stats()["hits"] == 1


def test_a_one_sample_change_or_another_rate_misses(loaded, calls, prompt_wav16k):
    frontend = _frontend(loaded)
    frontend.prompt_features(prompt_wav16k, 16000)
    changed = prompt_wav16k.copy()
    changed[1000] += 1e-3
    frontend.prompt_features(changed, 16000)
    frontend.prompt_features(prompt_wav16k, 22050)
    assert calls["tokenize"] == 3
    assert frontend.prompt_cache_stats() == {"hits": 0, "misses": 3, "entries": 3, "max_entries": 32}


def test_least_recently_used_entry_is_evicted(loaded, calls, prompt_wav16k):
    frontend = _frontend(loaded, max_cached_prompts=2)
    a, b, c = prompt_wav16k, prompt_wav16k * 0.5, prompt_wav16k * 0.25
    for wav in (a, b, a, c):  # c evicts b, the least recently used
        frontend.prompt_features(wav, 16000)
    assert calls["tokenize"] == 3
    frontend.prompt_features(a, 16000)
    assert calls["tokenize"] == 3
    frontend.prompt_features(b, 16000)
    assert calls["tokenize"] == 4
    assert frontend.prompt_cache_stats()["entries"] == 2


def test_env_var_sets_the_bound_and_zero_disables(loaded, calls, prompt_wav16k, monkeypatch):
    monkeypatch.setenv(ENV_CACHE_ENTRIES, "0")
    frontend = _frontend(loaded)
    frontend.prompt_features(prompt_wav16k, 16000)
    frontend.prompt_features(prompt_wav16k, 16000)
    assert calls["tokenize"] == 2
    assert frontend.prompt_cache_stats() == {"hits": 0, "misses": 0, "entries": 0, "max_entries": 0}
    monkeypatch.setenv(ENV_CACHE_ENTRIES, "5")
    assert _frontend(loaded).max_cached_prompts == 5


@pytest.mark.parametrize("value", ["lots", "1.5", "-1"])
def test_env_var_parse_errors_name_the_variable(loaded, monkeypatch, value):
    monkeypatch.setenv(ENV_CACHE_ENTRIES, value)
    with pytest.raises(ValueError, match=ENV_CACHE_ENTRIES):
        _frontend(loaded)


def test_bad_audio_raises_every_time_and_is_never_cached(loaded, prompt_wav16k):
    frontend = _frontend(loaded)
    nan = prompt_wav16k.copy()
    nan[5] = np.nan
    bad = [
        (nan, 16000, "NaN"),
        (np.zeros(16000 * 31, dtype=np.float32), 16000, "at most"),
        (prompt_wav16k[:800], 16000, "too short"),
    ]
    for _ in range(2):
        for wav, sr, message in bad:
            with pytest.raises(ValueError, match=message):
                frontend.prompt_features(wav, sr)
    assert frontend.prompt_cache_stats()["entries"] == 0


def test_entries_are_ordinary_tensors_even_when_computed_in_inference_mode(loaded, prompt_wav16k):
    frontend = _frontend(loaded)
    with torch.inference_mode():
        frontend.prompt_features(prompt_wav16k, 16000)
    features = frontend.prompt_features(prompt_wav16k, 16000)
    assert not any(
        t.is_inference() for t in (features.speech_token, features.speech_feat, features.embedding)
    )


def test_synthesis_leaves_the_cached_features_untouched(tiny_cosyvoice, loaded, prompt_wav16k, monkeypatch):
    """Takes share the cached tensors: synthesis must only read them."""
    frontend = _frontend(loaded)
    monkeypatch.setattr(tiny_cosyvoice.model, "frontend", frontend)
    cached = frontend.prompt_features(prompt_wav16k, 16000)
    before = [t.clone() for t in (cached.speech_token, cached.speech_feat, cached.embedding)]
    for stream in (False, True):
        spec = SynthesisSpec(
            text="Hello.",
            mode="zero_shot",
            prompt_wav=prompt_wav16k,
            prompt_text="A prompt.",
            stream=stream,
            seed=1,
            exact_speech_tokens=30,
        )
        list(tiny_cosyvoice.synthesize(spec))
    assert frontend.prompt_cache_stats()["hits"] == 2  # both takes used the entry
    for old, new in zip(before, (cached.speech_token, cached.speech_feat, cached.embedding), strict=True):
        assert torch.equal(old, new)
