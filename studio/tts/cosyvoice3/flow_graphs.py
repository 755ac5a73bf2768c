"""CosyVoice3's streamed-flow solve with static shapes, replayed as CUDA graphs (`DiTGraphSolver`).

On a GPU the DiT's Euler solve is bound by kernel launches: a traced 4 s take on an H200 launched 37,474
kernels, 555 ms of host time against 148 ms of GPU time. A CUDA graph replays them in one launch, but needs
fixed shapes and addresses, which each take's own growing key/value buffers do not have. So a batch of
takes' calls (`FramePlan`s) runs the way CosyVoice2's batched solve does (tts/flow/streaming/solver.py):

- each call's kept keys and values (its frames before `start`) and its position convolutions' left inputs
  are copied into a shared work arena, one pair of CFG rows per take;
- its new frames are padded to a bucket (`bucket_frames`) and the takes to a batch bucket (`bucket_batch`);
  every row writes each step's keys and values at its own absolute frames and attends through its own
  additive bias (its chunk mask, and nothing at or after its last real frame), so padding changes no real
  frame: the position convolutions are causal, the norms and feed-forward work per frame;
- a shape's solve (every Euler step and block) runs eagerly at its first call and is captured at its next,
  or while the flow's scheduler is idle (`ShapeGraphs`), then replayed;
- the new frames' keys and values, and the convolutions' left inputs before the new kept boundary, are
  copied back into each take's state, which then stands exactly as after `solve_plans`.

The arena is one flat buffer that each batch views in its own shape: its Euler step slots, CFG rows and
context (`bucket_context` of its latest frame: 512, 768, 1024, 1536, ...), so short takes' batches hold more
rows and attend over less than a long take's. It grows by doubling (dropping its graphs) within a byte budget
(``STUDIO_FLOW_BATCH_MB``, else a fifth of the GPU, or the VRAM plan's flow arena). A batch is split down to
four takes with an arena of every Euler step, then runs a step at a time through an arena of one step (a tenth
of the bytes; one graph, with the step's modulations as inputs, serves every step; `arena_tries`), and a call
too large for it alone runs eagerly (`solve_plans`), which needs no arena. Off CUDA the solver runs the same
static solve (flow_static.py) without graphs (what the tests compare).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from studio import envs
from studio.tts.cosyvoice3.dit import DiT
from studio.tts.cosyvoice3.flow_solve import CFG_ROWS, FramePlan, solve_plans
from studio.tts.cosyvoice3.flow_static import DiTArena, DiTSolveInputs, solve_static
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
from studio.tts.device.transfer import to_device
from studio.tts.device.vram_budget import arena_tries, default_arena_bytes

log = logging.getLogger(__name__)

GRAPHS_KEPT = 48
EAGER_FIRST = 1  # a shape runs eagerly once before its capture, which then needs no warm-up pass
DEFAULT_MAX_BATCH = 32  # takes per solve, as CosyVoice2's (``STUDIO_FLOW_MAX_BATCH``)


# -- batching, the arena and the graphs ---------------------------------------------------------------------
@dataclass
class _Batch:
    plans: list[FramePlan]
    rows: int  # takes, padded
    frames: int  # frames per take, padded
    cap: int  # context frames of the arena view the solve reads
    steps: int  # Euler steps of the solve
    slots: int  # Euler steps the arena holds: all (one pass), or 1 (a step at a time)


class DiTGraphSolver:
    """Solves `FramePlan`s as `solve_plans` does, in padded batches over a shared arena, replayed as CUDA
    graphs when `graphs` (on CUDA, or anywhere with a stand-in `capture`)."""

    def __init__(
        self,
        cfm: nn.Module,
        graphs: bool = True,
        max_batch: int | None = None,
        budget_bytes: int | None = None,
        capture=capture_graph,
    ):
        self.cfm = cfm
        self.estimator: DiT = cfm.estimator
        self.graphs = graphs
        configured = envs.FLOW_MAX_BATCH.count()
        self.max_batch = int(max_batch or configured or DEFAULT_MAX_BATCH)
        self.budget_bytes = budget_bytes
        self._arena: DiTArena | None = None  # flat: `kv` and `left` 1-D, viewed per batch (`_shaped`)
        self._graphs = ShapeGraphs(
            "CosyVoice3 flow solve", self._run_static, GRAPHS_KEPT, eager_first=EAGER_FIRST, capture=capture
        )
        self._graphs_anywhere = capture is not capture_graph  # a stand-in capture (tests)
        self._lock = threading.Lock()  # takes without a scheduler may call from their own threads
        blocks = self.estimator.transformer_blocks
        self._heads, self._dim_head = blocks[0].attn.heads, blocks[0].attn.dim_head
        self._width = self.estimator.proj_out.in_features
        self._kernel = self.estimator.input_embed.conv_pos_embed.kernel_size
        self.batches = self.requests = self.eager_calls = self.stepwise_batches = 0
        self.failed = (
            False  # the graphed solve failed once: every call is solved eagerly (`_run_or_fall_back`)
        )
        self._wrote = False  # the batch being run has written a state back

    @property
    def captures(self) -> int:
        return self._graphs.captures

    def solve(self, plans: Sequence[FramePlan]) -> list[torch.Tensor]:
        """Each plan's frames [1, 80, count] in the flow's dtype; the plans' states as `solve_plans` leaves
        them."""
        plans = list(plans)
        if not plans:
            return []
        results: dict[int, torch.Tensor] = {}
        order = sorted(range(len(plans)), key=lambda i: plans[i].count)  # like lengths pad least together
        with self._lock, torch.inference_mode():
            while order:
                batch = None if self.failed else self._plan([plans[i] for i in order[: self.max_batch]])
                if batch is None:  # too large for the budget alone (or no graphed solve): its own buffers
                    index = order.pop(0)
                    results[index] = solve_plans(self.estimator, [plans[index]], self._rate)[0]
                    self.eager_calls += 1
                    continue
                taken, order = order[: len(batch.plans)], order[len(batch.plans) :]
                for index, mel in zip(taken, self._run_or_fall_back(batch), strict=True):
                    results[index] = mel
        return [results[i] for i in range(len(plans))]

    def _run_or_fall_back(self, batch: _Batch) -> list[torch.Tensor]:
        """`_run`; if it fails before writing any state back, the solver lets its arena and graphs go and
        solves this batch, and every call after it, with `solve_plans` (logged once): a fault of the graphed
        path costs speed, not takes. A failure after a write-back is raised (the states are then unknown)."""
        self._wrote = False
        try:
            return self._run(batch)
        except Exception:
            if self._wrote:
                raise
            log.warning(
                "CosyVoice3 flow: the graphed solve failed; solving eagerly from now on", exc_info=True
            )
            self.failed, self._arena = True, None
            self._graphs.drop()
            return solve_plans(self.estimator, batch.plans, self._rate)

    @property
    def _rate(self) -> float:
        return self.cfm.inference_cfg_rate

    def _budget(self, device: torch.device) -> int:
        if self.budget_bytes is None:
            self.budget_bytes = default_arena_bytes(device)
        return self.budget_bytes

    def arena_bytes(self, rows: int, cap: int, steps: int, dtype: torch.dtype) -> int:
        """Bytes of an arena of `rows` CFG rows, `cap` context frames and `steps` Euler step slots."""
        return sum(self._elements(steps, rows, cap)) * torch.empty((), dtype=dtype).element_size()

    def _plan(self, plans: list[FramePlan]) -> _Batch | None:
        """The first batch from the head of `plans` whose arena view fits the budget, in `arena_tries`' order
        (an arena of every Euler step, then of one: a tenth of the bytes); None when not even the first plan's
        does."""
        first = plans[0]
        steps, dtype, device = first.state.step_sizes.shape[0], first.x.dtype, first.x.device
        budget = self._budget(device)
        for slots, count in arena_tries(len(plans), steps):  # one buffer serves both
            chosen = plans[:count]
            rows, frames = bucket_batch(count), bucket_frames(max(plan.count for plan in chosen))
            cap = bucket_context(max(plan.start for plan in chosen) + frames)
            if self.graphs:
                key = (rows, frames, cap, dtype, slots, autocast_dtype())
                fits = lambda c, r=rows, s=slots: self.arena_bytes(2 * r, c, s, dtype) <= budget  # noqa: E731
                cap = replayable_context(self._graphs, key, fits)
            if self.arena_bytes(2 * rows, cap, slots, dtype) <= budget:
                return _Batch(chosen, rows, frames, cap, steps, slots)
        return None

    def _arena_for(self, batch: _Batch, dtype: torch.dtype, device: torch.device) -> DiTArena:
        """The shared arena viewed in the batch's shape; made larger (twice its size at least, within the
        budget; its graphs dropped) when it cannot hold the view."""
        kv, left = self._elements(batch.slots, 2 * batch.rows, batch.cap)
        arena = self._arena
        if arena is not None and (arena.kv.device != device or arena.kv.dtype != dtype):
            arena = None
        if arena is None or arena.kv.numel() < kv or arena.left.numel() < left:
            if arena is not None:
                limit = self._budget(device) // arena.kv.element_size() - 2 * left
                kv, left = grown_size(arena.kv.numel(), kv, limit), max(left, 2 * arena.left.numel())
            log.info(
                "CosyVoice3 flow: work arena of %.2f GiB for %d CFG rows x %d frames x %d Euler steps and smaller",
                kv * torch.empty((), dtype=dtype).element_size() / 2**30,
                2 * batch.rows,
                batch.cap,
                batch.slots,
            )
            arena = self._arena = None  # freed before the new one is made, not beside it
            let_go_of_buffer(self._graphs, device)
            self._arena = arena = self._allocate(kv, left, dtype, device)
        return self._shaped(batch.slots, 2 * batch.rows, batch.cap)

    def _elements(self, slots: int, rows: int, cap: int) -> tuple[int, int]:
        """(key/value, left input) elements of an arena of `slots` steps, `rows` CFG rows, `cap` frames."""
        blocks = len(self.estimator.transformer_blocks)
        kv = slots * blocks * 2 * rows * self._heads * cap * self._dim_head
        return kv, slots * 2 * rows * self._width * (self._kernel - 1)

    def _shaped(self, slots: int, rows: int, cap: int) -> DiTArena:
        """The buffer's first elements as an arena of `slots` Euler steps, `rows` CFG rows and `cap` frames of
        context (what a batch of that shape copies into, solves over and copies out of)."""
        blocks, (kv, left) = len(self.estimator.transformer_blocks), self._elements(slots, rows, cap)
        return DiTArena(
            self._arena.kv[:kv].view(slots, blocks, 2, rows, self._heads, cap, self._dim_head),
            self._arena.left[:left].view(slots, 2, rows, self._width, self._kernel - 1),
        )

    def _allocate(self, kv: int, left: int, dtype: torch.dtype, device: torch.device) -> DiTArena:
        """A zeroed flat buffer of `kv` key/value and `left` left-input elements (zeros: what a view holds
        beyond what was copied in is masked, and must be finite)."""
        return DiTArena(
            torch.zeros(kv, dtype=dtype, device=device), torch.zeros(left, dtype=dtype, device=device)
        )

    def _run(self, batch: _Batch) -> list[torch.Tensor]:
        first = batch.plans[0]
        dtype, device = first.x.dtype, first.x.device
        arena = self._arena_for(batch, dtype, device)
        io = self._inputs(batch, device)
        graphs = self.graphs and (device.type == "cuda" or self._graphs_anywhere)
        if batch.slots == batch.steps:
            self._copy_in(batch, arena, slice(None))
            output = (
                self._replay(batch, io, dtype)
                if graphs
                else solve_static(self.estimator, self._rate, arena, io)
            )
            self._copy_out(batch, arena, slice(None))
        else:  # a step at a time: the step's keys/values in, its solve (one graph for every step), its rows out
            output = io.x
            for step in range(batch.steps):
                steps = slice(step, step + 1)
                self._copy_in(batch, arena, steps)
                one = dataclasses.replace(
                    io,
                    x=output,
                    block_modulation=io.block_modulation[steps],
                    final_modulation=io.final_modulation[steps],
                    step_sizes=io.step_sizes[steps],
                )
                output = (
                    self._replay(batch, one, dtype)
                    if graphs
                    else solve_static(self.estimator, self._rate, arena, one)
                )
                self._copy_out(batch, arena, steps)
            self.stepwise_batches += 1
        for plan in batch.plans:
            plan.state.kept = plan.kept
        self.batches += 1
        self.requests += len(batch.plans)
        return [output[row : row + 1, : plan.count].transpose(1, 2) for row, plan in enumerate(batch.plans)]

    @staticmethod
    def _copy_in(batch: _Batch, arena: DiTArena, steps: slice) -> None:
        """Each take's kept keys/values and position-convolution inputs of these Euler steps into its rows."""
        for row, plan in enumerate(batch.plans):
            state, rows, kept = plan.state, slice(CFG_ROWS * row, CFG_ROWS * (row + 1)), plan.start
            arena.kv[:, :, 0, rows, :, :kept] = state.keys[steps, :, :, :, :kept]
            arena.kv[:, :, 1, rows, :, :kept] = state.values[steps, :, :, :, :kept]
            arena.left[:, :, rows] = state.position_left[steps]

    def _copy_out(self, batch: _Batch, arena: DiTArena, steps: slice) -> None:
        """Each take's new frames' keys/values and its position-convolution inputs of these Euler steps back
        into its state, as `solve_plans` leaves them."""
        self._wrote = True
        for row, plan in enumerate(batch.plans):
            state, rows, new = (
                plan.state,
                slice(CFG_ROWS * row, CFG_ROWS * (row + 1)),
                slice(plan.start, plan.frames),
            )
            state.keys[steps, :, :, :, new] = arena.kv[:, :, 0, rows, :, new]
            state.values[steps, :, :, :, new] = arena.kv[:, :, 1, rows, :, new]
            state.position_left[steps] = arena.left[:, :, rows]

    def _inputs(self, batch: _Batch, device: torch.device) -> DiTSolveInputs:
        first, rows, frames = batch.plans[0], 2 * batch.rows, batch.frames
        x = first.x.new_zeros(batch.rows, frames, first.x.shape[2])
        conditions = first.conditions.new_zeros(rows, frames, first.conditions.shape[2])
        angles = first.angles.new_zeros(rows, frames, first.angles.shape[1])
        start = torch.zeros(rows, 1, dtype=torch.int64)
        end = torch.zeros(rows, 1, dtype=torch.int64)
        kept = torch.zeros(rows, 1, dtype=torch.int64)
        for row, plan in enumerate(batch.plans):
            pair = slice(CFG_ROWS * row, CFG_ROWS * (row + 1))
            x[row, : plan.count] = plan.x[0]
            conditions[pair, : plan.count] = plan.conditions
            angles[pair, : plan.count] = plan.angles
            start[pair], end[pair], kept[pair] = plan.start, plan.frames, plan.kept - plan.start
        write = start + torch.arange(frames)  # padded rows: frames 0.. of their own rows
        chunk = self.estimator.static_chunk_size
        chunk_end = (torch.div(write, chunk, rounding_mode="floor") + 1) * chunk
        limit = torch.minimum(chunk_end, torch.maximum(end, write + 1))  # a padded query sees itself
        columns = kept + torch.arange(self._kernel - 1)
        state = first.state
        return DiTSolveInputs(
            x,
            conditions,
            angles,
            to_device(write, device),
            to_device(limit, device),
            to_device(columns, device),
            to_device(torch.arange(batch.cap), device),
            state.block_modulation,
            state.final_modulation,
            state.step_sizes,
        )

    def _replay(self, batch: _Batch, io: DiTSolveInputs, dtype: torch.dtype) -> torch.Tensor:
        weights = self.estimator.proj_out.weight
        fingerprint = (weights.data_ptr(), weights.dtype, self._arena.kv.data_ptr())
        compute = autocast_dtype()
        key = (batch.rows, batch.frames, batch.cap, dtype, io.step_sizes.shape[0], compute)
        inputs = tuple(getattr(io, name) for name in DiTSolveInputs.__dataclass_fields__)
        return self._graphs(key, fingerprint, inputs, lambda: autocast_context(compute))[0]

    def _run_static(self, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor]:
        """`solve_static` over the shared arena's rows for these inputs (what a graph captures)."""
        io = DiTSolveInputs(*inputs)
        arena = self._shaped(io.step_sizes.shape[0], io.conditions.shape[0], io.context.shape[0])
        return (solve_static(self.estimator, self._rate, arena, io),)


