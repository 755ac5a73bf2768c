"""What a tick of the batched flow solve costs when takes keep attention inputs instead of keys/values
(`STUDIO_FLOW_STATE_INPUTS`), on CosyVoice2's full-size flow with random weights (no folder, no vLLM).

For each kind of state (keys/values, inputs) and each batch of B takes whose states already hold P frames, one
solve of a new chunk of --chunk-frames frames per take (10 Euler steps with CFG, as the chunk scheduler runs it:
buckets, CUDA graphs, the arena within --arena-gib) is timed: its first (eager) call, then the median of
--replays replays once captured (the second call captures). The states are not advanced (the chunk commits nothing), so every call sees
the same context. A configuration whose states would not fit in --states-gib is reported as not fitting: that is
the point of the leaner state. Prints per configuration the solve time, the audio seconds it makes per second,
the states' and the arena's bytes.

A kind ending in "+compile" (--kinds kv,kv+compile) runs the estimator's Euler step (`batched_solve._estimate`)
compiled by torch.compile (inductor, dynamic shapes) inside the same CUDA graphs: its first call includes the
compiles (three per kind: the step's weights cached on first use, step 0, the later steps), and its mel is
compared with the uncompiled kind's on the same states (`max_error`, relative to the mel's range; list the
uncompiled kind first). On this CPU (2 cores, fp32) the full-size step took 614 s to compile, matched to 7e-7,
and replayed in 12.5 s against 1.07 s uncompiled: a GPU's figure is what the option is for.

With --profile B,C, one configuration (B takes, C frames of context) is also solved eagerly per kind under
torch.profiler and under torch's FLOP counter: the CUDA kernels that took the most time, and the solve's FLOPs
against its time (how far it is from what the card can do), go to the report.

Usage: python benchmarks/probes/flow_state_cost.py [--batches 16,32,64] [--contexts 300,1000]
       [--chunk-frames 100] [--arena-gib 16] [--states-gib GIB] [--device cuda] [--profile 32,1000]
       [--kinds kv,inputs,kv+compile,inputs+compile] [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from studio.tts.fabricate.builder import full_size_section
from studio.tts.flow.streaming import batched_solve
from studio.tts.flow.streaming.batched_solve import EstimatorState
from studio.tts.flow.streaming.solver import EstimatorSolver, SolveRequest
from studio.tts.memory import STATE_STEPS

GIB = 2**30
MEL_FRAMES_PER_SECOND = 50
_PLAIN_ESTIMATE = batched_solve._estimate


@functools.cache
def _compiled_estimate():
    return torch.compile(_PLAIN_ESTIMATE, dynamic=True)


@contextmanager
def estimate_compiled(on: bool):
    """`solve_batch`'s Euler step compiled by inductor while the block runs (`on`), else as the studio runs it."""
    batched_solve._estimate = _compiled_estimate() if on else _PLAIN_ESTIMATE
    try:
        yield
    finally:
        batched_solve._estimate = _PLAIN_ESTIMATE


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def states(solver: EstimatorSolver, batch: int, frames: int, device: str, dtype) -> list[EstimatorState]:
    """`batch` states holding `frames` frames of random rows each (what the solve reads; values do not matter)."""
    made = []
    for _ in range(batch):
        state = EstimatorState(inputs=solver.keeps_inputs)
        shape = solver.layout.state_shape(STATE_STEPS, 2, frames)
        state.write(torch.randn(shape, device=device, dtype=dtype), 0, frames)
        state.length = state.written = frames
        made.append(state)
    return made


def states_bytes(solver: EstimatorSolver, batch: int, frames: int, dtype) -> int:
    """What `batch` states of `frames` frames hold in the solver's kind."""
    return batch * frames * solver.layout.bytes_per_frame(STATE_STEPS, 2, dtype)


