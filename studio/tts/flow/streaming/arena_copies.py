"""Takes' estimator states into the batched solve's work arena and back (`EstimatorSolver`'s copies).

A batch's takes sit in the arena as pairs of CFG rows (take b: rows 2b and 2b + 1). Before a solve, each
take's kept keys/values (frames before its chunk) and its conv tails at the commit point are copied in;
after it, the chunk's new rows (up to the commit point, or to the request's mark when that lies later: a
prompt cache keeps them) are written to the take's pages, then its length, tails and result are set (the
result last: a request with a result has its state written, `EstimatorSolver._run_isolated`).

With `step`, the arena holds one Euler step (its first axis 1) and these copy that step alone: a batch
whose arena of every step would not fit the budget runs a step at a time (`EstimatorSolver._run_stepwise`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from studio.tts.flow.streaming.batched_solve import Layout, WorkArena


def check_start(request) -> None:
    """A chunk starts where its take's state ends."""
    if request.state.length != request.frame0:
        raise RuntimeError(
            f"estimator state holds {request.state.length} frames, the chunk starts at {request.frame0}"
        )


def kept_until(request) -> int:
    """The chunk's rows kept in the take's state end here: its commit point, or its mark when later."""
    return max(request.commit, request.mark or 0)


def copy_in(layout: Layout, requests: Sequence, arena: WorkArena, step: int | None = None) -> None:
    """Each take's kept keys/values and conv tails into its rows of the arena (of every step, or of `step`)."""
    left = layout.left
    for b, request in enumerate(requests):
        state, rows = request.state, slice(2 * b, 2 * b + 2)
        check_start(request)
        if state.length:
            state.copy_prefix(arena.kv[:, :, :, rows], state.length, step)
        if state.tails is None:
            arena.tails[:, rows, :, :left] = 0
        else:
            arena.tails[:, rows, :, :left] = state.tails if step is None else state.tails[step : step + 1]


def write_rows(request, kv: torch.Tensor, step: int | None = None) -> None:
    """The chunk's new rows from its take's rows of the arena's keys/values (`kv`, [..., 2, heads, cap,
    head_dim]) into the take's pages (every step, or `step`)."""
    upto = kept_until(request)
    if upto > request.frame0:
        request.state.write(kv, request.frame0, upto, step)


def reserve_pages(layout: Layout, requests: Sequence, steps: int, like: torch.Tensor) -> None:
    """The pages a stepwise solve writes into, made before its first step writes (each step writes a slice)."""
    shape = torch.empty(layout.kv_shape(steps, 2, 0), dtype=like.dtype, device=like.device)
    for request in requests:
        request.state.reserve(kept_until(request), shape)


def finish(layout: Layout, request, tails: torch.Tensor, result: torch.Tensor) -> None:
    """The request's state after its solve (its rows written): its length, its tails at the commit point and
    at the mark (`tails` [steps, 2, channels, 2 x left]), then its result."""
    state, left = request.state, layout.left
    state.length, state.written = request.commit, kept_until(request)
    state.tails = tails[:, :, :, :left].clone()
    state.mark_tails = None if request.mark is None else tails[:, :, :, left:].clone()
    request.result = result
