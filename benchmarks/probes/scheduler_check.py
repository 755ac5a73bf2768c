"""GPU check of the chunk scheduler (tts/scheduler/): its audio equals the takes' own threads' audio.

Loads the folder's flow and HiFT on CUDA (fp16 autocast as the studio runs them, CUDA graphs attached),
then renders the same streamed takes (prompt of 75 tokens, 103 speech tokens, hop schedule of the studio)
six ways: one take at a time and 8 at once, each with the scheduler on (its encoders incremental,
`STUDIO_FLOW_BATCH_ENCODER=0`, and batched over recomputed prefixes, the default) and off. One at a
time, the scheduler with incremental encoders solves the same shapes as the takes' own threads, so they
must agree to float rounding; 8 at once they batch differently (padded buckets), and the batched encoder
computes the prefix anew in fp16, so those agree to the fp16 tolerance of batched against solo. Any race
in the scheduler's asynchronous copies to the host, or a frame sliced wrong, would show here as audio
that differs far beyond either.

Each timed run reports the flow's graph captures it made (a bucket shape first seen there costs a capture).

Usage: python benchmarks/probes/scheduler_check.py --model /tmp/full [--device cpu] [--warmup N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import torch
from flow_solver_check import relative  # this script's folder is on sys.path when it runs

from studio.model_layout import BLANKEN_DIR, YAML_FILE
from studio.tts.config import read_config
from studio.tts.flow.streaming.solver import solver_stats
from studio.tts.loader import attach_cuda_graphs, load_flow, load_hift
from studio.tts.scheduler import scheduler_stats
from studio.tts.token2wav import Token2WavStream

PROMPT_TOKENS, TAKE_TOKENS, TAKES = 75, 103, 8


def render(flow, hift, seed: int, scheduled: bool, fp16: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    device = next(flow.parameters()).device
    stream = Token2WavStream(
        flow,
        hift,
        prompt_token=torch.randint(0, 6561, (1, PROMPT_TOKENS), generator=g, dtype=torch.int32).to(device),
        prompt_feat=(torch.randn(1, 2 * PROMPT_TOKENS, 80, generator=g) - 5).to(device),
        embedding=torch.randn(1, 192, generator=g).to(device),
        streaming=True,
        generator=torch.Generator(device=device).manual_seed(seed),
        fp16=fp16,
        prompt_cache=False,
        scheduled=scheduled,
    )
    tokens = torch.randint(0, 6561, (TAKE_TOKENS,), generator=g).tolist()
    parts = []
    while stream.ready(TAKE_TOKENS):
        parts.append(stream.chunk(tokens[: stream.tokens_needed()])[0])
    parts.append(stream.finish(tokens)[0])
    return torch.cat(parts, dim=1)


def run(flow, hift, scheduled: bool, at_once: bool, fp16: bool, batch_encoder: bool = True):
    """(each take's audio, seconds for all of them)."""
    os.environ["STUDIO_FLOW_BATCH_ENCODER"] = "1" if batch_encoder else "0"  # read as each stream starts
    out: list = [None] * TAKES
    started = time.perf_counter()
    if at_once:

        def one(i: int) -> None:
            out[i] = render(flow, hift, 100 + i, scheduled, fp16)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(TAKES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        for i in range(TAKES):
            out[i] = render(flow, hift, 100 + i, scheduled, fp16)
    return out, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of the script itself")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs of each path first")
    parser.add_argument("--json")
    args = parser.parse_args()
    device = torch.device(args.device)
    model = Path(args.model)
    config = read_config(model / YAML_FILE, {"qwen_pretrain_path": str(model / BLANKEN_DIR)})
    flow, hift = load_flow(model, config, device), load_hift(model, config, device)
    fp16 = device.type == "cuda"
    if fp16:
        flow.half()
        attach_cuda_graphs(flow, hift, True)
    report: dict = {"device": str(device), "torch": torch.__version__, "checks": []}
    failed = False
    for at_once, limit in ((False, 1e-4), (True, 2e-2)):
        how = f"{TAKES} at once" if at_once else "one at a time"
        for _ in range(args.warmup):  # untimed: graph captures of these shapes
            for batch_encoder in (False, True):
                run(flow, hift, True, at_once, fp16, batch_encoder)
            run(flow, hift, False, at_once, fp16)
        off, off_s = run(flow, hift, False, at_once, fp16)
        for batch_encoder in (False, True):
            captured = solver_stats(flow)["captures"]
            on, on_s = run(flow, hift, True, at_once, fp16, batch_encoder)
            captured = solver_stats(flow)["captures"] - captured
            allowed = 2e-2 if batch_encoder else limit
            error = relative(on, off)
            ok = error < allowed and all(torch.isfinite(a).all() for a in on)
            failed |= not ok
            encoder = "batched encoder" if batch_encoder else "incremental encoder"
            print(
                f"{'PASS' if ok else 'FAIL'} {how}: scheduler ({encoder}) vs own threads, audio error "
                f"{error:.2e} (limit {allowed:.0e}); {on_s:.2f} s vs {off_s:.2f} s, {captured} captures",
                flush=True,
            )
            report["checks"].append(
                {"takes": how, "encoder": encoder, "error": error, "limit": allowed, "scheduler_s": on_s,
                 "own_threads_s": off_s, "captures": captured, "warmup_runs": args.warmup}
            )  # fmt: skip
    report["scheduler"] = scheduler_stats(flow)
    print(json.dumps(report["scheduler"]))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