def requests(held: list[EstimatorState], frames: int, chunk: int, device: str, dtype) -> list[SolveRequest]:
    """One chunk per state at its end, committing nothing (the states stay as they are)."""
    generator = torch.Generator().manual_seed(0)
    made = []
    for state in held:
        mu = torch.randn(1, 80, chunk, generator=generator).to(device, dtype)
        spks = torch.randn(1, 80, generator=generator).to(device, dtype)
        made.append(SolveRequest(state, mu, spks, torch.zeros_like(mu), frames, frames, None, STATE_STEPS))
    return made


def timed(solver: EstimatorSolver, held, frames: int, chunk: int, device: str, dtype, mel=None) -> float:
    """Seconds of one solve of a chunk per state; its mel replaces what `mel` (a list) held, on the host."""
    batch = requests(held, frames, chunk, device, dtype)
    sync(device)
    start = time.perf_counter()
    solver.solve_many(batch)
    sync(device)
    failed = [r.error for r in batch if r.error is not None]
    if failed:
        raise failed[0]
    seconds = time.perf_counter() - start
    if mel is not None:
        mel[:] = [r.result.float().cpu() for r in batch]
    return seconds


def write(path: str | None, args, rows: list[dict], device: str, profiles: list[dict]) -> None:
    """The report so far (written after every configuration: a run cut short keeps what it measured)."""
    if not path:
        return
    report = {"probe": "flow_state_cost", "args": vars(args), "torch": torch.__version__, "rows": rows}
    if profiles:
        report["profiles"] = profiles
    if device == "cuda":
        report["device"] = torch.cuda.get_device_name()
    Path(path).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", default="16,32,64")
    parser.add_argument("--contexts", default="300,1000", help="frames each take's state holds")
    parser.add_argument("--chunk-frames", type=int, default=100)
    parser.add_argument("--arena-gib", type=float, default=16.0)
    parser.add_argument(
        "--states-gib", type=float, help="default: what the device holds beside the arena, less 8"
    )
    parser.add_argument("--replays", type=int, default=3)
    parser.add_argument("--profile", help="B,C: profile one eager solve of B takes at C frames per kind")
    parser.add_argument("--kinds", default="kv,inputs", help="of kv, inputs, kv+compile, inputs+compile")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json")
    args = parser.parse_args()
    device, dtype = args.device, torch.float16 if args.device == "cuda" else torch.float32
    if args.states_gib is None:
        total = torch.cuda.get_device_properties(0).total_memory / GIB if device == "cuda" else None
        args.states_gib = 16.0 if total is None else total - args.arena_gib - 8
    torch.manual_seed(0)
    flow = full_size_section("flow").to(device=device, dtype=dtype).eval()
    rows = []
    print(
        f"full CosyVoice2 flow, {device} {dtype}, chunk {args.chunk_frames} frames, arena {args.arena_gib} GiB"
    )
    print(f" {'kind':14s}  takes  context  first s  solve s  audio-s/s  states GiB  arena GiB")
    profiles, kinds = [], args.kinds.split(",")
    unknown = set(kinds) - {"kv", "inputs", "kv+compile", "inputs+compile"}
    if unknown:
        parser.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    if args.profile:
        batch, frames = (int(v) for v in args.profile.split(","))
        for kind in [kind for kind in kinds if "+" not in kind]:
            profiles.append(profiled(flow, kind, batch, frames, args, device, dtype))
            write(args.json, args, rows, device, profiles)
    for batch in [int(b) for b in args.batches.split(",")]:
        for frames in [int(c) for c in args.contexts.split(",")]:
            mels: dict[str, list[torch.Tensor]] = {}
            for kind in kinds:  # side by side: a run cut short keeps pairs
                rows.append(measure(flow, kind, batch, frames, args, device, dtype, mels))
                write(args.json, args, rows, device, profiles)
                if device == "cuda":
                    torch.cuda.empty_cache()
    if args.json:
        print(f"wrote {args.json}")


