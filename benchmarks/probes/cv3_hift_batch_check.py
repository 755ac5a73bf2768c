"""CosyVoice3's streamed vocoder for N takes at once: `push_many` (batched) against each take's own `push`.

Builds a CosyVoice3 HiFT with random weights (tiny: 16 base channels; full: cosyvoice3.yaml's 512), gives N
takes distinct random mels, and pushes them on twin streams at the same point of their takes, one by one and
batched:

- first push: every take's first chunk (--first-frames, plus 2 more frames per take so the batch's windows
  differ in length, as takes' first chunks do);
- later pushes: --rounds rounds of --frames frames per take (the fastest round is shown);
- last push: --frames frames with `finalize`.

Prints ms per round (all N takes' pushes) and per take-push, the speed-up of batching, and the largest
difference between a batched take's samples and its twin's. With --dtype float16 the pushes run under
float16 autocast on a float32 model, as a take with fp16 runs them. With --graphs the batched pushes' network
runs through `SpectrumGraphs` (CUDA graphs on CUDA, as the loader attaches them; a shape is captured when it
recurs, so the later rounds replay). On the CPU times are the calling thread's CPU time (--threads 1 keeps other
processes on shared cores from inflating them); on CUDA wall time between synchronizations.

Usage: python benchmarks/probes/cv3_hift_batch_check.py [--size tiny|full] [--takes 1,4,16]
       [--device cpu|cuda] [--dtype float32|float16] [--threads 1] [--rounds 3] [--first-frames 56]
       [--frames 100] [--graphs] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json

import torch
from cv3_flow_stream_check import timed  # this script's folder is on sys.path when it runs

from studio.tts.cosyvoice3.hift import CausalConvRNNF0Predictor, CausalHiFTGenerator
from studio.tts.cosyvoice3.hift_batch import HiftPush, attach_hift_graphs, push_many
from studio.tts.cosyvoice3.hift_stream import CausalHiftStream

SIZES = {"tiny": 16, "full": 512}  # base channels (the F0 predictor's width follows)


def build_hift(size: str, device: str) -> CausalHiFTGenerator:
    channels = SIZES[size]
    torch.manual_seed(0)
    hift = CausalHiFTGenerator(
        base_channels=channels,
        f0_predictor=CausalConvRNNF0Predictor(cond_channels=channels),
        noise_seconds=60,
    )
    hift.fuse_weight_norm()
    return hift.eval().to(device)


def precision(args):
    if args.dtype == "float16":
        return torch.autocast(args.device, dtype=torch.float16)
    return contextlib.nullcontext()


def measure(hift: CausalHiFTGenerator, count: int, args) -> dict:
    first = [args.first_frames + 2 * take for take in range(count)]
    total = max(first) + args.frames * (args.rounds + 1)
    generator = torch.Generator().manual_seed(count)
    mels = [torch.randn(1, 80, total, generator=generator).to(args.device) for _ in range(count)]
    alone = [CausalHiftStream(hift) for _ in range(count)]
    batched = [CausalHiftStream(hift) for _ in range(count)]
    # each round: (per take: first frame, frames), finalize
    rounds = [([(0, size) for size in first], False)]
    for index in range(args.rounds + 1):
        rounds.append(([(size + index * args.frames, args.frames) for size in first], index == args.rounds))
    times: dict[str, list[float]] = {"alone": [], "batched": []}
    worst = 0.0
    for spans, finalize in rounds:
        chunks = [mel[:, :, start : start + size] for mel, (start, size) in zip(mels, spans, strict=True)]
        with precision(args):
            alone_out, alone_s = timed(
                lambda chunks=chunks, finalize=finalize: [
                    stream.push(chunk, finalize) for stream, chunk in zip(alone, chunks, strict=True)
                ],
                args.device,
            )
            batched_out, batched_s = timed(
                lambda chunks=chunks, finalize=finalize: push_many(
                    [HiftPush(stream, chunk, finalize) for stream, chunk in zip(batched, chunks, strict=True)]
                ),
                args.device,
            )
        times["alone"].append(alone_s)
        times["batched"].append(batched_s)
        for a, b in zip(alone_out, batched_out, strict=True):
            if a.shape != b.shape:
                raise AssertionError(f"batched samples {list(b.shape)} != the take's own {list(a.shape)}")
            if a.numel():
                worst = max(worst, float((a - b).abs().max()))
    row: dict = {"takes": count}
    for mode in ("alone", "batched"):
        row[f"first_{mode}_ms"] = round(1000 * times[mode][0], 2)
        row[f"round_{mode}_ms"] = round(1000 * min(times[mode][1:-1]), 2)
        row[f"last_{mode}_ms"] = round(1000 * times[mode][-1], 2)
        row[f"push_{mode}_ms"] = round(row[f"round_{mode}_ms"] / count, 2)
    row["speedup"] = round(row["round_alone_ms"] / row["round_batched_ms"], 2)
    row["max_abs_diff"] = worst
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--takes", default="1,4,16", help="comma-separated take counts")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="later-push rounds; the fastest is shown")
    parser.add_argument(
        "--first-frames", type=int, default=56, help="mel frames of the first take's first push"
    )
    parser.add_argument("--frames", type=int, default=100, help="mel frames of every later push")
    parser.add_argument("--graphs", action="store_true", help="the batched network as CUDA graphs")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    torch.set_num_threads(args.threads)
    hift = build_hift(args.size, args.device)
    if args.graphs:
        attach_hift_graphs(hift)
    counts = [int(n) for n in args.takes.split(",")]
    measure(hift, 2, argparse.Namespace(**{**vars(args), "rounds": 1}))  # allocations, kernels, noise table
    graphs = ", batched network graphed" if args.graphs else ""
    print(f"{args.size} HiFT, {args.device} {args.dtype}, pushes of {args.frames} frames{graphs}")
    print(
        " takes  first: alone  batched (ms)   round: alone  batched (ms)   last: alone  batched (ms)"
        "   per push: alone  batched  speed-up  max |diff|"
    )
    rows = []
    for count in counts:
        row = measure(hift, count, args)
        rows.append(row)
        print(
            f"{count:6d}  {row['first_alone_ms']:12.1f} {row['first_batched_ms']:8.1f}"
            f"  {row['round_alone_ms']:13.1f} {row['round_batched_ms']:8.1f}"
            f"  {row['last_alone_ms']:12.1f} {row['last_batched_ms']:8.1f}"
            f"  {row['push_alone_ms']:16.1f} {row['push_batched_ms']:8.1f} {row['speedup']:9.2f}"
            f"  {row['max_abs_diff']:.1e}"
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"args": vars(args), "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
