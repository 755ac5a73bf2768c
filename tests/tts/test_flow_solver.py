"""The batched estimator solve: chunks of concurrent takes solved together equal each take solved alone.

`EstimatorSolver.paused()` holds the solver while several takes queue a chunk each, so they run as one
batch; `buckets=True` pads batch, frames and context as the CUDA-graph path does on a GPU.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from studio.tts.flow.cfm import NOISE_FRAMES
from studio.tts.flow.streaming.batched_solve import EstimatorState
from studio.tts.flow.streaming.incremental import IncrementalFlow
from studio.tts.flow.streaming.solver import EstimatorSolver, SolveRequest
from tests.tts.concurrency import queue_while_paused
from tests.tts.test_incremental_flow import (  # noqa: F401
    modules,
    prompt,
    relative_error,
    small_flow,
    speech_tokens,
)

# three takes with different prompt lengths and texts, driven with the same hop schedule
TAKES = [(7, 90, 1), (25, 83, 2), (13, 70, 3)]


def schedule(flow, prompt_tokens: int, n_tokens: int) -> list[tuple[int, bool]]:
    """(token count, finalize) per call, as Token2WavStream asks for them (hop 25, 3 lookahead)."""
    pad = -prompt_tokens % 25
    calls, offset = [], 0
    while offset + 25 + (pad if offset == 0 else 0) + flow.pre_lookahead_len <= n_tokens:
        offset += 25 + (pad if offset == 0 else 0)
        calls.append((offset + flow.pre_lookahead_len, False))
    return calls + [(n_tokens, True)]


def drive_solo(flow, takes=TAKES) -> list[list[torch.Tensor]]:
    mels = []
    for prompt_tokens, n_tokens, seed in takes:
        incremental, tokens = (
            IncrementalFlow(flow, **prompt(prompt_tokens, seed)),
            speech_tokens(n_tokens, seed),
        )
        mels.append(
            [
                incremental.mel(tokens[:end], final)[0]
                for end, final in schedule(flow, prompt_tokens, n_tokens)
            ]
        )
    return mels


@contextmanager
def installed(flow, solver: EstimatorSolver):
    """`solver` as the flow's own (the one `solver_for` returns) for the block."""
    flow.decoder._solver = solver
    try:
        yield solver
    finally:
        flow.decoder._solver = None


def drive_batched(flow, solver: EstimatorSolver, specs=TAKES) -> list[list[torch.Tensor]]:
    """Each round, every take still running queues one chunk while the solver is paused: one batch."""
    takes = [
        (IncrementalFlow(flow, **prompt(p, seed)), speech_tokens(n, seed), schedule(flow, p, n))
        for p, n, seed in specs
    ]
    mels: list[list[torch.Tensor]] = [[] for _ in takes]
    for round_ in range(max(len(calls) for _, _, calls in takes)):
        running = [i for i, (_, _, calls) in enumerate(takes) if round_ < len(calls)]

        def work(i: int, round_: int = round_) -> None:
            incremental, tokens, calls = takes[i]
            end, final = calls[round_]
            mels[i].append(incremental.mel(tokens[:end], final)[0])

        errors = queue_while_paused(solver, [lambda i=i: work(i) for i in running])
        assert not errors, errors
    return mels


@pytest.mark.parametrize("buckets", [False, True])
def test_takes_solved_in_one_batch_equal_takes_solved_alone(modules, buckets):  # noqa: F811
    flow, _ = modules
    solo = drive_solo(flow)
    solver = EstimatorSolver(flow.decoder, graphs=False)
    solver.buckets = buckets
    with installed(flow, solver):
        batched = drive_batched(flow, solver)
    assert solver.requests == sum(len(m) for m in solo)
    assert solver.batches < solver.requests  # rounds with several takes really ran as one batch
    for take_solo, take_batched in zip(solo, batched, strict=True):
        assert len(take_solo) == len(take_batched) >= 2
        for ours, theirs in zip(take_batched, take_solo, strict=True):
            assert ours.shape == theirs.shape
            assert relative_error(ours, theirs) < 1e-5


