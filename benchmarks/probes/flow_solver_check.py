"""GPU check and timing of the streaming flow's batched solve (tts/flow/streaming/solver.py) on a model folder.

For float32 and float16 weights: (1) streams rendered through the CUDA-graph solver equal the eager solver
(same chunks, solved one take at a time, exact shapes); (2) the time per streamed chunk when 1, 4 or 16 takes
render concurrently (they batch), graphs against eager, after a warm-up round. `graphs-stepwise` is the graph
solver on an arena budget of one Euler step for 16 takes at 512 frames: batches of more than one take run a step
at a time (`EstimatorSolver._run_stepwise`); its check runs one take a step at a time. Prompts are 3 s (75 tokens),
taken from a warmed prompt cache as in the studio; each take renders 4 chunks of 25 tokens plus its end.

Usage: python benchmarks/probes/flow_solver_check.py --model /tmp/full [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import torch

from studio.model_layout import BLANKEN_DIR, YAML_FILE
from studio.tts.config import read_config
from studio.tts.flow.streaming.incremental import IncrementalFlow
from studio.tts.flow.streaming.prompt_cache import PromptFlowCache
from studio.tts.flow.streaming.solver import EstimatorSolver
from studio.tts.loader import attach_cuda_graphs, load_flow

PROMPT_TOKENS, TAKE_TOKENS = 75, 103


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def voice(seed: int, device, dtype) -> dict:
    g = torch.Generator().manual_seed(seed)
    return dict(
        prompt_token=torch.randint(0, 6561, (1, PROMPT_TOKENS), generator=g, dtype=torch.int32).to(device),
        prompt_feat=(torch.randn(1, 2 * PROMPT_TOKENS, 80, generator=g) - 5).to(device, dtype),
        embedding=torch.randn(1, 192, generator=g).to(device, dtype),
    )


def calls() -> list[tuple[int, bool]]:
    ends = [25 * k + 3 for k in range(1, 5)]
    return [(end, False) for end in ends] + [(TAKE_TOKENS, True)]


def take(flow, inputs, seed: int, cache, out: list | None = None, times: list | None = None):
    tokens = torch.randint(0, 6561, (TAKE_TOKENS,), generator=torch.Generator().manual_seed(seed)).tolist()
    incremental = IncrementalFlow(flow, **inputs, cache=cache)
    for end, final in calls():
        started = time.perf_counter()
        mel, _ = incremental.mel(tokens[:end], final)
        if times is not None:
            sync()
            times.append(time.perf_counter() - started)
        if out is not None:
            out.append(mel.float().cpu())


def concurrent(flow, inputs, streams: int, cache) -> float:
    """Wall seconds for `streams` takes rendered at once (threads; their chunks batch in the solver)."""
    return wall_seconds(
        [threading.Thread(target=take, args=(flow, inputs, 100 + i, cache)) for i in range(streams)]
    )


def wall_seconds(threads: list[threading.Thread]) -> float:
    """Wall seconds from starting `threads` until all have ended, the GPU's queue empty before and after."""
    sync()
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sync()
    return time.perf_counter() - started


def use(flow, solver: EstimatorSolver) -> EstimatorSolver:
    flow.decoder._solver = solver
    attach_cuda_graphs(flow, None, solver.graphs)
    return solver


def relative(ours: list, theirs: list) -> float:
    return max(
        float((a.double() - b.double()).norm() / b.double().norm()) for a, b in zip(ours, theirs, strict=True)
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--json")
    parser.add_argument("--streams", default="1,4,16")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of the script itself")
    parser.add_argument("--dtypes", default="float32,float16")
    parser.add_argument("--solvers", default="graphs,eager", help="timed solvers: graphs and/or eager")
    args = parser.parse_args()
    device = torch.device(args.device)
    model = Path(args.model)
    config = read_config(model / YAML_FILE, {"qwen_pretrain_path": str(model / BLANKEN_DIR)})
    report: dict = {
        "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "runs": [],
    }
    failed = False
    for dtype in [getattr(torch, name) for name in args.dtypes.split(",")]:
        if dtype == torch.float16 and device.type != "cuda":
            continue
        flow = load_flow(model, config, device).to(dtype)
        inputs = voice(1, device, dtype)
        cache = PromptFlowCache(1 << 36)
        cache.warm(IncrementalFlow(flow, **inputs))
        solvers = {
            "graphs": EstimatorSolver(flow.decoder, graphs=True),
            "eager-buckets": EstimatorSolver(flow.decoder, graphs=False),
            "eager": EstimatorSolver(flow.decoder, graphs=False),
            "graphs-stepwise": EstimatorSolver(flow.decoder, graphs=True),
        }
        solvers["eager-buckets"].buckets = True
        one_step = 512 * solvers["graphs"].layout.bytes_per_frame(1, 2, dtype)  # a take's step at 512 frames
        solvers["graphs-stepwise"].budget_bytes = 4 * one_step  # the check: one take, a step at a time
        mels = {}
        for name, solver in solvers.items():
            use(flow, solver)
            mels[name] = []
            take(flow, inputs, 7, cache, out=mels[name])
        limit = 1e-5 if dtype == torch.float32 else 1e-3
        for name in ("graphs", "graphs-stepwise"):
            error = relative(mels[name], mels["eager-buckets"])
            ok = error < limit
            failed |= not ok
            print(f"{'PASS' if ok else 'FAIL'} {dtype}: {name} vs the same shapes eagerly, error {error:.2e}")
        solvers["graphs-stepwise"].budget_bytes = 16 * one_step  # timed: 16 takes' steps
        print(
            f"info {dtype}: padded vs exact shapes (kernel choice, TF32 convs), error "
            f"{relative(mels['eager-buckets'], mels['eager']):.2e}",
            flush=True,
        )
        for name in args.solvers.split(","):
            solver = use(flow, solvers[name])
            for streams in [int(s) for s in args.streams.split(",")]:
                concurrent(flow, inputs, streams, cache)  # warm-up: captures this level's graphs
                solver.batches = solver.requests = solver.stepwise_batches = 0
                captures = solver.captures
                wall = concurrent(flow, inputs, streams, cache)
                chunks = streams * len(calls())
                row = {
                    "dtype": str(dtype),
                    "solver": name,
                    "streams": streams,
                    "wall_s": round(wall, 4),
                    "ms_per_chunk": round(1000 * wall / chunks, 2),
                    "audio_s_per_s_flow_only": round(streams * TAKE_TOKENS / 25 / wall, 2),
                    "mean_batch": round(solver.requests / max(1, solver.batches), 2),
                    "captures_while_timed": solver.captures - captures,
                    "stepwise_batches": solver.stepwise_batches,
                }
                report["runs"].append(row)
                print(json.dumps(row), flush=True)
        single: list = []
        use(flow, solvers["graphs"])
        take(flow, inputs, 9, cache, times=single)
        print(f"{dtype} graphs, one take, ms per call: {[round(1000 * t, 1) for t in single]}", flush=True)
        report["runs"].append(
            {"dtype": str(dtype), "single_take_ms_per_call": [round(1000 * t, 2) for t in single]}
        )
        del flow, solvers, mels
        if device.type == "cuda":
            torch.cuda.empty_cache()
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
    report["peak_allocated_gib"] = round(peak / 2**30, 2)
    print(f"peak allocated {report['peak_allocated_gib']} GiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
