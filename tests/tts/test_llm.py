"""The PyTorch token backend's protocol: seeds, greedy decoding, stop ids, length bounds, cancellation."""

from __future__ import annotations

import threading

import pytest
import torch

from studio.tts.llm.model import Qwen2Encoder, Qwen2LM
from studio.tts.llm.sampling import RasSampling
from studio.tts.llm.torch_backend import TorchTokenBackend

SPEECH_TOKENS = 6561


@pytest.fixture(scope="module")
def lm() -> Qwen2LM:
    from transformers import Qwen2Config

    torch.manual_seed(0)
    config = Qwen2Config(
        hidden_size=64,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_hidden_layers=1,
        intermediate_size=128,
        vocab_size=300,
        max_position_embeddings=256,
    )
    return Qwen2LM(64, 64, SPEECH_TOKENS, Qwen2Encoder(config=config), RasSampling()).eval()


def _run(lm, *, seed, sampling=None, min_len=0, max_len=12, cancel=None, ignore_stop=False):
    embeds = lm.build_prompt_embeds([1, 2, 3], [4], [5, 6])[0]
    tokens = TorchTokenBackend(lm).generate(
        embeds,
        min_len=min_len,
        max_len=max_len,
        sampling=sampling or RasSampling(),
        seed=seed,
        cancel=cancel or threading.Event(),
        ignore_stop=ignore_stop,
    )
    return list(tokens)


def test_same_seed_same_tokens_and_other_seed_differs(lm):
    first = _run(lm, seed=3)
    assert len(first) == 12 and all(0 <= t < SPEECH_TOKENS for t in first)
    assert _run(lm, seed=3) == first
    assert _run(lm, seed=4) != first


def test_greedy_is_deterministic_and_picks_the_argmax(lm):
    greedy = RasSampling(top_k=1)
    tokens = _run(lm, seed=None, sampling=greedy, max_len=5)
    assert tokens == _run(lm, seed=None, sampling=greedy, max_len=5)
    session = TorchTokenBackend(lm).start(lm.build_prompt_embeds([1, 2, 3], [4], [5, 6])[0])
    assert tokens[0] == int(session.logp().argmax())


@pytest.fixture
def stop_favoured(lm):
    """Make the first stop id overwhelmingly likely, then restore the head."""
    saved = lm.llm_decoder.bias.detach().clone()
    with torch.no_grad():
        lm.llm_decoder.bias[SPEECH_TOKENS] += 50.0
    yield lm
    with torch.no_grad():
        lm.llm_decoder.bias.copy_(saved)


def test_stop_id_ends_decoding_only_after_min_len(stop_favoured):
    assert _run(stop_favoured, seed=1, min_len=0) == []
    assert len(_run(stop_favoured, seed=1, min_len=4)) == 4


def test_ignore_stop_gives_exactly_max_len_tokens(stop_favoured):
    tokens = _run(stop_favoured, seed=1, max_len=7, ignore_stop=True)
    assert len(tokens) == 7 and all(t < SPEECH_TOKENS for t in tokens)


def test_cancel_stops_generation(lm):
    cancel = threading.Event()
    embeds = lm.build_prompt_embeds([1, 2], [], [])[0]
    stream = TorchTokenBackend(lm).generate(
        embeds, min_len=0, max_len=50, sampling=RasSampling(), seed=0, cancel=cancel, ignore_stop=True
    )
    got = [next(stream), next(stream)]
    cancel.set()
    assert list(stream) == [] and len(got) == 2


def test_ras_sampling_rejects_bad_parameters_and_falls_back_on_repeats():
    with pytest.raises(ValueError, match="top_p"):
        RasSampling(top_p=0.0)
    with pytest.raises(ValueError, match="top_k"):
        RasSampling(top_k=0)
    logp = torch.full((10,), -30.0)
    logp[3] = 0.0  # the nucleus is {3}; any repeat of 3 in the window switches to full-distribution draws
    ras = RasSampling(top_p=0.8, top_k=25, win_size=10, tau_r=0.1)
    assert ras.sample(logp, [], torch.Generator().manual_seed(0)) == 3
    probs = torch.full((10,), 0.15 / 9)
    probs[3] = 0.85  # nucleus {3} alone; 15% of the mass elsewhere
    head_only = {ras.sample(probs.log(), [], torch.Generator().manual_seed(s)) for s in range(30)}
    after_repeat = {ras.sample(probs.log(), [3], torch.Generator().manual_seed(s)) for s in range(30)}
    assert head_only == {3} and len(after_repeat) > 1


def test_prompt_embeds_validate_inputs(lm):
    with pytest.raises(ValueError, match="speech tokens"):
        lm.build_prompt_embeds([1], [], [SPEECH_TOKENS])
    with pytest.raises(ValueError, match="prompt_embeds"):
        TorchTokenBackend(lm).start(torch.zeros(3, 7))
    assert lm.build_prompt_embeds([1, 2], [3], [4, 5, 6]).shape == (1, 1 + 3 + 1 + 3, 64)