def test_half_weights_batch_as_they_run_alone_with_their_conv_tails_kept_in_half():
    """The fp16 flow's arena keeps the conv tails in float16 (no cast per convolution); padded batches of
    half takes still equal each take alone."""
    flow = small_flow().half()
    with torch.inference_mode():
        solo = drive_solo(flow)
        solver = EstimatorSolver(flow.decoder, graphs=False)
        solver.buckets = True
        with installed(flow, solver):
            batched = drive_batched(flow, solver)
    assert solver._arena.tails.dtype == torch.float16
    assert solver.batches < solver.requests
    for take_solo, take_batched in zip(solo, batched, strict=True):
        for ours, theirs in zip(take_batched, take_solo, strict=True):
            assert ours.dtype == torch.float16 and relative_error(ours.float(), theirs.float()) < 1e-2


def test_a_growing_arena_lets_go_of_the_old_one_before_making_the_larger(modules):  # noqa: F811
    """Growing the shared arena must not hold both at once. On the H200, 32 streams peaked at 98 GiB (68 the
    stop before) in a round where the arena grew from 56 to 64 CFG rows, ~33 and ~38 GB."""
    import weakref

    flow, _ = modules
    solver = EstimatorSolver(flow.decoder, graphs=False)
    allocate, old_alive = solver._allocate, []

    def watched(batch, rows, cap, device):
        if solver._arena_ref is not None:
            old_alive.append(solver._arena_ref() is not None)
        arena = allocate(batch, rows, cap, device)
        solver._arena_ref = weakref.ref(arena.kv)
        return arena

    solver._arena_ref, solver._allocate = None, watched
    with installed(flow, solver):
        drive_solo(flow)  # an arena for one take
        drive_batched(flow, solver)  # grown for three
    assert old_alive and not any(old_alive)  # grown, each time after the old arena was gone


def test_graph_replays_of_batches_equal_takes_solved_alone(modules, monkeypatch):  # noqa: F811
    """The solver's graph path (`ShapeGraphs` over the shared arena's view), with a stand-in capture whose
    replay re-runs the captured function on its static inputs: shapes eager first, then captured (also while
    idle) and replayed, equal to each take alone."""
    from studio.tts.device.cuda_graphs import capture_one_pending
    from studio.tts.flow.streaming import incremental
    from tests.tts.test_encoder_graphs import replaying_capture, untouched_capture

    flow, _ = modules
    solo = drive_solo(flow)
    solver = EstimatorSolver(flow.decoder, graphs=True, capture=replaying_capture)

    solver._graphs._capture = untouched_capture(lambda: (solver._arena.kv, solver._arena.tails))
    flow.decoder._solver = solver
    monkeypatch.setattr(incremental, "solver_for", lambda _cfm: solver)
    try:
        with torch.inference_mode():
            first = drive_batched(flow, solver)
        while capture_one_pending():  # what the idle scheduler does between takes (its own thread's mode)
            pass
        with torch.inference_mode():
            again = drive_batched(flow, solver)
    finally:
        flow.decoder._solver = None
    assert solver._graphs.enabled and solver.captures >= 1 and len(solver._graphs) == solver.captures
    for batched in (first, again):
        for take_solo, take_batched in zip(solo, batched, strict=True):
            for ours, theirs in zip(take_batched, take_solo, strict=True):
                assert relative_error(ours, theirs) < 1e-5


@pytest.mark.parametrize("graphs", [False, True])
def test_batches_beyond_an_arena_of_every_step_run_a_step_at_a_time(modules, graphs, monkeypatch):  # noqa: F811
    """A budget that holds one Euler step of the batch's keys/values but not every step, even for one take:
    each batch runs a step at a time through a one-step arena (one graph for every step, with the stand-in
    capture), equal to each take alone."""
    from studio.tts.flow.streaming import incremental
    from tests.tts.test_encoder_graphs import replaying_capture, untouched_capture

    flow, _ = modules
    solo = drive_solo(flow)
    solver = EstimatorSolver(flow.decoder, graphs=graphs, capture=replaying_capture)
    solver._graphs._capture = untouched_capture(lambda: (solver._arena.kv, solver._arena.tails))
    solver.buckets = True
    one_step_of_three = 512 * solver.layout.bytes_per_frame(1, 8, torch.float32)  # 3 takes pad to 4
    assert 512 * solver.layout.bytes_per_frame(10, 2, torch.float32) > one_step_of_three
    solver.budget_bytes = one_step_of_three
    monkeypatch.setattr(incremental, "solver_for", lambda _cfm: solver)  # graphs without the loader's
    with installed(flow, solver), torch.inference_mode():
        batched = drive_batched(flow, solver)
    assert solver.stepwise_batches == solver.batches < solver.requests == sum(len(m) for m in solo)
    assert solver._arena.kv.numel() * 4 <= solver.budget_bytes  # one step's keys/values (float32), in budget
    if graphs:
        assert 1 <= solver.captures <= len(solver._graphs) + 8 and solver._graphs.enabled
    for take_solo, take_batched in zip(solo, batched, strict=True):
        for ours, theirs in zip(take_batched, take_solo, strict=True):
            assert relative_error(ours, theirs) < 1e-5


