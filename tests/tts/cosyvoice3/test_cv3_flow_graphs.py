"""CosyVoice3's static-shape flow solve (`DiTGraphSolver`) against each take's own eager calls.

A copy of the flow with the solver attached runs takes' calls batched, padded and through the shared arena
(eagerly, or through `ShapeGraphs` with a stand-in capture that replays by re-running the captured function
on its static inputs); the original flow runs each take alone with `solve_plans`. Every take must get the
same mel (fp32, 1e-5) and its state must go on as if it had run alone, wherever it stands: a cold prompt
cache, a warm one, later hops, hops that end inside a chunk, a finalizing call; when the arena grows, when a
batch is split by the budget, and when one call alone is beyond it.
"""

from __future__ import annotations

import copy
import time

import pytest
import torch

from studio.tts.cosyvoice3.flow_batch import mel_many
from studio.tts.cosyvoice3.flow_graphs import attach_dit_graphs
from studio.tts.cosyvoice3.flow_prompt_cache import DiTPromptCache
from studio.tts.cosyvoice3.flow_scheduler import DiTFlowScheduler
from studio.tts.cosyvoice3.flow_stream import DiTFlowStream
from studio.tts.device.cuda_graphs import MIN_CONTEXT, capture_one_pending
from studio.tts.scheduler import IDLE_CAPTURE_SECONDS
from tests.tts.cosyvoice3.test_cv3_flow_stream import small_flow, take_inputs, take_schedule
from tests.tts.test_encoder_graphs import replaying_capture, untouched_capture

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def flow():
    return small_flow()


def graphed_copy(flow, **options):
    graphed = copy.deepcopy(flow)
    return graphed, attach_dit_graphs(graphed, **options)


def replaying_graphs(flow, **options):
    """A graphed copy whose stand-in capture, like a real one, runs nothing (`keep_arena_on_capture`)."""
    graphed, solver = graphed_copy(flow, capture=replaying_capture, **options)
    return graphed, keep_arena_on_capture(solver)


def keep_arena_on_capture(solver):
    """The solver's stand-in capture leaves its arena as it was, as a real one (`untouched_capture`)."""
    solver._graphs._capture = untouched_capture(lambda: (solver._arena.kv, solver._arena.left))
    return solver


class Take:
    """One take run twice on the same inputs and schedule: on the graphed flow copy and alone."""

    def __init__(self, graphed, flow, prompt_tokens: int, tokens: int, seed: int, caches=(None, None)):
        self.inputs = take_inputs(prompt_tokens, tokens, seed)
        self.counts = take_schedule(prompt_tokens, tokens)
        inputs = self.inputs
        args = (inputs["prompt_token"], inputs["prompt_feat"], inputs["embedding"])
        self.stream = DiTFlowStream(graphed, *args, prompt_cache=caches[0])
        self.alone = DiTFlowStream(flow, *args, prompt_cache=caches[1])
        self.calls = 0

    @property
    def running(self) -> bool:
        return self.calls < len(self.counts)

    def next_call(self) -> tuple[torch.Tensor, bool]:
        index, self.calls = self.calls, self.calls + 1
        return self.inputs["tokens"][:, : self.counts[index]], index == len(self.counts) - 1


def run_round(takes: list[Take], tolerance: float = TOLERANCE) -> None:
    calls = [take.next_call() for take in takes]
    batched = mel_many([(take.stream, tokens, end) for take, (tokens, end) in zip(takes, calls, strict=True)])
    for take, (tokens, finalize), mel in zip(takes, calls, batched, strict=True):
        expected = take.alone.mel(tokens, finalize)
        assert mel.shape == expected.shape
        if mel.numel():
            assert (mel - expected).abs().max().item() <= tolerance
        if finalize:
            assert take.stream.state_bytes == 0
            continue
        mine, theirs = take.stream._state, take.alone._state
        assert mine.kept == theirs.kept
        kept, close = mine.kept, {"atol": tolerance, "rtol": 0}
        assert torch.allclose(mine.position_left.float(), theirs.position_left.float(), **close)
        assert torch.allclose(mine.keys[..., :kept, :].float(), theirs.keys[..., :kept, :].float(), **close)
        assert torch.allclose(
            mine.values[..., :kept, :].float(), theirs.values[..., :kept, :].float(), **close
        )


def run_to_the_end(takes: list[Take], tolerance: float = TOLERANCE) -> None:
    while takes := [take for take in takes if take.running]:
        run_round(takes, tolerance)


