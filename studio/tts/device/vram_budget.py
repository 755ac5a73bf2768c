"""One VRAM budget, split: vLLM's engine, the flow's shared work arena, and the takes' own states.

The studio runs beside the desktop on the user's card, so it takes a budget (``vram_budget_gb``; default
80% of the memory free when the engine starts) and sizes everything from it: vLLM's share of the card
(``gpu_memory_utilization``), the flow solver's arena, and what per-take states may hold together (a
`TakeGate` admits takes against it: beyond it they queue). This process's PyTorch allocations are capped at
its part (``set_per_process_memory_fraction``), so a budget smaller than the card behaves like a smaller
card (``bench --vram-budget 24`` on an H200 is a 24 GB card) and an out-of-memory fails one take, not the
engine.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from studio import envs
from studio.tts.device.prompt_caches import budget_bytes

log = logging.getLogger(__name__)

GIB = 2**30
DEFAULT_SHARE_OF_FREE = 0.8  # what the studio takes of the free memory when no budget is given
VLLM_SHARE = 0.15  # of the budget, within [VLLM_MIN, VLLM_MAX]: a 0.5B LM needs little KV cache
VLLM_MIN, VLLM_MAX = 3 * GIB, 8 * GIB
OUTSIDE_ALLOCATOR = 1.5 * GIB  # both processes' CUDA contexts and library workspaces: never PyTorch's to use
ALLOCATOR_SLACK = 0.5 * GIB  # fragmentation inside this process's cap
# The CUDA graphs' private pools (the flow solve's, the encoder's and HiFT's captures): 1.4-1.8 GiB measured on
# the H200 at a 24 GiB budget (results/2026-12-05/README.md); beyond the slack they made long takes fail.
GRAPH_POOLS = 2 * GIB
# Activations outside the arena and the takes' states: HiFT's batch (up to 2048 mel frames at 480 samples
# each, float32), the encoder's batch, the solve's attention scores, cuBLAS workspaces. The take gate fills
# its share to the last byte, so without this the first take to need them fails for memory.
ACTIVATIONS = 2 * GIB
# The flow's arena holds the states of the takes it batches (copied in): half of what is left after vLLM,
# the weights and the reserve lets it batch about as many takes as the other half admits (measured on the
# H200: a 4 GiB arena batched 1.3-1.7 takes at 16-64 streams). `STUDIO_FLOW_ARENA_SHARE` sets it.
ARENA_SHARE = 0.5
# On a small budget the takes' share admits the takes and batches that do not fit an arena of every Euler step
# run a step at a time in a tenth of the bytes: at 24 GiB (H200, `sentences` at 16 streams, one machine) a fifth
# for the arena ran 27.1 audio-s/s against 21.5 with a half, first audio p95 6.1 s against 7.5, 9 takes at once
# against 6, 0 errors both (benchmarks/results/2026-12-05, "H200, stop 46").
SMALL_BUDGET, SMALL_BUDGET_ARENA_SHARE = 32 * GIB, 0.2


class VramBudgetError(ValueError):
    """The budget cannot hold the model; the message says what it needs."""


@dataclass(frozen=True)
class VramPlan:
    """Bytes per consumer; ``total`` is the card's memory."""

    budget: int
    total: int
    resident: int  # this process's weights (and frontend) when the plan was made
    vllm: int
    flow_arena: int
    takes: int
    reserved: int = 0  # the runtime's: CUDA outside PyTorch, slack, graph pools, activations, prompt caches

    @property
    def gpu_memory_utilization(self) -> float:
        """vLLM's share of the whole card (its option is a fraction of the total)."""
        return self.vllm / self.total

    @property
    def process_fraction(self) -> float:
        """This process's PyTorch cap as a fraction of the card: the budget less vLLM's engine process and
        what CUDA holds outside PyTorch's allocator (measured on the H200: without it, a 24 GiB budget
        peaked at 25.8 GiB)."""
        return (self.budget - self.vllm - OUTSIDE_ALLOCATOR) / self.total

    def describe(self) -> str:
        parts = (
            ("vLLM", self.vllm),
            ("weights", self.resident),
            ("flow arena", self.flow_arena),
            ("takes", self.takes),
            ("runtime", self.reserved),
        )
        return f"VRAM budget {self.budget / GIB:.1f} GiB: " + ", ".join(
            f"{n} {b / GIB:.1f}" for n, b in parts
        )


