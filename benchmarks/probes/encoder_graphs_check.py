"""GPU check and timing of the streaming flow encoder replayed from CUDA graphs (tts/flow/streaming/batched_encode.py).

For 1, 4, 16 and 32 takes' first chunks (a 3 s prompt of 75 tokens plus 28 tokens) and for later chunks
(prefixes of 150-300 tokens): (1) graphed batches equal eager ones (padded rows and width, relative
difference); (2) the wall time of one `encode_prefixes` call and the host's part of it, eager against graphed.

Usage: python benchmarks/probes/encoder_graphs_check.py --model /tmp/full [--json out.json]
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
from studio.tts.flow.streaming.batched_encode import Prefix, attach_encoder_graphs, encode_prefixes
from studio.tts.loader import load_flow

PROMPT_TOKENS = 75


def prefixes(takes: int, extra: int, seed: int) -> list[Prefix]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(takes):
        length = PROMPT_TOKENS + extra + (i % 3)  # slightly different lengths, as takes drift apart
        ids = torch.randint(0, 6561, (length,), generator=g).tolist()
        out.append(Prefix(ids, length - 3))
    return out


def timed(flow, batch: list[Prefix], rounds: int = 10) -> tuple[float, float, list[torch.Tensor]]:
    """Median wall ms (GPU finished) and host ms (the call returned) of `encode_prefixes`, and its output."""
    starts = [PROMPT_TOKENS] * len(batch)
    walls, hosts = [], []
    for _ in range(rounds):
        torch.cuda.synchronize()
        started = time.perf_counter()
        out = encode_prefixes(flow, batch, starts)
        hosts.append(time.perf_counter() - started)
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - started)
    return 1e3 * statistics.median(walls), 1e3 * statistics.median(hosts), out


@torch.inference_mode()
def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--json")
    args = parser.parse_args()
    model = Path(args.model)
    config = read_config(model / YAML_FILE, {"qwen_pretrain_path": str(model / BLANKEN_DIR)})
    flow = load_flow(model, config, torch.device("cuda")).half()
    report: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "runs": []}
    failed = False
    for takes in (1, 4, 16, 32):
        for extra in (28, 100, 225):
            batch = prefixes(takes, extra, seed=takes * 1000 + extra)
            attach_encoder_graphs(flow, enabled=False)
            eager_ms, eager_host_ms, eager = timed(flow, batch)
            attach_encoder_graphs(flow)
            for _ in range(2):  # eager at the padded shape, then captured
                encode_prefixes(flow, batch, [PROMPT_TOKENS] * takes)
            graph_ms, graph_host_ms, graphed = timed(flow, batch)
            error = relative(graphed, eager)
            ok = error < 2e-2 and flow.encoder_graphs.captures >= 1
            failed |= not ok
            run = {
                "takes": takes,
                "prefix_tokens": PROMPT_TOKENS + extra,
                "eager_ms": round(eager_ms, 2),
                "eager_host_ms": round(eager_host_ms, 2),
                "graphs_ms": round(graph_ms, 2),
                "graphs_host_ms": round(graph_host_ms, 2),
                "relative_difference": error,
                "captures": flow.encoder_graphs.captures,
            }
            report["runs"].append(run)
            print("PASS" if ok else "FAIL", json.dumps(run), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
