"""What float16 autocast costs the streaming flow whose weights are already float16.

The studio, as upstream, runs the fp16 flow (weights halved) inside ``torch.autocast(float16)``. Autocast then
only adds work: LayerNorm, GroupNorm and a few more run in float32, so each one casts its input, weight and bias,
and every linear after it casts its input back. On a launch-bound GPU every cast is one more kernel of ~3 us.
This times the same chunks both ways on the full-size model: one take's first chunk (encoder + graphed Euler
solve), 16 takes at once, the kernels of one first chunk, and the difference between the two outputs.

Usage: python benchmarks/probes/autocast_check.py --model /tmp/full [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from flow_solver_check import relative, sync, voice, wall_seconds
from torch.profiler import ProfilerActivity, profile

from studio.model_layout import BLANKEN_DIR, YAML_FILE
from studio.tts.config import read_config
from studio.tts.flow.streaming.incremental import IncrementalFlow
from studio.tts.flow.streaming.prompt_cache import PromptFlowCache
from studio.tts.flow.streaming.solver import EstimatorSolver
from studio.tts.loader import attach_cuda_graphs, load_flow

FIRST_CHUNK_TOKENS = 28  # 25 + the 3-token lookahead, the bench's 3 s prompt needs no pad
TAKE_TOKENS = 103


def precision(mode: str):
    return torch.autocast("cuda", dtype=torch.float16) if mode == "autocast" else nullcontext()


def tokens_of(seed: int) -> list[int]:
    return torch.randint(0, 6561, (TAKE_TOKENS,), generator=torch.Generator().manual_seed(seed)).tolist()


def first_chunk(flow, inputs, cache, seed: int, mode: str) -> float:
    incremental = IncrementalFlow(flow, **inputs, cache=cache)
    sync()
    started = time.perf_counter()
    with precision(mode):
        incremental.mel(tokens_of(seed)[:FIRST_CHUNK_TOKENS], False)
    sync()
    return time.perf_counter() - started


def whole_take(flow, inputs, cache, seed: int, mode: str) -> list[torch.Tensor]:
    incremental, tokens, mels = IncrementalFlow(flow, **inputs, cache=cache), tokens_of(seed), []
    with precision(mode):
        for end in (28, 53, 78):
            mels.append(incremental.mel(tokens[:end], False)[0].float().cpu())
        mels.append(incremental.mel(tokens, True)[0].float().cpu())
    return mels


def at_once(flow, inputs, cache, streams: int, mode: str) -> float:
    """Wall seconds of `streams` whole takes at once (each thread enters the precision: autocast is per thread)."""
    return wall_seconds(
        [
            threading.Thread(target=whole_take, args=(flow, inputs, cache, 500 + i, mode))
            for i in range(streams)
        ]
    )


def kernels(run) -> tuple[int, float, dict[str, int]]:
    """(kernels launched, their summed GPU ms, the 15 most launched kernels by count) while `run()` ran
    (zeros without CUDA): which fusions would pay in a launch-bound step."""
    if not torch.cuda.is_available():
        run()
        return 0, 0.0, {}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        sync()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    counts: dict[str, int] = {}
    for event in events:
        counts[event.name[:90]] = counts.get(event.name[:90], 0) + 1
    top = dict(sorted(counts.items(), key=lambda kv: -kv[1])[:15])
    return len(events), sum(e.device_time for e in events) / 1000, top


def measure(flow, inputs, streams: int, mode: str, graphs: bool, untimed: int) -> tuple[dict, list]:
    """One way of running the flow timed on a fresh solver and prompt cache: one take's first chunk (median
    and min of 10 after 3 untimed), its kernels, `streams` whole takes at once (after `untimed` rounds),
    and a whole take's mels to compare. `mode` is the precision ("autocast" or "plain")."""
    flow.decoder._solver = EstimatorSolver(flow.decoder, graphs=graphs)
    attach_cuda_graphs(flow, None, graphs)
    cache = PromptFlowCache(1 << 36)
    with precision(mode):
        cache.warm(IncrementalFlow(flow, **inputs))
    for seed in range(3):  # the first chunk's shapes: eager once, then captured
        first_chunk(flow, inputs, cache, seed, mode)
    times = [first_chunk(flow, inputs, cache, 10 + seed, mode) for seed in range(10)]
    count, gpu_ms, top = kernels(lambda: first_chunk(flow, inputs, cache, 99, mode))
    for _ in range(untimed):  # the batched shapes
        at_once(flow, inputs, cache, streams, mode)
    wall = at_once(flow, inputs, cache, streams, mode)
    row = {
        "first_chunk_ms_median": round(1000 * statistics.median(times), 2),
        "first_chunk_ms_min": round(1000 * min(times), 2),
        "first_chunk_kernels": count,
        "first_chunk_kernel_ms_under_profiler": round(gpu_ms, 2),
        f"{streams}_takes_at_once_wall_s": round(wall, 3),
        "first_chunk_kernels_by_count": top,
    }
    return row, whole_take(flow, inputs, cache, 7, mode)


def float32_take(model: Path, config, device) -> list[torch.Tensor]:
    """A whole take's mels with the flow's float32 weights, eagerly and without autocast (the reference)."""
    flow32 = load_flow(model, config, device).float()
    flow32.decoder._solver = EstimatorSolver(flow32.decoder, graphs=False)
    inputs32, cache32 = voice(1, device, torch.float32), PromptFlowCache(1 << 36)
    cache32.warm(IncrementalFlow(flow32, **inputs32))
    return whole_take(flow32, inputs32, cache32, 7, "plain")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--json")
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of the script itself (float32)")
    args = parser.parse_args()
    device = torch.device(args.device)
    half = torch.float16 if device.type == "cuda" else torch.float32
    model = Path(args.model)
    config = read_config(model / YAML_FILE, {"qwen_pretrain_path": str(model / BLANKEN_DIR)})
    flow = load_flow(model, config, device).to(half)
    inputs = voice(1, device, half)
    gpu = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    report: dict = {"gpu": gpu, "torch": torch.__version__, "modes": {}}
    mels = {}
    for mode in ("autocast", "plain"):
        report["modes"][mode], mels[mode] = measure(flow, inputs, args.streams, mode, graphs=True, untimed=2)
        print(mode, json.dumps(report["modes"][mode]), flush=True)
    # the truth both approximate: the same take with float32 weights, no autocast
    reference = float32_take(model, config, device)
    report["relative_difference"] = {
        "plain_vs_autocast": relative(mels["plain"], mels["autocast"]),
        "autocast_vs_float32": relative(mels["autocast"], reference),
        "plain_vs_float32": relative(mels["plain"], reference),
    }
    print("relative difference of a whole take's mels:", json.dumps(report["relative_difference"]))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