def default_budget(free: int) -> int:
    return int(free * DEFAULT_SHARE_OF_FREE)


def plan_vram(
    budget: int,
    total: int,
    resident: int,
    with_vllm: bool,
    vllm_need: int | None = None,
    arena: bool = True,
) -> VramPlan:
    """Split ``budget`` bytes; raises VramBudgetError when it cannot hold the model and one take.
    ``vllm_need``: the most vLLM can use (its weights, runtime and a KV cache for every sequence at
    full length): its share is never larger, and what it leaves goes to the flow. ``arena=False`` (a flow
    whose batched solve reads the takes' states in place, CosyVoice3's) leaves the takes all of the rest."""
    if budget <= 0:
        raise VramBudgetError("the VRAM budget must be positive")
    if budget > total:
        raise VramBudgetError(
            f"a VRAM budget of {budget / GIB:.1f} GiB is more than the card's {total / GIB:.1f} GiB"
        )
    vllm = int(min(max(budget * VLLM_SHARE, VLLM_MIN), VLLM_MAX)) if with_vllm else 0
    if with_vllm and vllm_need is not None:
        vllm = min(vllm, int(vllm_need))
    reserve = int(OUTSIDE_ALLOCATOR + ALLOCATOR_SLACK + GRAPH_POOLS + ACTIVATIONS + budget_bytes("cuda"))
    rest = budget - vllm - resident - reserve
    if rest < 512 * 2**20:
        raise VramBudgetError(
            f"a VRAM budget of {budget / GIB:.1f} GiB is too small: vLLM needs {vllm / GIB:.1f} GiB, the "
            f"weights {resident / GIB:.1f} GiB and the runtime {reserve / GIB:.1f} GiB, with at "
            "least 0.5 GiB left for takes"
        )
    if not arena:
        return VramPlan(budget, total, resident, vllm, 0, rest, reserve)
    share = envs.FLOW_ARENA_SHARE.number()
    if share is None:
        share = SMALL_BUDGET_ARENA_SHARE if budget <= SMALL_BUDGET else ARENA_SHARE
    if not 0 < share < 1:
        raise VramBudgetError(f"{envs.FLOW_ARENA_SHARE.name} must be between 0 and 1, got {share}")
    arena_bytes = int(rest * share)
    return VramPlan(budget, total, resident, vllm, arena_bytes, rest - arena_bytes, reserve)


def plan_for_device(
    device,
    budget_gb: float | None,
    with_vllm: bool,
    resident: int | None = None,
    vllm_need: int | None = None,
    arena: bool = True,
) -> VramPlan:
    """The plan on a CUDA ``device`` now (``budget_gb`` None: the default share of free memory).
    ``resident``: the bytes this process holds or is about to load (None: what PyTorch holds now); ``arena``:
    as `plan_vram`."""
    import torch

    free, total = device_memory(device)
    budget = default_budget(free) if budget_gb is None else int(budget_gb * GIB)
    if resident is None:
        resident = torch.cuda.memory_allocated(_indexed(device))
    return plan_vram(budget, total, resident, with_vllm, vllm_need, arena)


def device_memory(device) -> tuple[int, int]:
    """(free, total) bytes of a CUDA device. Through NVML while this process has not initialised CUDA (a
    CUDA call now would make vLLM spawn its engine process instead of forking it), else through CUDA."""
    import torch

    device = torch.device(device)
    if not torch.cuda.is_initialized():
        try:
            import pynvml

            handle = torch.cuda._get_pynvml_handler(device.index or 0)  # honours CUDA_VISIBLE_DEVICES
            info = pynvml.nvmlDeviceGetMemoryInfo(handle)
            return int(info.free), int(info.total)
        except Exception as exc:  # noqa: BLE001 - no NVML, or a torch without the helper: ask CUDA
            log.info("NVML cannot read the GPU's memory (%s); asking CUDA", exc)
    return torch.cuda.mem_get_info(_indexed(device))


