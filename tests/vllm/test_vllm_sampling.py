"""RAS as a vLLM logits processor: the distribution it hands vLLM equals upstream's RAS draw (no engine)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("vllm")

from vllm import SamplingParams  # noqa: E402
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality  # noqa: E402

from studio.tts.llm.sampling import RasSampling  # noqa: E402
from studio.tts.llm.vllm.sampling import (  # noqa: E402
    RasLogitsProcessor,
    host_uniforms,
    ras_extra_args,
    step_uniform,
)

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
    expected = processor_with([(0, ras_params(sampling), [1, 8, 0])]).mixture(logits)[1][0]
    assert 0.5 * (counts / 3000 - expected).abs().sum() < 0.05
    # the same seed and step draw the same token (in a fresh processor: this one recorded its draw)
    again = processor_with([(0, ras_params(sampling, seed=2999), [1, 8, 0])])
    assert (
        again.apply(logits.clone())[0].argmax()
        == processor_with([(0, ras_params(sampling, seed=2999), [1, 8, 0])]).apply(logits.clone())[0].argmax()
    )
    assert step_uniform(5, 0) != step_uniform(5, 1) != step_uniform(6, 1)


def test_vectorised_uniforms_are_the_scalar_ones_bit_for_bit():
    seeds = [0, 1, 5, 2**31 + 7, 2**62 + 3, 2**63 - 1, 2**64 - 1, 12345678901234567]
    steps = [0, 1, 2, 9, 10, 499, 4096]
    pairs = [(seed, step) for seed in seeds for step in steps]
    got = host_uniforms(
        np.array([seed for seed, _ in pairs], dtype=np.uint64), np.array([step for _, step in pairs])
    )
    assert got.tolist() == [step_uniform(seed, step) for seed, step in pairs]


def host_mixture(
    logits: torch.Tensor, decoded: list[int], sampling: RasSampling, min_len: int
) -> torch.Tensor:
    """The RAS mixture from the decoded list itself (what the processor computed on the host before)."""
    probs = torch.softmax(logits.float(), dim=-1)
    order = probs.argsort(descending=True)
    nucleus = torch.zeros_like(probs)
    mass = 0.0
    for rank, token in enumerate(order.tolist()):
        if rank >= sampling.top_k or (rank > 0 and mass >= sampling.top_p):
            break
        nucleus[token] = probs[token]
        mass += probs[token].item()
    nucleus /= nucleus.sum()
    window = decoded[-sampling.win_size :] if sampling.win_size else []
    repeated = torch.tensor(
        [window.count(t) >= sampling.win_size * sampling.tau_r for t in range(len(probs))]
    )
    mixture = nucleus * ~repeated + (nucleus * repeated).sum() * probs
    if len(decoded) < min_len:
        mixture[STOPS] = 0.0
    return mixture


@pytest.mark.parametrize("plain_rows", [0, 1], ids=["ras-rows-lead", "a-plain-row-first"])
def test_the_window_kept_on_the_device_follows_what_vllm_outputs(plain_rows):
    """Many steps as vLLM runs them: asynchronous placeholders in the output lists (the token reaches the
    host a step late), a draw thrown away while a row is still in prefill, a row that moves, and a
    preempted request that comes back. With RAS rows first they are read and written in place; behind a
    plain request's row, through gathers."""
    sampling = RasSampling(top_p=0.9, top_k=6, win_size=4, tau_r=0.5)
    generator = torch.Generator().manual_seed(3)
    a_listed, a_true, b_listed, b_true = [], [], [], []
    first = plain_rows  # the RAS rows start here
    processor = processor_with(
        [(i, SamplingParams(), []) for i in range(first)]
        + [(first, ras_params(sampling, min_len=6, seed=1), a_listed)]
    )
    small_vocab = torch.randn(1, 12, generator=generator)  # few tokens: repeats happen often

    def step(pairs: list[tuple[list[int], list[int]]], rows: list[int]) -> None:
        logits = small_vocab + 0.3 * torch.randn(rows[-1] + 1, 12, generator=generator)
        rows_seen, mixture = processor.mixture(logits.clone())
        assert rows_seen.tolist() == rows
        for i, (_listed, true) in enumerate(pairs):
            expected = host_mixture(logits[rows[i]], true, sampling, 6)
            torch.testing.assert_close(mixture[i], expected, rtol=1e-5, atol=1e-6)
        plain = logits[:first].clone()
        out = processor.apply(logits)
        assert torch.equal(out[:first], plain)
        for i, (listed, true) in enumerate(pairs):
            if listed and listed[-1] == -1:
                listed[-1] = true[-1]  # the last step's token reaches the host now
            listed.append(-1)
            true.append(int(out[rows[i]].argmax()))

    processor.apply(torch.randn(first + 1, 12, generator=generator))  # a chunked-prefill draw vLLM discards
    for _ in range(5):
        step([(a_listed, a_true)], [first])
    b_params = ras_params(sampling, min_len=6, seed=2)
    processor.update_state(
        BatchUpdate(batch_size=first + 2, removed=[], moved=[], added=[(first + 1, b_params, None, b_listed)])
    )
    for _ in range(6):
        step([(a_listed, a_true), (b_listed, b_true)], [first, first + 1])
    processor.update_state(  # a finishes; b moves to a's row
        BatchUpdate(
            batch_size=first + 1,
            removed=[first],
            added=[],
            moved=[(first + 1, first, MoveDirectionality.UNIDIRECTIONAL)],
        )
    )
    for _ in range(4):
        step([(b_listed, b_true)], [first])
    assert len(set(b_true)) < len(b_true)  # the window had repeats to act on
    # b is preempted and resumes with its tokens so far: the ring is rebuilt from vLLM's list
    processor.update_state(BatchUpdate(batch_size=first, removed=[first], added=[], moved=[]))
    b_listed[-1] = b_true[-1]
    processor.update_state(
        BatchUpdate(batch_size=first + 1, removed=[], moved=[], added=[(first, b_params, None, b_listed)])
    )
    for _ in range(3):
        step([(b_listed, b_true)], [first])


