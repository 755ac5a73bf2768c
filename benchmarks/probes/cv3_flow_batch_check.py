"""CosyVoice3's streamed flow for N takes at once: `mel_many` (batched) against each take's own `mel`.

Builds a CosyVoice3 flow with random weights (tiny: 2 DiT blocks of 64; narrow: 22 of 64; mid: 4 of 1024;
full: cosyvoice3.yaml's 22 of 1024), gives N takes distinct voices (prompts of --prompt-tokens), and measures:

- first hop: every take's first call (the prompt's chunks plus upstream's first hop), one by one without a
  prompt cache, batched without one, and batched from a warm per-voice prompt cache;
- later hops: --rounds rounds in which every take gets 25 more tokens (one 50-frame chunk), batched and one
  by one, on twin streams at the same point of their takes.

Prints ms per round (all N takes' calls) and per take-chunk, the speed-up of batching, and the largest
difference between a batched take's mel and its twin's. With --graphs, a copy of the flow with the graphed
solve (`DiTGraphSolver`: CUDA graphs on CUDA, its static solve elsewhere) runs a third set of takes: its first
hops from the warm cache (the third time that shape runs, so replayed) and its rounds, against the twins. On the CPU times are the calling thread's CPU time
(with --threads 1 all the work runs there and other processes on shared cores do not inflate it); on CUDA
wall time between synchronizations. --steps sets the Euler steps (10 is upstream's; fewer keeps the full
width affordable on a CPU: the cost is linear in them).

Usage: python benchmarks/probes/cv3_flow_batch_check.py [--size tiny|mid|full] [--takes 1,4,8]
       [--device cpu|cuda] [--dtype float32|float16] [--threads 1] [--steps 10] [--rounds 3]
       [--prompt-tokens 150] [--graphs] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import math

import torch
from cv3_flow_stream_check import timed  # this script's folder is on sys.path when it runs

from studio.tts.cosyvoice3.dit import DiT
from studio.tts.cosyvoice3.flow import CausalMaskedDiffWithDiT, PreLookaheadLayer
from studio.tts.cosyvoice3.flow_batch import mel_many
from studio.tts.cosyvoice3.flow_graphs import attach_dit_graphs
from studio.tts.cosyvoice3.flow_prompt_cache import DiTPromptCache
from studio.tts.cosyvoice3.flow_stream import DiTFlowStream
from studio.tts.flow.cfm import CausalConditionalCFM

SIZES = {  # DiT shape and lookahead width
    "tiny": ({"dim": 64, "depth": 2, "heads": 2, "dim_head": 32}, 64),
    "narrow": (
        {"dim": 64, "depth": 22, "heads": 2, "dim_head": 32},
        64,
    ),  # the official depth: operation counts
    "mid": ({"dim": 1024, "depth": 4, "heads": 16, "dim_head": 64}, 1024),
    "full": ({"dim": 1024, "depth": 22, "heads": 16, "dim_head": 64}, 1024),
}
CFM_PARAMS = {"sigma_min": 1e-06, "solver": "euler", "t_scheduler": "cosine", "inference_cfg_rate": 0.7}
HOP, LOOKAHEAD = 25, 3


def build_flow(size: str, device: str, dtype: torch.dtype) -> CausalMaskedDiffWithDiT:
    dit, lookahead_channels = SIZES[size]
    torch.manual_seed(0)
    estimator = DiT(
        **dit,
        ff_mult=2,
        mel_dim=80,
        mu_dim=80,
        spk_dim=80,
        out_channels=80,
        static_chunk_size=2 * HOP,
        num_decoding_left_chunks=-1,
    )
    decoder = CausalConditionalCFM(240, CFM_PARAMS, n_spks=1, spk_emb_dim=80, estimator=estimator)
    flow = CausalMaskedDiffWithDiT(
        pre_lookahead_layer=PreLookaheadLayer(80, lookahead_channels, pre_lookahead_len=LOOKAHEAD),
        decoder=decoder,
    )
    return flow.eval().to(device, dtype)


class Voice:
    def __init__(self, seed: int, prompt_tokens: int, tokens: int, device: str, dtype: torch.dtype):
        generator = torch.Generator().manual_seed(seed)
        self.prompt_token = torch.randint(0, 6561, (1, prompt_tokens), generator=generator).to(device)
        self.prompt_feat = torch.randn(1, 2 * prompt_tokens, 80, generator=generator).to(device, dtype)
        self.embedding = torch.randn(1, 192, generator=generator).to(device)
        self.tokens = torch.randint(0, 6561, (1, tokens), generator=generator).to(device)

    def stream(self, flow, steps: int, cache: DiTPromptCache | None = None) -> DiTFlowStream:
        return DiTFlowStream(flow, self.prompt_token, self.prompt_feat, self.embedding, steps, cache)


def first_hop(prompt_tokens: int) -> int:
    """Upstream's first call: fill the prompt's last chunk and one more, plus the lookahead."""
    return math.ceil(prompt_tokens / HOP) * HOP - prompt_tokens + HOP + LOOKAHEAD


def calls(streams, voices, count: int) -> list[tuple]:
    return [(stream, voice.tokens[:, :count], False) for stream, voice in zip(streams, voices, strict=True)]


def measure(flow, voices: list[Voice], args, graphed_flow=None) -> dict:
    device, steps, first = args.device, args.steps, first_hop(args.prompt_tokens)
    row: dict = {"takes": len(voices)}
    # first hops: one by one and batched without a cache, batched from a warm cache
    alone = [voice.stream(flow, steps) for voice in voices]
    _, row["first_alone_ms"] = timed(
        lambda: [s.mel(v.tokens[:, :first], False) for s, v in zip(alone, voices, strict=True)], device
    )
    batched = [voice.stream(flow, steps) for voice in voices]
    _, row["first_batched_ms"] = timed(
        lambda: mel_many([(s, v.tokens[:, :first], False) for s, v in zip(batched, voices, strict=True)]),
        device,
    )
    cache = DiTPromptCache(2**40)
    mel_many([(voice.stream(flow, steps, cache), voice.tokens[:, :first], False) for voice in voices])
    cached = [voice.stream(flow, steps, cache) for voice in voices]
    _, row["first_batched_cached_ms"] = timed(
        lambda: mel_many([(s, v.tokens[:, :first], False) for s, v in zip(cached, voices, strict=True)]),
        device,
    )
    graphed = []
    if graphed_flow is not None:  # the first hop's shape eager, then captured, then replayed and timed
        graphed_cache = DiTPromptCache(2**40)
        for _ in range(2):
            mel_many(
                calls([voice.stream(graphed_flow, steps, graphed_cache) for voice in voices], voices, first)
            )
        graphed = [voice.stream(graphed_flow, steps, graphed_cache) for voice in voices]
        _, row["first_graphed_cached_ms"] = timed(lambda: mel_many(calls(graphed, voices, first)), device)
    # later hops: one 50-frame chunk per take per round
    alone_ms, batched_ms, graphed_ms, worst, worst_graphed = [], [], [], 0.0, 0.0
    for round_index in range(args.rounds):
        count = first + HOP * (round_index + 1)
        alone_mels, seconds = timed(
            lambda count=count: [
                s.mel(v.tokens[:, :count], False) for s, v in zip(alone, voices, strict=True)
            ],
            device,
        )
        alone_ms.append(seconds)
        batched_mels, seconds = timed(
            lambda count=count: mel_many(
                [(s, v.tokens[:, :count], False) for s, v in zip(batched, voices, strict=True)]
            ),
            device,
        )
        batched_ms.append(seconds)
        for a, b in zip(alone_mels, batched_mels, strict=True):
            worst = max(worst, float((a - b).abs().max()))
        if graphed:
            graphed_mels, seconds = timed(lambda count=count: mel_many(calls(graphed, voices, count)), device)
            graphed_ms.append(seconds)
            for a, b in zip(alone_mels, graphed_mels, strict=True):
                worst_graphed = max(worst_graphed, float((a - b).abs().max()))
    row["round_alone_ms"] = min(alone_ms)
    row["round_batched_ms"] = min(batched_ms)
    row["max_abs_diff"] = worst
    if graphed:
        row["round_graphed_ms"] = min(graphed_ms)
        row["max_abs_diff_graphed"] = worst_graphed
    for key in [key for key in row if key.endswith("_ms")]:
        row[key] = round(1000 * row[key], 2)
    row["chunk_alone_ms"] = round(row["round_alone_ms"] / len(voices), 2)
    row["chunk_batched_ms"] = round(row["round_batched_ms"] / len(voices), 2)
    row["speedup"] = round(row["round_alone_ms"] / row["round_batched_ms"], 2)
    if graphed:
        row["chunk_graphed_ms"] = round(row["round_graphed_ms"] / len(voices), 2)
        row["speedup_graphed"] = round(row["round_alone_ms"] / row["round_graphed_ms"], 2)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--takes", default="1,4,8", help="comma-separated take counts")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="later-hop rounds; the fastest is shown")
    parser.add_argument("--prompt-tokens", type=int, default=150)
    parser.add_argument("--graphs", action="store_true", help="also time the graphed solve (DiTGraphSolver)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    flow = build_flow(args.size, args.device, dtype)
    tokens = first_hop(args.prompt_tokens) + HOP * (args.rounds + 1)
    counts = [int(n) for n in args.takes.split(",")]
    voices = [Voice(seed, args.prompt_tokens, tokens, args.device, dtype) for seed in range(max(counts))]
    graphed_flow = None
    if args.graphs:
        graphed_flow = copy.deepcopy(flow)
        attach_dit_graphs(graphed_flow)
    measure(flow, voices[:1], argparse.Namespace(**{**vars(args), "rounds": 1}))  # allocations, kernels
    print(
        f"{args.size} DiT, {args.device} {args.dtype}, {args.steps} steps, prompt {args.prompt_tokens} tokens"
    )
    print(
        " takes  first: alone  batched  cached (ms)   round: alone  batched (ms)"
        "   per chunk: alone  batched  speed-up  max |diff|"
    )
    rows = []
    for count in counts:
        row = measure(flow, voices[:count], args, graphed_flow)
        rows.append(row)
        print(
            f"{count:6d}  {row['first_alone_ms']:12.1f} {row['first_batched_ms']:8.1f} "
            f"{row['first_batched_cached_ms']:7.1f}  {row['round_alone_ms']:13.1f} "
            f"{row['round_batched_ms']:8.1f}  {row['chunk_alone_ms']:17.1f} {row['chunk_batched_ms']:8.1f} "
            f"{row['speedup']:9.2f}  {row['max_abs_diff']:.1e}"
        )
        if graphed_flow is not None:
            print(
                f"        graphed: first (cached) {row['first_graphed_cached_ms']:.1f} ms, round "
                f"{row['round_graphed_ms']:.1f} ms, per chunk {row['chunk_graphed_ms']:.1f} ms, speed-up "
                f"{row['speedup_graphed']:.2f} over one by one, max |diff| {row['max_abs_diff_graphed']:.1e}"
            )
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"args": vars(args), "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
