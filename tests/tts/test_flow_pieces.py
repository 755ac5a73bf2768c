"""A long chunk solved in pieces of bounded length equals it solved at once, and the work arena never grows
past the flow's budget: a take too long for it is refused with a specific error before it runs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from studio.tts.flow.streaming.incremental import IncrementalFlow
from studio.tts.flow.streaming.pieces import piece_bounds
from studio.tts.flow.streaming.solver import ArenaTooSmallError, EstimatorSolver
from studio.tts.memory import STATE_STEPS, check_arena
from tests.tts.test_flow_solver import installed
from tests.tts.test_incremental_flow import (  # noqa: F401
    modules,
    prompt,
    relative_error,
    speech_tokens,
)

PROMPT_TOKENS, N_TOKENS = 13, 190
# two streamed chunks (the second one long, with an unaligned tail past its commit), then the final chunk
# of all remaining tokens at once (finalize: nothing committed)
CALLS = [(28, False), (110, False), (N_TOKENS, True)]


def test_pieces_are_cut_on_chunk_boundaries_and_at_commit_and_mark():
    assert piece_bounds(0, 100, 0, None, 50, 256) is None  # short enough: one piece
    assert piece_bounds(0, 600, 0, None, 50, 256) == [(0, 200), (200, 400), (400, 600)]  # near-equal
    cut = piece_bounds(100, 530, 500, 150, 50, 200)  # the mark at 150 and the commit at 500 are cuts
    assert cut == [(100, 150), (150, 250), (250, 400), (400, 500), (500, 530)]
    assert piece_bounds(0, 400, 0, None, 50, 10) == [(a, a + 50) for a in range(0, 400, 50)]  # >= a chunk
    assert piece_bounds(0, 600, 333, None, 50, 256) is None  # a commit off a chunk boundary: one piece
    assert piece_bounds(0, 600, 0, None, 50, 0) is None  # 0: no cap


def drive(flow, solver: EstimatorSolver) -> tuple[list[torch.Tensor], IncrementalFlow]:
    incremental = IncrementalFlow(flow, **prompt(PROMPT_TOKENS, 3))
    tokens = speech_tokens(N_TOKENS, 3)
    with installed(flow, solver):
        return [incremental.mel(tokens[:end], final)[0] for end, final in CALLS], incremental


@pytest.mark.parametrize("buckets", [False, True])
def test_a_long_final_chunk_in_pieces_within_a_tiny_arena_equals_it_solved_at_once(modules, buckets):  # noqa: F811
    flow, _ = modules
    whole = EstimatorSolver(flow.decoder, graphs=False, max_frames=0, budget_bytes=2**40)
    whole.buckets = buckets
    reference, _ = drive(flow, whole)
    chunk = flow.decoder.estimator.static_chunk_size
    final_frames = reference[-1].shape[2]
    assert final_frames > 3 * chunk and whole.requests == len(
        CALLS
    )  # the final chunk is long, solved at once
    end = 2 * (PROMPT_TOKENS + N_TOKENS)
    tight, _ = whole.lone_arena_bytes(end, STATE_STEPS, torch.float32, torch.device("cpu"))
    allocated: list[int] = []
    capped = EstimatorSolver(flow.decoder, graphs=False, max_frames=chunk, budget_bytes=tight)
    capped.buckets = buckets
    allocate = capped._allocate

    def recording(batch, rows, cap, device):
        arena = allocate(batch, rows, cap, device)
        allocated.append(arena.kv.nbytes)
        return arena

    capped._allocate = recording
    pieces, incremental = drive(flow, capped)
    assert capped.requests > len(CALLS) + 3  # the long chunks ran in pieces of one estimator chunk
    assert allocated and max(allocated) <= tight  # no arena beyond the budget, ever
    assert [m.shape for m in pieces] == [m.shape for m in reference]
    for ours, theirs in zip(pieces, reference, strict=True):
        assert relative_error(ours, theirs) < 1e-5
    state = incremental.estimator_state
    assert state.length == 2 * len(incremental.committed)  # finalize committed nothing, as at once


def test_streamed_chunks_in_pieces_leave_every_later_chunk_exact(modules):  # noqa: F811
    """Pieces of a streamed chunk commit at their ends (the last at the chunk's commit), so each call after
    one solved in pieces equals the uncapped run."""
    flow, _ = modules
    reference, _ = drive(flow, EstimatorSolver(flow.decoder, graphs=False, max_frames=0))
    chunk = flow.decoder.estimator.static_chunk_size
    pieces, _ = drive(flow, EstimatorSolver(flow.decoder, graphs=False, max_frames=chunk))
    for ours, theirs in zip(pieces, reference, strict=True):
        assert relative_error(ours, theirs) < 1e-5


def test_a_take_whose_state_cannot_fit_the_arena_is_refused_before_it_runs(modules):  # noqa: F811
    flow, _ = modules
    solver = EstimatorSolver(flow.decoder, graphs=False, budget_bytes=2**20)
    parts = SimpleNamespace(flow=flow, fp16=False, device="cpu")
    with installed(flow, solver):
        fits = 2**20 // solver.layout.bytes_per_frame(STATE_STEPS, 2, torch.float32)
        check_arena(parts, fits)  # fits: no error
        with pytest.raises(ArenaTooSmallError, match="too long for the VRAM budget") as raised:
            check_arena(parts, fits + 1)
    assert raised.value.budget == 2**20 and raised.value.frames == fits + 1
