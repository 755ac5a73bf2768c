"""The streaming flow's Euler solve, batched across concurrent takes and replayed as CUDA graphs.

Every streamed chunk of every take needs the same work: `n_timesteps` Euler steps of the estimator over
the chunk's new frames, each step attending to that take's cached keys/values. On a GPU that work is a
few thousand tiny kernels, so it is bound by launches, not arithmetic: running the chunks of sixteen takes
one by one costs sixteen times what one batch of sixteen costs. `EstimatorSolver` therefore

- lets concurrent takes combine: whoever finds the solver idle runs every request queued at that moment
  as one batch (no waiting, so a lone take is never delayed), the others wait for their results;
- copies the batch's states (`EstimatorState`, in pages) into a shared work arena (arena_copies.py), runs
  one solve over all rows with static shapes (`solve_batch` in batched_solve.py: frames padded to a bucket
  and masked out, per-row positions as tensors), and copies the new committed rows back;
- when an arena of every Euler step would not fit the budget even for four takes (`arena_tries`), runs the
  batch a step at a time through an arena of one step (a tenth of the bytes), copying each step's rows in
  and out (`_run_stepwise`);
- keeps the arena as one flat buffer that each batch views in its own shape (its Euler step slots, rows and
  context, bucketed: `bucket_context`), so batches of short takes hold more rows and attend over less
  context than one with a long take, and one-pass and stepwise batches share it; it grows by doubling
  (which drops the graphs), within the budget;
- on CUDA, captures that solve once per (batch, frames, context) bucket as a CUDA graph and replays it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from studio import envs
from studio.tts.device.cuda_graphs import (
    ShapeGraphs,
    autocast_context,
    autocast_dtype,
    bucket_batch,
    bucket_context,
    bucket_frames,
    capture_graph,
    grown_size,
    let_go_of_buffer,
    replayable_context,
)
from studio.tts.device.vram_budget import arena_tries, default_arena_bytes, freed_after_out_of_memory
from studio.tts.flow.streaming.arena_copies import (
    ArenaBuffer,
    copy_in,
    finish,
    reserve_pages,
    tails_dtype,
    write_rows,
)
from studio.tts.flow.streaming.batched_solve import (
    EstimatorState,
    Layout,
    SolveInputs,
    WorkArena,
    batch_inputs,
    solve_batch,
)

log = logging.getLogger(__name__)

# A batch shape runs eagerly this many times before it is captured (at its next call, or while the flow's
# scheduler is idle): a capture cost 0.8-1.6 s on the H200 with its warm-up pass, 0.2-0.5 s without, an eager
# solve ~0.2 s, and shapes seen once (a tail chunk's odd length) are common. At least 1: a capture then needs
# no warm-up pass, which would write into the arena between its copy-in and the replay.
EAGER_FIRST = 1
SOLVE_GRAPHS_KEPT = 48
# Takes per solve: on an H200 at 64 streams, 32 gave 43.5 audio-s/s against 38.6 for 16 (docs/perf-history.md)
DEFAULT_MAX_BATCH = 32


@dataclass
class SolveRequest:
    """One take's chunk: its new frames' mu/cond [1, 80, n] (compute dtype), spks [1, 80], absolute frames."""

    state: EstimatorState
    mu: torch.Tensor
    spks: torch.Tensor
    cond: torch.Tensor
    frame0: int
    commit: int
    mark: int | None
    steps: int
    result: torch.Tensor | None = None
    error: BaseException | None = None
    done: bool = False

    @property
    def frames(self) -> int:
        return self.mu.shape[2]


# -- batching and graphs ---------------------------------------------------------------------------------
def _env_number(var: envs.EnvVar, default: float) -> float:
    value = var.number()
    return default if value is None else value


@dataclass
class _Batch:
    requests: list[SolveRequest]
    rows: int  # padded batch size
    frames: int  # padded frames per row
    cap: int  # key/value rows the solve may touch
    dtype: torch.dtype
    steps: int
    slots: int  # Euler steps the arena holds: all (one pass), or 1 (`stepwise`: a step at a time)
    oversize: bool = False  # beyond the budget alone: runs eagerly on a temporary arena

    @property
    def stepwise(self) -> bool:
        return self.slots < self.steps


class EstimatorSolver:
    """Runs `SolveRequest`s of concurrent takes in batches (flat combining), with CUDA graphs on CUDA.

    `max_batch` takes at most go in one batch (``$STUDIO_FLOW_MAX_BATCH``, default 32); the work arena's
    key/value storage is kept under `budget_bytes` (``$STUDIO_FLOW_BATCH_MB``; default a fifth of the GPU's
    memory, 1 GB on CPU) by splitting batches down to four takes, then running them a step at a time
    (`arena_tries`); a single request larger than that runs on a temporary arena of one step.
    """

    def __init__(
        self,
        cfm: nn.Module,
        graphs: bool,
        max_batch: int | None = None,
        budget_bytes: int | None = None,
        capture=capture_graph,
        keeps_inputs: bool | None = None,
    ):
        self.cfm = cfm
        self.estimator = cfm.estimator
        # with `keeps_inputs` the takes' states and the arena hold the blocks' attention inputs, not their
        # keys/values (every state this solver runs: `IncrementalFlow` makes its states so)
        inputs = envs.FLOW_STATE_INPUTS.enabled() if keeps_inputs is None else keeps_inputs
        self.layout = Layout(self.estimator, inputs)
        self.graphs = graphs  # a capture that fails switches `_graphs` off (eager from then on), not this
        self.buckets = graphs  # pad batch, frames and context to buckets (graph reuse); else exact shapes
        self.max_batch = int(max_batch or _env_number(envs.FLOW_MAX_BATCH, DEFAULT_MAX_BATCH))
        if self.max_batch < 1:
            raise ValueError(f"{envs.FLOW_MAX_BATCH.name} must be at least 1")
        self.budget_bytes = budget_bytes
        self._queue: list[SolveRequest] = []
        self._busy = False
        self._condition = threading.Condition()
        self._arena: ArenaBuffer | None = None
        self._graphs = ShapeGraphs(
            "flow solve", self._solve_static, SOLVE_GRAPHS_KEPT, eager_first=EAGER_FIRST, capture=capture
        )
        self._graphs_on_cpu = capture is not capture_graph  # a stand-in capture (tests): graphs anywhere
        self.batches = 0  # solves run, and requests served (batching shows as requests > batches)
        self.requests = 0
        self.stepwise_batches = 0  # solves run a step at a time through a one-step arena

    # -- the combining queue --------------------------------------------------------------------------
    def solve(self, request: SolveRequest) -> torch.Tensor:
        """The new frames' mel [1, 80, n] (compute dtype); `request.state` now holds the committed rows."""
        with self._condition:
            self._queue.append(request)
            while not request.done and self._busy:
                self._condition.wait()
            if request.done:
                return self._outcome(request)
            self._busy = True
            batch, self._queue = self._queue, []
        try:
            self._run_all(batch)
        except BaseException as exc:  # noqa: BLE001 - no waiting take may be left without an answer
            for waiting in batch:
                if not waiting.done:
                    waiting.error, waiting.done = exc, True
            raise
        finally:
            with self._condition:
                self._busy = False
                self._condition.notify_all()
        return self._outcome(request)

    @contextmanager
    def paused(self):
        """Hold every solve until the block ends; what was queued meanwhile then runs as one batch."""
        with self._condition:
            while self._busy:
                self._condition.wait()
            self._busy = True
        try:
            yield self
        finally:
            with self._condition:
                self._busy = False
                self._condition.notify_all()

    def solve_many(self, requests: list[SolveRequest]) -> None:
        """Solve these requests now, in as few batches as the budget allows (the `ChunkScheduler`'s tick).

        Each request ends `done` with its `result` or its `error`; nothing waits for the GPU here, the
        caller does (its next tick's host work overlaps this one's kernels).
        """
        with self.paused():
            self._run_all(list(requests), wait=False)

    def queued(self) -> int:
        with self._condition:
            return len(self._queue)

    @staticmethod
    def _outcome(request: SolveRequest) -> torch.Tensor:
        if request.error is not None:
            raise request.error
        return request.result

    @torch.inference_mode()
    def _run_all(self, requests: list[SolveRequest], wait: bool = True) -> None:
        groups: dict[tuple, list[SolveRequest]] = {}
        for request in requests:
            groups.setdefault((request.mu.dtype, request.steps), []).append(request)
        for group in groups.values():
            while group:
                batch = self._plan(group)
                del group[: len(batch.requests)]
                self._run_isolated(batch)
        if wait and requests and requests[0].mu.is_cuda:
            # Stay the leader until the GPU has run the batch: the takes that queue meanwhile form the next
            # batch. Released at once, the leader would only enqueue kernels, and every take's chunk would
            # wait for the GPU alone, one after another. (Synchronising releases the interpreter lock.)
            torch.cuda.current_stream(requests[0].mu.device).synchronize()

    def _run_isolated(self, batch: _Batch, again: bool = True) -> None:
        """Run a batch; if it fails, run its requests one by one, so only the one at fault gets the error. A
        lone request that ran out of memory runs once more (`again`), after the allocator's cache went back.

        Only requests without a result are run again: their states were not written back (`finish` sets a
        request's result after its state), so running them again is safe.
        """
        try:
            self._run(batch)
        except BaseException as exc:  # noqa: BLE001 - each take gets its own answer
            unfinished = [request for request in batch.requests if request.result is None]
            out_of_memory = freed_after_out_of_memory(exc)
            if isinstance(exc, Exception) and (len(batch.requests) > 1 or (out_of_memory and again)):
                log.warning("flow: a batch of %d chunks failed (%s); solving them one by one",
                            len(batch.requests), type(exc).__name__)  # fmt: skip
                for request in unfinished:
                    self._run_isolated(self._plan([request]), again=False)
            else:
                for request in unfinished:
                    request.error = exc
        finally:
            for request in batch.requests:
                request.done = True

    def _budget(self, device: torch.device) -> int:
        if self.budget_bytes is None:
            self.budget_bytes = default_arena_bytes(device)
        return self.budget_bytes

    def _plan(self, group: list[SolveRequest]) -> _Batch:
        """The first batch from the head of `group` whose arena fits the budget, in `arena_tries`' order (an
        arena of every Euler step, then of one); a lone request beyond it gets a temporary one-step arena."""
        first = group[0]
        budget = self._budget(first.mu.device)
        # one buffer serves batches of every step and of one: no reason to keep to one kind
        for slots, count in arena_tries(min(len(group), self.max_batch), first.steps):
            chosen = group[:count]
            frames = max(r.frames for r in chosen)
            rows = count
            if self.buckets:  # shapes a captured graph can be replayed for
                frames, rows = bucket_frames(frames), bucket_batch(count)
            cap = max(r.frame0 for r in chosen) + frames
            per_frame = self.layout.bytes_per_frame(slots, 2 * rows, first.mu.dtype)
            if self.buckets:
                cap = bucket_context(cap)
                if self.graphs:
                    key = (rows, frames, cap, first.mu.dtype, slots, autocast_dtype())
                    cap = replayable_context(self._graphs, key, lambda c, p=per_frame: c * p <= budget)
            if cap * per_frame <= budget:
                return _Batch(chosen, rows, frames, cap, first.mu.dtype, first.steps, slots)
        frames, cap = first.frames, first.frame0 + first.frames  # an exact-size arena of a step, freed after
        return _Batch([first], 1, frames, cap, first.mu.dtype, first.steps, 1, oversize=True)

    def _compatible(self, request: SolveRequest) -> ArenaBuffer | None:
        """The shared arena, if it holds this request's dtypes on its device."""
        arena = self._arena
        if arena is None or arena.kv.device != request.mu.device or arena.kv.dtype != request.mu.dtype:
            return None
        return arena if arena.tails.dtype == tails_dtype(request.mu) else None

    # -- one batch ------------------------------------------------------------------------------------
    def _run(self, batch: _Batch) -> None:
        device = batch.requests[0].mu.device
        if batch.oversize:  # a temporary arena of the exact size, freed after
            self._release_shared_for(batch, device)
            arena = self._view(self._allocate(batch, *self._elements(batch), device), batch)
        else:
            arena = self._arena_for(batch, device)
        io = batch_inputs(self.cfm, self.layout, batch.requests, batch.rows, batch.frames, batch.cap, device)
        graphs = self.graphs and (device.type == "cuda" or self._graphs_on_cpu) and not batch.oversize
        if batch.stepwise:
            self._run_stepwise(batch, arena, io, graphs)
        else:
            # a capture runs no pass (EAGER_FIRST): the arena stays as copied until the replay
            copy_in(self.layout, batch.requests, arena)
            if graphs:  # a failed capture leaves the graphs off: eager from then on
                output = self._replay(batch, io)
            else:
                output = solve_batch(self.estimator, self.layout, self.cfm.inference_cfg_rate, arena, io)
            self._copy_out(batch, arena, output)
        self.batches += 1
        self.stepwise_batches += batch.stepwise
        self.requests += len(batch.requests)

    def _run_stepwise(self, batch: _Batch, arena: WorkArena, io: SolveInputs, graphs: bool) -> None:
        """The batch one Euler step at a time through an arena of one step: each step's keys/values are copied
        in from the takes' states and the step's new rows out to them; one graph serves every step (its
        time and size are inputs). Takes' lengths and tails change only once every step has run."""
        x, tails = io.x0, []
        reserve_pages(self.layout, batch.requests, batch.steps, arena.kv)
        for step in range(batch.steps):
            copy_in(self.layout, batch.requests, arena, step)
            one = dataclasses.replace(io, x0=x, t=io.t[step : step + 1], dt=io.dt[step : step + 1])
            if graphs:
                x = self._replay(batch, one)
            else:
                x = solve_batch(self.estimator, self.layout, self.cfm.inference_cfg_rate, arena, one)
            tails.append(arena.tails[0].clone())
            for b, request in enumerate(batch.requests):
                write_rows(request, arena.kv[:, :, :, 2 * b : 2 * b + 2], step)
        tails = torch.stack(tails)  # [steps, 2B, channels, 2 x left]
        for b, request in enumerate(batch.requests):
            result = x[b : b + 1, :, : request.frames].clone()
            finish(self.layout, request, tails[:, 2 * b : 2 * b + 2], result)

    def _release_shared_for(self, batch: _Batch, device: torch.device) -> None:
        """Free the shared arena (and its graphs) when it and `batch`'s own arena would not fit the budget
        together: the two are never allocated beyond it side by side."""
        arena = self._arena
        if arena is None:
            return
        own = batch.cap * self.layout.bytes_per_frame(batch.slots, 2 * batch.rows, batch.dtype)
        shared = arena.kv.numel() * arena.kv.element_size() + arena.tails.numel() * arena.tails.element_size()
        if own + shared <= self._budget(device):
            return
        log.info("flow: work arena let go for a lone chunk of %d context frames", batch.cap)
        self._arena = None
        let_go_of_buffer(self._graphs, device)

    def _arena_for(self, batch: _Batch, device: torch.device) -> WorkArena:
        """The shared arena viewed in this batch's shape; made larger (twice its size at least, within the
        budget) when it cannot hold the batch."""
        arena = self._compatible(batch.requests[0])
        kv, tails = self._elements(batch)
        if arena is None or arena.kv.numel() < kv or arena.tails.numel() < tails:
            if arena is not None:
                kv = grown_size(arena.kv.numel(), kv, self._budget(device) // arena.kv.element_size())
                tails = max(tails, 2 * arena.tails.numel())
            log.info(
                "flow: work arena of %.2f GiB for %d CFG rows x %d context frames x %d Euler steps and smaller; "
                "%d CUDA graphs dropped",
                kv * torch.empty((), dtype=batch.dtype).element_size() / 2**30,
                2 * batch.rows,
                batch.cap,
                batch.slots,
                len(self._graphs),
            )
            arena = self._arena = None  # freed before the larger one is made, not beside it
            let_go_of_buffer(self._graphs, device)
            arena = self._arena = self._allocate(batch, kv, tails, device)
        return self._view(arena, batch)

    def _elements(self, batch: _Batch) -> tuple[int, int]:
        """(key/value, tail) elements of the batch's arena view."""
        rows = 2 * batch.rows
        kv = math.prod(self.layout.state_shape(batch.slots, rows, batch.cap))
        return kv, math.prod(self.layout.tail_shape(batch.slots, rows))

    def _view(self, arena: ArenaBuffer, batch: _Batch) -> WorkArena:
        return arena.view(self.layout, batch.slots, 2 * batch.rows, batch.cap)

    @property
    def keeps_inputs(self) -> bool:
        return self.layout.inputs

    @property
    def captures(self) -> int:
        """CUDA graphs captured (each costs about one eager pass plus the capture)."""
        return self._graphs.captures

    def _allocate(self, batch: _Batch, kv: int, tails: int, device: torch.device) -> ArenaBuffer:
        return ArenaBuffer.zeros(kv, tails, batch.requests[0].mu, device)

    def _copy_out(self, batch: _Batch, arena: WorkArena, output: torch.Tensor) -> None:
        """Each request's new rows into its take's pages, then its length, tails and result."""
        for b, request in enumerate(batch.requests):
            rows = slice(2 * b, 2 * b + 2)
            write_rows(request, arena.kv[:, :, :, rows])
            finish(self.layout, request, arena.tails[:, rows], output[b : b + 1, :, : request.frames].clone())

    def _replay(self, batch: _Batch, io: SolveInputs) -> torch.Tensor:
        """The batch solved through its shape's CUDA graph (`ShapeGraphs`: eager until the shape recurs)."""
        weights = next(self.estimator.parameters())
        fingerprint = (weights.data_ptr(), weights.dtype, self._arena.kv.data_ptr())
        compute = autocast_dtype()
        key = (batch.rows, batch.frames, batch.cap, batch.dtype, io.t.shape[0], compute)
        inputs = tuple(getattr(io, name) for name in SolveInputs.__dataclass_fields__)
        return self._graphs(key, fingerprint, inputs, lambda: autocast_context(compute))[0]

    def _solve_static(self, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor]:
        """`solve_batch` over the shared arena's view for these inputs' rows and context (what graphs run)."""
        io = SolveInputs(*inputs)
        arena = self._arena.view(self.layout, io.t.shape[0], 2 * io.x0.shape[0], io.bias.shape[-1])
        return (solve_batch(self.estimator, self.layout, self.cfm.inference_cfg_rate, arena, io),)


_solvers_lock = threading.Lock()


def solver_for(cfm: nn.Module) -> EstimatorSolver:
    """The flow's one solver (CUDA graphs when the loader attached graphs to `cfm`)."""
    with _solvers_lock:
        graphs = getattr(cfm, "graphs", None) is not None
        solver = getattr(cfm, "_solver", None)
        if solver is None or solver.graphs != graphs:
            solver = cfm._solver = EstimatorSolver(cfm, graphs)
        return solver


def solver_stats(flow: nn.Module) -> dict[str, int]:
    """Counters of the flow's solver (batches, requests, captures, stepwise batches); zeros before first use."""
    solver = getattr(getattr(flow, "decoder", None), "_solver", None)
    names = ("batches", "requests", "captures", "stepwise_batches")
    return {name: 0 if solver is None else getattr(solver, name) for name in names}