def cap_process(plan: VramPlan, device) -> None:
    """PyTorch in this process may allocate at most its part of the budget (an OOM beyond, per take)."""
    import torch

    use_expandable_segments()
    torch.cuda.set_per_process_memory_fraction(min(1.0, plan.process_fraction), _indexed(device))


def freed_after_out_of_memory(error: BaseException) -> bool:
    """True when `error` is PyTorch running out of GPU memory; the allocator's cached free blocks then go back
    to CUDA, so that running the work again (alone, or as it was) can allocate them in the sizes it needs."""
    import torch

    if not isinstance(error, torch.OutOfMemoryError):
        return False
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    return True


def use_expandable_segments() -> bool:
    """This process's CUDA allocations from now on in expandable segments (True), unless the user configured
    PyTorch's allocator (``PYTORCH_CUDA_ALLOC_CONF``) or ``STUDIO_EXPANDABLE_SEGMENTS=0`` turned it off.

    Under the cap, fixed segments fragment: in the 24 GiB server run (H200, benchmarks/results/2026-12-05) takes
    failed for want of 140 MiB while 1.3 GiB sat reserved but unallocated in pieces. An expandable segment maps
    freed pages back into one address range, so what one take freed serves any size the next needs. (The CUDA
    graphs' private pools keep their own segments.)"""
    import torch

    if os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or not envs.EXPANDABLE_SEGMENTS.enabled():
        return False
    settings = getattr(torch._C, "_accelerator_setAllocatorSettings", None) or getattr(
        torch.cuda.memory, "_set_allocator_settings", None
    )
    if settings is None:  # a PyTorch without the switch: fixed segments
        log.info("this PyTorch cannot switch to expandable segments")
        return False
    try:
        settings("expandable_segments:True")
    except RuntimeError as exc:  # a PyTorch that refuses the switch once CUDA is in use: fixed segments
        log.info("expandable segments stay off: %s", exc)
        return False
    return True


def _indexed(device):
    """``cuda`` -> ``cuda:N`` (the current device): the memory calls need an index."""
    import torch

    device = torch.device(device)
    return device if device.index is not None else torch.device("cuda", torch.cuda.current_device())


def default_arena_bytes(device) -> int:
    """A flow work arena's budget without a VRAM plan: ``STUDIO_FLOW_BATCH_MB``, else a fifth of the GPU's
    memory (1 GB on the CPU)."""
    import torch

    configured = envs.FLOW_BATCH_MB.number()
    if configured is None and device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory / 5)
    return int((1024 if configured is None else configured) * 2**20)


# A batched flow solve keeps an arena of every Euler step down to batches of this many takes (one replay and one
# copy of each take's pages a batch); a batch that would have to be smaller runs a step at a time instead (an
# arena of one step, a tenth of the bytes, but ten replays and each take's pages copied once per step).
ONE_PASS_FLOOR = 4


def arena_tries(count: int, steps: int) -> list[tuple[int, int]]:
    """(Euler step slots, takes) a batched solve tries in turn for `count` takes queued, until one fits its
    budget: every step down to `ONE_PASS_FLOOR` takes, then one step down to a single take (both kinds view
    the one arena)."""

    def halving(floor: int) -> list[int]:
        sizes = [count]
        while sizes[-1] > floor:
            sizes.append(max(floor, sizes[-1] // 2))
        return sizes

    one_step = [(1, size) for size in halving(1)]
    if steps == 1:
        return one_step
    return [(steps, size) for size in halving(min(count, ONE_PASS_FLOOR))] + one_step
