"""RAS as a vLLM logits processor: the distribution it hands vLLM equals upstream's RAS draw (no engine)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")

from vllm import SamplingParams  # noqa: E402
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality  # noqa: E402

from studio.tts.llm.sampling import RasSampling  # noqa: E402
from studio.tts.llm.vllm.sampling import RasLogitsProcessor, ras_extra_args, step_uniform  # noqa: E402

STOPS = [9, 10, 11]


def ras_params(sampling: RasSampling, min_len: int = 0, seed: int = 0) -> SamplingParams:
    extra = ras_extra_args(
        seed=seed,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        win_size=sampling.win_size,
        tau_r=sampling.tau_r,
        min_len=min_len,
        stop_token_ids=STOPS,
    )
    return SamplingParams(extra_args=extra)


def processor_with(requests: list[tuple[int, SamplingParams | None, list[int]]]) -> RasLogitsProcessor:
    processor = RasLogitsProcessor(None, torch.device("cpu"), False)
    processor.update_state(
        BatchUpdate(
            batch_size=len(requests),
            removed=[],
            moved=[],
            added=[(i, p, None, out) for i, p, out in requests],
        )
    )
    return processor


def test_mixture_matches_upstream_ras_draws():
    """Monte Carlo of RasSampling.sample (the PyTorch path) against the processor's probabilities."""
    logits = torch.tensor([3.0, 2.6, 2.2, 1.5, 1.0, 0.5, 0.2, -0.3, -1.0, -2.0, -2.5, -3.0])
    sampling = RasSampling(top_p=0.8, top_k=4, win_size=4, tau_r=0.25)
    decoded = [7, 0, 5, 1]  # tokens 0 and 1 (both in the nucleus) were just used: a redraw when drawn
    processor = processor_with([(0, ras_params(sampling), list(decoded))])
    expected = processor.mixture(logits.unsqueeze(0))[1][0]

    generator = torch.Generator().manual_seed(0)
    logp = logits.log_softmax(dim=-1)
    draws = 20000
    counts = torch.zeros_like(logits)
    for _ in range(draws):
        counts[sampling.sample(logp, decoded, generator)] += 1
    total_variation = 0.5 * (counts / draws - expected).abs().sum().item()
    assert total_variation < 0.03, (counts / draws, expected)
    # and it is not plain top-k/top-p: tokens outside the nucleus keep mass through the redraw
    assert expected[6:].sum() > 0.01


def test_stop_ids_masked_until_min_len_and_other_rows_untouched():
    sampling = RasSampling()
    processor = processor_with(
        [
            (0, ras_params(sampling, min_len=5), [1, 2]),
            (1, SamplingParams(), []),
            (2, ras_params(sampling, min_len=2), [1, 2, 3]),
        ]
    )
    logits = torch.randn(3, 12, generator=torch.Generator().manual_seed(1))
    plain_row = logits[1].clone()
    rows, mixture = processor.mixture(logits)
    assert rows.tolist() == [0, 2]
    assert (mixture[0, STOPS] == 0).all() and (mixture[1, STOPS] > 0).all()
    out = processor.apply(logits)
    assert torch.equal(out[1], plain_row)
    for row in (0, 2):  # one-hot on the draw, so vLLM's greedy step takes it
        assert (
            torch.isfinite(out[row]).sum() == 1 and mixture[rows.tolist().index(row), out[row].argmax()] > 0
        )


def test_batch_moves_and_swaps_carry_request_state():
    a, b = RasSampling(top_k=2), RasSampling(top_k=3)
    processor = processor_with([(0, ras_params(a), [1]), (1, ras_params(b), [2])])
    processor.update_state(
        BatchUpdate(batch_size=2, removed=[], added=[], moved=[(0, 1, MoveDirectionality.SWAP)])
    )
    assert processor.requests[0].top_k == 3 and processor.requests[1].top_k == 2
    processor.update_state(
        BatchUpdate(batch_size=1, removed=[0], added=[], moved=[(1, 0, MoveDirectionality.UNIDIRECTIONAL)])
    )
    assert list(processor.requests) == [0] and processor.requests[0].top_k == 2
    # request a (top_k=2, window [1]): nucleus {0, 1}; token 1 repeats, so its mass is redrawn over p
    logits = torch.linspace(2.0, -2.0, 12).unsqueeze(0)
    probs = processor.mixture(logits)[1][0]
    p = torch.softmax(logits[0], dim=-1)
    nucleus = p[:2] / p[:2].sum()
    expected = nucleus[1] * p
    expected[0] += nucleus[0]
    torch.testing.assert_close(probs, expected)


def test_draws_follow_the_mixture_and_repeat_per_seed_and_step():
    logits = torch.tensor([[2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -3.0, -3.0]])
    sampling = RasSampling(top_p=0.9, top_k=5, win_size=3, tau_r=0.3)
    counts = torch.zeros(12)
    for seed in range(3000):
        processor = processor_with([(0, ras_params(sampling, seed=seed), [1, 8, 0])])
        counts[processor.apply(logits.clone())[0].argmax()] += 1
    expected = processor.mixture(logits)[1][0]
    assert 0.5 * (counts / 3000 - expected).abs().sum() < 0.05
    again = processor_with([(0, ras_params(sampling, seed=2999), [1, 8, 0])])
    assert again.apply(logits.clone())[0].argmax() == processor.apply(logits.clone())[0].argmax()
    assert step_uniform(5, 0) != step_uniform(5, 1) != step_uniform(6, 1)