def test_the_input_batch_skips_the_token_sync_only_when_ras_is_the_only_custom_processor(monkeypatch):
    """vLLM waits for each step's tokens on the host when a custom processor might read them; ours reads
    only the lengths, so the plugin's wrapper turns that wait off, and keeps it for anybody else's."""
    import inspect

    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.worker.gpu_input_batch import InputBatch

    from studio.tts.llm.vllm.plugin import skip_output_token_sync

    assert "logitsprocs_need_output_token_ids" in inspect.signature(InputBatch.__init__).parameters
    seen: list[bool] = []

    def recording_init(
        self, *, logitsprocs=None, logitsprocs_need_output_token_ids=False, reasoning_config=None
    ):
        seen.append(logitsprocs_need_output_token_ids)

    monkeypatch.setattr(InputBatch, "__init__", recording_init)
    assert skip_output_token_sync() and skip_output_token_sync()  # idempotent: wrapped once

    class SomebodysProcessor(RasLogitsProcessor):
        pass

    SomebodysProcessor.__module__ = "their_plugin"
    ras = RasLogitsProcessor(None, torch.device("cpu"), False)
    InputBatch(logitsprocs=LogitsProcessors([ras]), logitsprocs_need_output_token_ids=True)
    InputBatch(
        logitsprocs=LogitsProcessors([ras, SomebodysProcessor(None, torch.device("cpu"), False)]),
        logitsprocs_need_output_token_ids=True,
    )
    InputBatch(
        logitsprocs=LogitsProcessors([ras]), logitsprocs_need_output_token_ids=True, reasoning_config=object()
    )
    assert seen == [False, True, True]


def _scenario_draws(processor: RasLogitsProcessor, vocab: int) -> list[list[int]]:
    """Requests join, run, repeat tokens (a small vocabulary), leave, move, stop leading the batch and outgrow
    its tables; the tokens each request got, as vLLM would have taken them (the argmax of the one-hot rows)."""
    sampling = RasSampling(top_p=0.9, top_k=6, win_size=4, tau_r=0.5)
    device = processor.device
    generator = torch.Generator().manual_seed(5)
    base = torch.randn(1, vocab, generator=generator)
    outputs: list[list[int]] = [[] for _ in range(12)]
    rows: dict[int, int] = {}  # row -> request

    def update(removed=(), added=(), moved=()):
        for row in removed:
            rows.pop(row)
        for row, request in added:
            rows[row] = request
        for a, b in moved:
            rows[b] = rows.pop(a)
        processor.update_state(
            BatchUpdate(
                batch_size=len(rows),
                removed=list(removed),
                moved=[(a, b, MoveDirectionality.UNIDIRECTIONAL) for a, b in moved],
                added=[
                    (row, ras_params(sampling, min_len=3, seed=10 + r), None, outputs[r]) for row, r in added
                ],
            )
        )

    def steps(count: int) -> None:
        for _ in range(count):
            width = max(rows) + 1
            logits = (base + 0.3 * torch.randn(width, vocab, generator=generator)).to(device)
            out = processor.apply(logits)
            for row, request in rows.items():
                outputs[request].append(int(out[row].argmax()))

    update(added=[(0, 0)])
    steps(6)
    update(added=[(1, 1), (2, 2)])
    steps(5)
    update(removed=[1])  # row 1 leaves a gap: the rows no longer lead (gathers, eager)
    steps(3)
    update(moved=[(2, 1)])  # leading again, two rows: the graph of that size replays
    steps(4)
    update(added=[(2, 3)])
    steps(5)
    update(added=[(row, row + 1) for row in range(3, 11)])  # 11 rows: the tables grow past 8 (new graphs)
    steps(4)
    return outputs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("vocab", [12, 6564])
def test_the_graphed_draw_gives_every_request_the_tokens_of_the_eager_one(vocab, monkeypatch):
    device = torch.device("cuda")
    graphed = RasLogitsProcessor(None, device, True)
    monkeypatch.setenv("STUDIO_RAS_GRAPHS", "0")
    eager = RasLogitsProcessor(None, device, True)
    assert graphed.graphs is not None and eager.graphs is None
    assert _scenario_draws(graphed, vocab) == _scenario_draws(eager, vocab)
    assert graphed.params.shape[0] > 8  # the tables grew, which drops the graphs and their pool
    assert 1 <= graphed.graphs.captures <= 4  # one graph per batch size seen leading, replayed after
