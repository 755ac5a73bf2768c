"""Time per streamed hop of CosyVoice3's flow along a take: DiTFlowStream against upstream's re-run.

Builds a CosyVoice3 flow with random weights (tiny: the test folder's DiT, 2 blocks of 64; mid: 4 blocks
of 1024; full: cosyvoice3.yaml's 22 of 1024), then streams one take on upstream's schedule (CosyVoice3Model:
a first hop that fills the prompt's last chunk and one more, then 50, then 100 tokens per hop, each call
with 3 lookahead tokens) through `DiTFlowStream`, and, unless --no-rerun, through the re-run
`flow.inference(prompt + all tokens so far, streaming=True)`. Prints, per hop, where the take stands (s of
audio), the stream's ms per 25-token chunk of new audio (the fastest of --repeat takes; CPU time on the
CPU, see `timed`), its state in MB after the call (freed by the finalizing one), the re-run's ms per
chunk and their largest difference. The first hop also computes the prompt's frames.

Usage: python benchmarks/probes/cv3_flow_stream_check.py [--size tiny|mid|full] [--seconds 60]
       [--device cpu|cuda] [--dtype float32|float16] [--threads 1] [--repeat 3] [--no-rerun]
       [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from functools import partial

import torch

from studio.tts.cosyvoice3.dit import DiT
from studio.tts.cosyvoice3.flow import CausalMaskedDiffWithDiT, PreLookaheadLayer
from studio.tts.cosyvoice3.flow_stream import DiTFlowStream
from studio.tts.flow.cfm import CausalConditionalCFM

SIZES = {  # DiT shape and lookahead width
    "tiny": ({"dim": 64, "depth": 2, "heads": 2, "dim_head": 32}, 64),
    "mid": ({"dim": 1024, "depth": 4, "heads": 16, "dim_head": 64}, 1024),
    "full": ({"dim": 1024, "depth": 22, "heads": 16, "dim_head": 64}, 1024),
}
CFM_PARAMS = {"sigma_min": 1e-06, "solver": "euler", "t_scheduler": "cosine", "inference_cfg_rate": 0.7}
HOP, MAX_HOP, LOOKAHEAD = 25, 100, 3


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


def schedule(prompt_tokens: int, tokens: int) -> list[int]:
    """Token counts at each call of upstream's take; the last call (all tokens) finalizes."""
    counts, offset, hop = [], 0, HOP
    first = math.ceil(prompt_tokens / HOP) * HOP - prompt_tokens + HOP
    while True:
        this_hop = first if offset == 0 else hop
        if offset + this_hop + LOOKAHEAD > tokens:
            return [*counts, tokens]
        counts.append(offset + this_hop + LOOKAHEAD)
        offset += this_hop
        if len(counts) > 1:
            hop = min(MAX_HOP, hop * 2)


def timed(call, device: str) -> tuple[torch.Tensor, float]:
    """(call's result, seconds): on the CPU the calling thread's CPU time (with one intra-op thread all
    the work runs there, and other processes on shared cores do not inflate it), else wall time."""
    clock = time.thread_time if device == "cpu" else time.perf_counter
    if device == "cuda":
        torch.cuda.synchronize()
    begin = clock()
    out = call()
    if device == "cuda":
        torch.cuda.synchronize()
    return out, clock() - begin


def stream_take(flow, prompt_token, prompt_feat, embedding, tokens, counts, device) -> list[tuple]:
    """One take through a DiTFlowStream: (new mel, seconds, state bytes after) per call."""
    stream = DiTFlowStream(flow, prompt_token, prompt_feat, embedding)
    calls = []
    for index, count in enumerate(counts):
        new, seconds = timed(partial(stream.mel, tokens[:, :count], index == len(counts) - 1), device)
        calls.append((new, seconds, stream.state_bytes))
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--seconds", type=float, default=60.0, help="take length in seconds of audio")
    parser.add_argument("--prompt-tokens", type=int, default=75)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="streamed takes; each hop's fastest is shown")
    parser.add_argument("--no-rerun", action="store_true", help="time the stream only")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    flow = build_flow(args.size, args.device, dtype)
    generator = torch.Generator().manual_seed(1)
    prompt_token = torch.randint(0, 6561, (1, args.prompt_tokens), generator=generator).to(args.device)
    prompt_feat = torch.randn(1, 2 * args.prompt_tokens, 80, generator=generator).to(args.device, dtype)
    embedding = torch.randn(1, 192, generator=generator).to(args.device)
    total = int(args.seconds * 25)
    tokens = torch.randint(0, 6561, (1, total), generator=generator).to(args.device)

    warm = DiTFlowStream(flow, prompt_token, prompt_feat, embedding)  # first-call allocations and kernels
    warm.mel(tokens[:, :60], finalize=True)
    counts = schedule(args.prompt_tokens, total)
    streamed = [stream_take(flow, prompt_token, prompt_feat, embedding, tokens, counts, args.device)]
    streamed += [
        stream_take(flow, prompt_token, prompt_feat, embedding, tokens, counts, args.device)
        for _ in range(args.repeat - 1)
    ]
    rows, returned = [], 0
    print(f"{args.size} DiT, {args.device} {args.dtype}, prompt {args.prompt_tokens} tokens, take {total}")
    print(" at (s)  new frames  stream ms/chunk  state MB  rerun ms/chunk  max |diff|")
    for index, count in enumerate(counts):
        finalize = index == len(counts) - 1
        new, _, state_bytes = streamed[0][index]
        seconds = min(take[index][1] for take in streamed)
        chunks = new.shape[2] / (2 * HOP)
        row = {
            "audio_s": round((returned + new.shape[2]) / 50, 2),
            "new_frames": new.shape[2],
            "stream_ms_per_chunk": round(1000 * seconds / chunks, 2),
            "state_mb": round(state_bytes / 1e6, 2),
        }
        if not args.no_rerun:
            inputs = (prompt_token, torch.tensor([args.prompt_tokens]), prompt_feat)
            call = partial(
                flow.inference,
                tokens[:, :count],
                torch.tensor([count]),
                *inputs,
                torch.tensor([prompt_feat.shape[1]]),
                embedding,
                streaming=True,
                finalize=finalize,
            )
            (expected, _), rerun_seconds = timed(call, args.device)
            row["rerun_ms_per_chunk"] = round(1000 * rerun_seconds / chunks, 2)
            row["max_abs_diff"] = float((new - expected[:, :, returned:]).abs().max())
        rows.append(row)
        print(
            f"{row['audio_s']:7.2f}  {row['new_frames']:10d}  {row['stream_ms_per_chunk']:15.2f}"
            f"  {row['state_mb']:8.2f}  {row.get('rerun_ms_per_chunk', float('nan')):14.2f}"
            f"  {row.get('max_abs_diff', float('nan')):.2e}"
        )
        returned += new.shape[2]
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"args": vars(args), "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
