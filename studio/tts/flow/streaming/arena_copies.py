"""Takes' estimator states into the batched solve's work arena and back, and the arena's memory (`EstimatorSolver`'s).

A batch's takes sit in the arena as pairs of CFG rows (take b: rows 2b and 2b + 1). Before a solve, each
take's kept keys/values (frames before its chunk) and its conv tails at the commit point are copied in;
after it, the chunk's new rows (up to the commit point, or to the request's mark when that lies later: a
prompt cache keeps them) are written to the take's pages, then its length, tails and result are set (the
result last: a request with a result has its state written, `EstimatorSolver._run_isolated`).

With `step`, the arena holds one Euler step (its first axis 1) and these copy that step alone: a batch
whose arena of every step would not fit the budget runs a step at a time (`EstimatorSolver._run_stepwise`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from studio.tts.flow.streaming.batched_solve import Layout, WorkArena


@dataclass
class ArenaBuffer:
    """The shared arena's memory, flat: each batch views it as a `WorkArena` of its own shape (`view`)."""

    kv: torch.Tensor  # 1-D, the keys/values' (or attention inputs') dtype
    tails: torch.Tensor  # 1-D, the conv tails' dtype

    @classmethod
    def zeros(cls, kv: int, tails: int, mu: torch.Tensor, device: torch.device) -> ArenaBuffer:
        """`kv` key/value and `tails` tail elements for chunks like `mu` (zeros: what a view holds beyond
        what was copied in is masked, and must be finite)."""
        return cls(
            torch.zeros(kv, dtype=mu.dtype, device=device),
            torch.zeros(tails, dtype=tails_dtype(mu), device=device),
        )

    def view(self, layout: Layout, slots: int, rows: int, cap: int) -> WorkArena:
        """The first elements as an arena of `slots` Euler steps, `rows` CFG rows and `cap` frames of context
        (what a batch of that shape copies into, solves over and copies out of)."""
        kv, tails = layout.state_shape(slots, rows, cap), layout.tail_shape(slots, rows)
        view = self.kv[: math.prod(kv)].view(kv)
        return WorkArena(view, self.tails[: math.prod(tails)].view(tails), layout.inputs)


def tails_dtype(mu: torch.Tensor) -> torch.dtype:
    """The conv tails' dtype: the compute dtype, float32 under autocast (a conv may see float32 there)."""
    return torch.float32 if torch.is_autocast_enabled(mu.device.type) else mu.dtype


def check_start(request, arena: WorkArena) -> None:
    """A chunk starts where its take's state ends, and its state keeps what the arena holds."""
    if request.state.inputs != arena.inputs:
        kept = "attention inputs" if request.state.inputs else "keys/values"
        raise RuntimeError(f"a take's flow state keeps {kept}, the solver's arena does not")
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
        check_start(request, arena)
        if state.length:
            state.copy_prefix(arena.kv[:, :, :, rows], state.length, step)
        if state.tails is None:
            arena.tails[:, rows, :, :left] = 0
        else:
            arena.tails[:, rows, :, :left] = state.tails if step is None else state.tails[step : step + 1]


def write_rows(request, kv: torch.Tensor, step: int | None = None) -> None:
    """The chunk's new rows from its take's rows of the arena (`kv`, [..., 2, heads, cap, head_dim], or its
    attention inputs) into the take's pages (every step, or `step`)."""
    upto = kept_until(request)
    if upto > request.frame0:
        request.state.write(kv, request.frame0, upto, step)


def reserve_pages(layout: Layout, requests: Sequence, steps: int, like: torch.Tensor) -> None:
    """The pages a stepwise solve writes into, made before its first step writes (each step writes a slice)."""
    for request in requests:
        shape = layout.state_shape(steps, 2, 0, request.state.inputs)
        request.state.reserve(kept_until(request), torch.empty(shape, dtype=like.dtype, device=like.device))


def finish(layout: Layout, request, tails: torch.Tensor, result: torch.Tensor) -> None:
    """The request's state after its solve (its rows written): its length, its tails at the commit point and
    at the mark (`tails` [steps, 2, channels, 2 x left]), then its result."""
    state, left = request.state, layout.left
    state.length, state.written = request.commit, kept_until(request)
    state.tails = tails[:, :, :, :left].clone()
    state.mark_tails = None if request.mark is None else tails[:, :, :, left:].clone()
    request.result = result