def measure(flow, kind: str, batch: int, frames: int, args, device: str, dtype, mels: dict) -> dict:
    """One configuration on a solver of its own (its arena and graphs go with it), printed as a row; `mels`
    keeps each uncompiled kind's mel, which its compiled twin is compared with."""
    plain, compiled = kind.removesuffix("+compile"), kind.endswith("+compile")
    solver = EstimatorSolver(flow.decoder, graphs=device == "cuda", keeps_inputs=plain == "inputs")
    solver.budget_bytes = int(args.arena_gib * GIB)
    need = states_bytes(solver, batch, frames, dtype)
    row = {"kind": kind, "takes": batch, "context_frames": frames, "states_bytes": need}
    if need > args.states_gib * GIB:
        print(f" {kind:14s}  {batch:5d}  {frames:7d}  does not fit ({need / GIB:.0f} GiB of states)")
        return {**row, "fits": False}
    torch.manual_seed(batch * 100_003 + frames)  # the same states for every kind of a configuration
    with torch.inference_mode(), estimate_compiled(compiled):
        held = states(solver, batch, frames, device, dtype)
        chunk = args.chunk_frames
        times = [timed(solver, held, frames, chunk, device, dtype) for _ in range(2)]  # eager, then captured
        replays, mel = [], []
        for _ in range(args.replays):
            replays.append(timed(solver, held, frames, chunk, device, dtype, mel))
    solve = statistics.median(replays)
    if compiled and plain in mels:
        reference = torch.cat(mels[plain])
        error = (torch.cat(mel) - reference).abs().max() / (reference.max() - reference.min())
        row["max_error"] = float(error)
    else:
        mels[plain] = mel
    audio = batch * chunk / MEL_FRAMES_PER_SECOND / solve
    arena = solver._arena.kv.nbytes if solver._arena is not None else 0
    stepwise = " (a step at a time)" if solver.stepwise_batches else ""
    error = f"  mel error {row['max_error']:.2e}" if "max_error" in row else ""
    print(
        f" {kind:14s}  {batch:5d}  {frames:7d}  {times[0]:7.3f}  {solve:7.3f}  {audio:9.1f}"
        f"  {need / GIB:10.1f}  {arena / GIB:9.1f}{stepwise}{error}"
    )
    return {
        **row,
        "fits": True,
        "first_s": times[0],
        "solve_s": solve,
        "replays_s": replays,
        "audio_seconds_per_second": audio,
        "arena_bytes": arena,
        "stepwise_batches": solver.stepwise_batches,
    }


def profiled(flow, kind: str, batch: int, frames: int, args, device: str, dtype) -> dict:
    """One eager solve (no graphs) under torch.profiler, then under the FLOP counter: its kernels and FLOPs."""
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    solver = EstimatorSolver(flow.decoder, graphs=False, keeps_inputs=kind == "inputs")
    solver.budget_bytes = int(args.arena_gib * GIB)
    need = states_bytes(solver, batch, frames, dtype)
    if need > args.states_gib * GIB:
        print(f"== {kind}: {batch} takes at {frames} frames do not fit ({need / GIB:.0f} GiB of states)")
        return {"kind": kind, "takes": batch, "context_frames": frames, "fits": False}
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.inference_mode():
        held = states(solver, batch, frames, device, dtype)
        timed(solver, held, frames, args.chunk_frames, device, dtype)  # warm: allocations, kernels
        seconds = timed(solver, held, frames, args.chunk_frames, device, dtype)
        with profile(activities=activities) as prof:
            timed(solver, held, frames, args.chunk_frames, device, dtype)
        with FlopCounterMode(display=False) as counter:
            timed(solver, held, frames, args.chunk_frames, device, dtype)
    sort = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=18, max_name_column_width=60)
    flops = counter.get_total_flops()
    print(
        f"== {kind}: {batch} takes at {frames} frames, eager solve {seconds:.3f} s, "
        f"{flops / 1e12:.2f} TFLOP ({flops / seconds / 1e12:.1f} TFLOP/s)"
    )
    print(table)
    del held
    if device == "cuda":
        torch.cuda.empty_cache()
    return {
        "kind": kind,
        "takes": batch,
        "context_frames": frames,
        "eager_s": seconds,
        "flops": flops,
        "kernels": table,
    }


if __name__ == "__main__":
    main()
