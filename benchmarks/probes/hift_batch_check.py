"""GPU check and timing of HiFT run for several takes' chunks at once (`Token2WavStream.vocode_many`).

For 1, 4, 16 and 32 takes, first chunks (~56 mel frames) and steady chunks (~100 frames plus the cache):
(1) each take's batched speech equals its chunk vocoded alone (relative difference); (2) the wall time of
one tick's HiFT, chunk by chunk against batched, both replayed from CUDA graphs once warm.

Usage: python benchmarks/probes/hift_batch_check.py --model /tmp/full [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from flow_solver_check import relative  # this script's folder is on sys.path when it runs

from studio.model_layout import BLANKEN_DIR, YAML_FILE
from studio.tts.config import read_config
from studio.tts.loader import attach_cuda_graphs, load_flow, load_hift
from studio.tts.token2wav import Token2WavStream

PROMPT_TOKENS = 75


def streams(flow, hift, takes: int, device) -> list[Token2WavStream]:
    g = torch.Generator().manual_seed(1)
    inputs = dict(
        prompt_token=torch.randint(0, 6561, (1, PROMPT_TOKENS), generator=g, dtype=torch.int32),
        prompt_feat=torch.randn(1, 2 * PROMPT_TOKENS, 80, generator=g) - 5,
        embedding=torch.randn(1, 192, generator=g),
    )
    return [
        Token2WavStream(
            flow,
            hift,
            **inputs,
            streaming=True,
            generator=torch.Generator(device=device).manual_seed(i),
            incremental=False,
            scheduled=False,
        )  # fmt: skip
        for i in range(takes)
    ]


def tick(flow, hift, takes: int, frames: int, batched: bool, device) -> tuple[float, list[torch.Tensor]]:
    """Wall ms of one tick's HiFT (a second chunk when `frames` is steady: the cache path) and its speech."""
    chunks = streams(flow, hift, takes, device)
    mels = [torch.randn(1, 80, frames, device=device) - 5 for _ in chunks]
    if frames > 56:  # steady chunks follow a first one: mel and source caches, cross-fade
        Token2WavStream.vocode_many([(s, torch.randn(1, 80, 56, device=device) - 5, False) for s in chunks])
    torch.cuda.synchronize()
    started = time.perf_counter()
    if batched:
        out = Token2WavStream.vocode_many([(s, m, False) for s, m in zip(chunks, mels, strict=True)])
    else:
        out = [s.vocode(m, False) for s, m in zip(chunks, mels, strict=True)]
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - started), out


@torch.inference_mode()
def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--json")
    args = parser.parse_args()
    device = torch.device("cuda")
    model = Path(args.model)
    config = read_config(model / YAML_FILE, {"qwen_pretrain_path": str(model / BLANKEN_DIR)})
    flow, hift = load_flow(model, config, device).half(), load_hift(model, config, device)
    attach_cuda_graphs(None, hift)
    report: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "runs": []}
    failed = False
    for takes in (1, 4, 16, 32):
        for frames in (56, 100):
            times = {}
            for batched in (False, True):
                for _ in range(3):  # eager, captured, replayed
                    tick(flow, hift, takes, frames, batched, device)
                runs = [tick(flow, hift, takes, frames, batched, device) for _ in range(5)]
                times[batched] = statistics.median(ms for ms, _ in runs)
                speech = runs[-1][1]
            torch.manual_seed(0)
            _, alone = tick(flow, hift, takes, frames, False, device)
            torch.manual_seed(0)
            _, together = tick(flow, hift, takes, frames, True, device)
            error = relative(together, alone)
            ok = error < 1e-3 and all(s.shape[1] > 0 for s in speech)
            failed |= not ok
            run = {
                "takes": takes,
                "mel_frames": frames,
                "one_by_one_ms": round(times[False], 2),
                "batched_ms": round(times[True], 2),
                "relative_difference": error,
            }
            report["runs"].append(run)
            print("PASS" if ok else "FAIL", json.dumps(run), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
