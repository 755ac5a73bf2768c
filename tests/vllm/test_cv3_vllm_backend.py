"""CosyVoice3's LM on a real vLLM engine (vLLM's stock Qwen2ForCausalLM): greedy parity with PyTorch, the 200
stop ids, min_len, RAS, and the studio's process serving the stock class without an inspection subprocess."""

from __future__ import annotations

import threading

import pytest
from random_lm import COSYVOICE3_STOP, cosyvoice3_prompt

from studio.tts.llm.sampling import RasSampling
from studio.tts.llm.torch_backend import TorchTokenBackend

pytestmark = pytest.mark.vllm
GREEDY = RasSampling(top_k=1)


def take(backend, prompt, **kwargs):
    options = dict(min_len=0, max_len=40, sampling=GREEDY, seed=0, cancel=threading.Event())
    return list(backend.generate(prompt, **{**options, **kwargs}))


def test_the_engine_runs_vllms_stock_qwen2_class(cosyvoice3_vllm):
    _, backend = cosyvoice3_vllm
    assert backend._engine.model_config.architecture == "Qwen2ForCausalLM"
    assert backend.stop_token_ids == list(range(6561, 6761)) and backend.speech_vocab == 6561


def test_greedy_tokens_equal_the_pytorch_path_for_the_same_prompt_embeddings(cosyvoice3_vllm):
    lm, backend = cosyvoice3_vllm
    reference = TorchTokenBackend(lm)
    prompts = [cosyvoice3_prompt(lm, ids) for ids in ([7, 8, 9], [40, 2, 40, 2, 5], [100])]
    expected = [take(reference, p, ignore_stop=True) for p in prompts]
    assert [take(backend, p, ignore_stop=True) for p in prompts] == expected
    assert all(len(tokens) == 40 and max(tokens) < 6561 for tokens in expected)
    assert len({tuple(tokens) for tokens in expected}) == 3  # the prompts really differ


def test_the_last_special_id_ends_the_take_and_min_len_masks_it(cosyvoice3_vllm):
    lm, backend = cosyvoice3_vllm
    reference = TorchTokenBackend(lm)
    prompt = cosyvoice3_prompt(lm, [10, 20, 30])  # the prompt the fixture put COSYVOICE3_STOP on
    free = take(reference, prompt, ignore_stop=True)
    stopped = take(backend, prompt)
    assert stopped == take(reference, prompt)
    assert len(stopped) <= 6 and stopped == free[: len(stopped)]  # ended by the one special id it can pick
    session = reference.start(prompt)
    for token in stopped:
        session.logp()
        session.feed(token)
    assert int(session.logp().argmax()) == COSYVOICE3_STOP  # the id vLLM stopped on: the last of the 200

    min_len = len(stopped) + 3
    longer = take(backend, prompt, min_len=min_len)
    assert longer == take(reference, prompt, min_len=min_len)
    assert len(longer) >= min_len and longer == free[: len(longer)]


def test_ras_is_seeded_per_request_and_never_yields_a_special_id_before_min_len(cosyvoice3_vllm):
    lm, backend = cosyvoice3_vllm
    prompt = cosyvoice3_prompt(lm, [7, 8, 9])
    ras = dict(sampling=RasSampling(), max_len=30)
    first, again = (
        take(backend, prompt, seed=5, min_len=30, **ras),
        take(backend, prompt, seed=5, min_len=30, **ras),
    )
    assert first == again and len(first) == 30 and max(first) < 6561
    assert take(backend, prompt, seed=6, min_len=30, **ras) != first