def solve_calls(flow: nn.Module, plans: Sequence[FramePlan]) -> list[torch.Tensor]:
    """`solve_plans` for the flow's plans, through its `DiTGraphSolver` when one is attached."""
    solver = getattr(flow.decoder, "dit_solver", None)
    if solver is None:
        return solve_plans(flow.decoder.estimator, plans, flow.decoder.inference_cfg_rate)
    return solver.solve(plans)


def attach_dit_graphs(flow: nn.Module, enabled: bool = True, **options) -> DiTGraphSolver | None:
    """Solve the flow's streamed calls through a `DiTGraphSolver` (``options`` its own), or stop (``enabled``
    False): each take's calls then run eagerly with `solve_plans`."""
    flow.decoder.dit_solver = DiTGraphSolver(flow.decoder, **options) if enabled else None
    return flow.decoder.dit_solver


def dit_flow_stats(flow: nn.Module, hift: nn.Module | None = None) -> dict[str, int]:
    """CosyVoice3's flow counters under CosyVoice2's names (`solver_stats`, `scheduler_stats`): solves run
    (`batches`) and calls served (`requests`), by the graphed solver when attached, else by the scheduler's
    batches; CUDA graphs captured (`captures`; `idle_captures` by the idle scheduler), calls solved eagerly
    for want of arena (`eager_calls`), solves run a step at a time (`stepwise_batches`), and the scheduler's
    batches and calls (`dit_batches`, `dit_calls`); with `hift`, its batched network's captures."""
    solver = getattr(flow.decoder, "dit_solver", None)
    scheduler = getattr(flow, "_dit_flow_scheduler", None)
    ticks, jobs = (0, 0) if scheduler is None else (scheduler.batches, scheduler.calls)
    return {
        "batches": ticks if solver is None else solver.batches,
        "requests": jobs if solver is None else solver.requests,
        "captures": 0 if solver is None else solver.captures,
        "eager_calls": 0 if solver is None else solver.eager_calls,
        "stepwise_batches": 0 if solver is None else solver.stepwise_batches,
        "idle_captures": 0 if scheduler is None else scheduler.idle_captures,
        "dit_batches": ticks,
        "dit_calls": jobs,
        "hift_captures": getattr(getattr(hift, "spectrum_graphs", None), "captures", 0),
    }