@pytest.mark.parametrize("graphs", [False, True])
def test_batches_view_one_arena_in_their_own_context_and_rows(modules, graphs, monkeypatch):  # noqa: F811
    """One flat arena serves every batch in its own shape: a long take's chunks attend over a larger context
    (768 frames) than the batches before them (512), and batches of one, two and four rows, of every Euler
    step and of one, read the same buffer laid out differently; each equals its take alone."""
    from studio.tts.flow.streaming import incremental
    from tests.tts.test_encoder_graphs import replaying_capture, untouched_capture

    flow, _ = modules
    takes = [(7, 300, 1), (25, 83, 2), (13, 70, 3)]  # the first reaches ~650 frames of context
    solo = drive_solo(flow, takes)
    solver = EstimatorSolver(flow.decoder, graphs=graphs, capture=replaying_capture)
    solver._graphs._capture = untouched_capture(lambda: (solver._arena.kv, solver._arena.tails))
    solver.buckets = True
    # every step of two takes at 512 frames fits; of four does not: those run a step at a time
    solver.budget_bytes = 512 * solver.layout.bytes_per_frame(10, 4, torch.float32)
    plan, shapes = solver._plan, []

    def planned(group):
        batch = plan(group)
        shapes.append((batch.rows, batch.cap, batch.slots))
        return batch

    solver._plan = planned
    monkeypatch.setattr(incremental, "solver_for", lambda _cfm: solver)
    with installed(flow, solver), torch.inference_mode():
        batched = drive_batched(flow, solver, takes)
    assert {cap for _, cap, _ in shapes} == {512, 768}
    assert {slots for _, _, slots in shapes} == {1, 10} and solver.stepwise_batches
    assert solver._arena.kv.numel() * 4 <= solver.budget_bytes
    for take_solo, take_batched in zip(solo, batched, strict=True):
        for ours, theirs in zip(take_batched, take_solo, strict=True):
            assert relative_error(ours, theirs) < 1e-5


def test_a_batch_runs_at_the_context_of_a_captured_graph_of_its_shape_when_its_view_fits(modules):  # noqa: F811
    """A chunk needing 512 frames of context plans 768 once a graph of its shape (rows, frames, steps,
    precision) at 768 is kept: no new shape, so no eager call or capture on its take's path."""
    from studio.tts.device.cuda_graphs import ShapeGraphs
    from tests.tts.test_encoder_graphs import doubled, replaying_capture

    flow, _ = modules
    solver = EstimatorSolver(flow.decoder, graphs=True, capture=replaying_capture)
    solver.buckets = True
    g = torch.Generator().manual_seed(5)
    short = SolveRequest(EstimatorState(), torch.randn(1, 80, 40, generator=g), torch.randn(1, 80, generator=g),
                         torch.zeros(1, 80, 40), frame0=0, commit=0, mark=None, steps=10)  # fmt: skip
    solver.budget_bytes = 768 * solver.layout.bytes_per_frame(10, 2, torch.float32)
    assert solver._plan([short]).cap == 512  # nothing captured yet
    solver._graphs = ShapeGraphs("flow solve", doubled, capture=replaying_capture)
    solver._graphs((1, 64, 768, torch.float32, 10, None), ("weights",), (torch.ones(1),))
    assert solver._plan([short]).cap == 768
    solver.budget_bytes -= 1  # the larger view no longer fits: the batch keeps its own context
    assert solver._plan([short]).cap == 512