@torch.inference_mode()
def test_padded_batches_equal_each_takes_own_calls(flow):
    graphed, solver = graphed_copy(flow, graphs=False)
    caches = (DiTPromptCache(2**40), DiTPromptCache(2**40))
    warm = Take(graphed, flow, 60, 200, seed=50, caches=caches)
    run_round([warm])  # its voice's prompt chunks are now cached on both sides
    takes = [
        Take(graphed, flow, 57, 200, seed=51, caches=caches),  # a cold voice
        Take(graphed, flow, 60, 200, seed=50, caches=caches),  # a warm one
        Take(graphed, flow, 9, 90, seed=52),  # no cache
        warm,
    ]
    run_to_the_end(takes)
    assert solver.batches >= len(takes[0].counts) and solver.requests > solver.batches
    assert solver.captures == 0 and solver.eager_calls == 0


@torch.inference_mode()
def test_shapes_are_captured_then_replayed(flow):
    graphed, solver = replaying_graphs(flow)
    takes = [Take(graphed, flow, 30, 150, seed=s) for s in (60, 61)]
    run_round(takes)
    while capture_one_pending():  # what the idle flow scheduler does between takes
        pass
    run_to_the_end(takes)
    assert solver.captures >= 1 and solver._graphs.enabled
    again = [Take(graphed, flow, 30, 150, seed=s) for s in (62, 63)]
    captures = solver.captures
    run_to_the_end(again)  # the same shapes: replays, few new captures
    assert solver.captures - captures < len(again[0].counts)


def record_shapes(solver) -> list[tuple[int, int, int]]:
    """(CFG rows, context frames, Euler step slots) of each batch the solver plans from now on."""
    plan, shapes = solver._plan, []

    def planned(plans):
        batch = plan(plans)
        if batch is not None:
            shapes.append((2 * batch.rows, batch.cap, batch.slots))
        return batch

    solver._plan = planned
    return shapes


@torch.inference_mode()
def test_the_arena_grows_for_a_long_take(flow):
    graphed, solver = replaying_graphs(flow)
    shapes = record_shapes(solver)
    long = Take(graphed, flow, 40, 320, seed=70)  # 720 frames: past the first context
    run_to_the_end([long])
    assert {cap for _, cap, _ in shapes} == {MIN_CONTEXT, 768}
    assert solver._arena.kv.numel() >= solver._elements(10, 2, 768)[0]


def arena_within(solver, budget: int) -> bool:
    arena = solver._arena
    return (arena.kv.numel() + arena.left.numel()) * arena.kv.element_size() <= budget


@torch.inference_mode()
def test_the_budget_splits_batches_and_runs_an_oversized_call_alone(flow):
    """A budget of one Euler step for two takes: four takes run as two batches, each a step at a time; a take
    whose context outgrows even that alone is solved eagerly in its own buffers."""
    probe = attach_dit_graphs(copy.deepcopy(flow), graphs=False)
    budget = probe.arena_bytes(4, MIN_CONTEXT, 1, torch.float32)
    graphed, solver = graphed_copy(flow, graphs=False, budget_bytes=budget)
    takes = [Take(graphed, flow, 20, 100, seed=s) for s in (80, 81, 82, 83)]
    run_round(takes)
    assert solver.batches == solver.stepwise_batches == 2 and solver.requests == 4  # two takes per arena
    long = Take(graphed, flow, 50, 500, seed=84)  # 1,100 frames: beyond the budget even alone
    takes = [long, *takes]
    while takes := [take for take in takes if take.running]:
        run_round(takes)
        assert arena_within(solver, budget)
    assert solver.eager_calls >= 1 and solver.batches > 2


@torch.inference_mode()
def test_a_long_take_beside_a_wide_arena_keeps_within_the_budget(flow):
    """Four takes fill an arena of 8 CFG rows x 512 frames; a take that outgrows that context then views the
    same buffer as 2 rows x 768 frames: never beyond the budget, never two arenas at once."""
    probe = attach_dit_graphs(copy.deepcopy(flow), graphs=False)
    budget = probe.arena_bytes(8, MIN_CONTEXT, 10, torch.float32)
    graphed, solver = graphed_copy(flow, graphs=False, budget_bytes=budget)
    watch_allocations(solver)
    shapes = record_shapes(solver)
    short = [Take(graphed, flow, 20, 60, seed=s) for s in (85, 86, 87)]
    long = Take(graphed, flow, 40, 320, seed=88)  # 720 frames: a context of 768 (in 256-frame steps)
    takes = [long, *short]
    while takes := [take for take in takes if take.running]:
        run_round(takes)
        assert arena_within(solver, budget)
    assert {(rows, cap) for rows, cap, _ in shapes} >= {(8, MIN_CONTEXT), (2, 768)}
    assert solver.eager_calls == 0 and not any(solver.old_alive)  # never two arenas at once


def watch_allocations(solver):
    """Record, at each arena allocation, whether the arena before it is still alive."""
    import weakref

    allocate, solver.old_alive, solver.allocations = solver._allocate, [], 0

    def watched(*args):
        before = getattr(solver, "_before", None)
        solver.old_alive.append(before is not None and before() is not None)
        solver.allocations += 1
        arena = allocate(*args)
        solver._before = weakref.ref(arena.kv)
        return arena

    solver._allocate = watched
    return solver