def test_a_lone_chunk_beyond_the_budget_never_sits_beside_the_shared_arena(modules):  # noqa: F811
    """A chunk too large for the budget alone gets an arena of its exact size; the shared arena is let go
    first, so the two are never held together beyond the budget. (On the H200 at a 24 GiB budget, a take's
    final chunk asked for 4.4 GiB beside a shared arena near the 8.8 GiB share, and the take failed.)"""
    import weakref

    flow, _ = modules
    solo = drive_solo(flow)
    solver = EstimatorSolver(flow.decoder, graphs=False)
    allocate, shared_alive = solver._allocate, []

    def watched(batch, rows, cap, device):
        shared = getattr(solver, "_shared_ref", None)
        if solver.budget_bytes == 1:  # every request is beyond this budget: a lone arena
            shared_alive.append(shared is not None and shared() is not None)
        arena = allocate(batch, rows, cap, device)
        if solver.budget_bytes != 1:
            solver._shared_ref = weakref.ref(arena.kv)
        return arena

    solver._allocate = watched
    with installed(flow, solver):
        drive_batched(flow, solver)  # the shared arena, for three takes
        assert solver._arena is not None
        solver.budget_bytes = 1
        alone = drive_solo(flow)
    assert shared_alive and not any(shared_alive) and solver._arena is None
    for take_solo, take_alone in zip(solo, alone, strict=True):
        for ours, theirs in zip(take_alone, take_solo, strict=True):
            assert relative_error(ours, theirs) < 1e-5


def test_a_small_budget_splits_batches_without_changing_results(modules):  # noqa: F811
    flow, _ = modules
    solo = drive_solo(flow)
    solver = EstimatorSolver(flow.decoder, graphs=False, budget_bytes=1)
    with installed(flow, solver):
        batched = drive_batched(flow, solver)
    assert solver.batches == solver.requests  # nothing fitted together
    for take_solo, take_batched in zip(solo, batched, strict=True):
        for ours, theirs in zip(take_batched, take_solo, strict=True):
            assert relative_error(ours, theirs) < 1e-5


def test_a_failing_request_gets_its_error_and_the_solver_keeps_working(modules):  # noqa: F811
    flow, _ = modules
    solver = EstimatorSolver(flow.decoder, graphs=False)
    beyond = NOISE_FRAMES - 10  # its 40 frames run past the fixed noise buffer
    bad = SolveRequest(
        EstimatorState(length=beyond),
        torch.zeros(1, 80, 40),
        torch.zeros(1, 80),
        torch.zeros(1, 80, 40),
        frame0=beyond,
        commit=beyond,
        mark=None,
        steps=10,
    )
    with pytest.raises(ValueError, match="noise buffer"):
        solver.solve(bad)
    good = SolveRequest(
        EstimatorState(),
        torch.randn(1, 80, 40),
        torch.randn(1, 80),
        torch.zeros(1, 80, 40),
        frame0=0,
        commit=0,
        mark=None,
        steps=10,
    )
    mel = solver.solve(good)
    assert mel.shape == (1, 80, 40) and torch.isfinite(mel).all()
    assert good.state.length == 0 and good.state.tails is not None


def test_state_rows_past_the_commit_are_recomputed_not_trusted(modules):  # noqa: F811
    """A chunk commits only whole attention chunks; the next call recomputes the rest from the commit."""
    flow, _ = modules
    solver = EstimatorSolver(flow.decoder, graphs=False)
    state = EstimatorState()
    mu, spks = torch.randn(1, 80, 70), torch.randn(1, 80)
    cond = torch.zeros(1, 80, 70)
    whole = solver.solve(SolveRequest(EstimatorState(), mu, spks, cond, 0, 0, None, 10))
    first = solver.solve(SolveRequest(state, mu[:, :, :60], spks, cond[:, :, :60], 0, 50, None, 10))
    assert state.length == 50
    rest = solver.solve(SolveRequest(state, mu[:, :, 50:], spks, cond[:, :, 50:], 50, 50, None, 10))
    assert relative_error(first[:, :, :50], whole[:, :, :50]) < 1e-5
    assert relative_error(rest, whole[:, :, 50:]) < 1e-5