def test_the_idle_flow_scheduler_captures_the_shapes_that_ran_eagerly(flow):
    graphed, solver = replaying_graphs(flow)
    take = Take(graphed, flow, 30, 150, seed=90)
    scheduler = DiTFlowScheduler(max_takes=4)
    try:
        tokens, finalize = take.next_call()
        with torch.inference_mode():
            mel = scheduler.render(take.stream, tokens, finalize)
            expected = take.alone.mel(tokens, finalize)
        assert (mel - expected).abs().max().item() <= TOLERANCE  # eager: the shape's first call
        deadline = time.monotonic() + 60
        while solver.captures == 0 and time.monotonic() < deadline:  # other tests' graphs may come first
            time.sleep(IDLE_CAPTURE_SECONDS)
        assert scheduler.idle_captures >= 1 and solver.captures >= 1
    finally:
        scheduler.close()


@torch.inference_mode()
def test_half_precision_batches_follow_each_takes_own_calls():
    """fp16 (the loader's CUDA flow): arena and states in fp16, each take within half-precision rounding of
    its own calls (the padded batch rounds its matrix products differently)."""
    half = small_flow().half()
    graphed, solver = replaying_graphs(half)
    takes = [Take(graphed, half, prompt, 110, seed) for prompt, seed in ((6, 91), (20, 92))]
    worst = 0.0
    while takes := [take for take in takes if take.running]:
        calls = [take.next_call() for take in takes]
        batched = mel_many([(t.stream, tokens, end) for t, (tokens, end) in zip(takes, calls, strict=True)])
        for take, (tokens, finalize), mel in zip(takes, calls, batched, strict=True):
            expected = take.alone.mel(tokens, finalize)
            assert mel.dtype == torch.float32 and mel.shape == expected.shape
            worst = max(worst, (mel - expected).abs().max().item() if mel.numel() else 0.0)
    assert solver._arena.kv.dtype == torch.float16 and solver.captures >= 1
    assert worst <= 2e-2


def test_the_loaders_cuda_graphs_give_a_cosyvoice3_flow_its_graphed_solve(flow):
    from studio.tts.cosyvoice3.flow_graphs import DiTGraphSolver
    from studio.tts.loader import attach_cuda_graphs

    graphed = copy.deepcopy(flow)
    attach_cuda_graphs(graphed, None)
    assert isinstance(graphed.decoder.dit_solver, DiTGraphSolver) and graphed.decoder.dit_solver.graphs
    assert getattr(graphed.decoder, "graphs", None) is None  # CosyVoice2's estimator graphs: not a DiT's
    attach_cuda_graphs(graphed, None, enabled=False)
    assert graphed.decoder.dit_solver is None


@pytest.mark.parametrize("graphs", [False, True])
@torch.inference_mode()
def test_batches_beyond_an_arena_of_every_step_run_a_step_at_a_time(flow, graphs):
    """A budget of one Euler step for four takes but not of every step for one: every batch runs a step at a
    time through a one-step arena (one graph for every step with the stand-in capture), equal to each take."""
    probe = attach_dit_graphs(copy.deepcopy(flow), graphs=False)
    budget = probe.arena_bytes(8, MIN_CONTEXT, 1, torch.float32)
    assert probe.arena_bytes(2, MIN_CONTEXT, 10, torch.float32) > budget
    if graphs:
        graphed, solver = replaying_graphs(flow, budget_bytes=budget)
    else:
        graphed, solver = graphed_copy(flow, graphs=False, budget_bytes=budget)
    caches = (DiTPromptCache(2**40), DiTPromptCache(2**40))
    takes = [Take(graphed, flow, 30 + 7 * s, 150, seed=s, caches=caches) for s in range(3)]
    run_to_the_end(takes)
    assert solver.stepwise_batches == solver.batches > 0 and solver.eager_calls == 0
    assert arena_within(solver, budget)
    assert solver.captures >= (1 if graphs else 0)


@torch.inference_mode()
def test_a_failing_graphed_solve_falls_back_to_eager_without_losing_a_take(flow, monkeypatch, caplog):
    """The graphed path failing (here: its static solve raises) before any state is written back: that batch and
    every call after it are solved eagerly, each take still equal to its own calls, and the failure is logged."""
    from studio.tts.cosyvoice3 import flow_graphs

    graphed, solver = graphed_copy(flow, graphs=False)
    takes = [Take(graphed, flow, 30, 150, seed=s) for s in (95, 96)]
    run_round(takes)  # the graphed path works at first
    batches = solver.batches

    def broken(*args, **kwargs):
        raise RuntimeError("a kernel failed")

    monkeypatch.setattr(flow_graphs, "solve_static", broken)
    run_to_the_end(takes)
    assert solver.failed and solver._arena is None and solver.batches == batches
    assert solver.eager_calls > 0 and "solving eagerly from now on" in caplog.text
