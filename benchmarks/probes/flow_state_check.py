"""What each way of keeping a take's flow state costs in accuracy and saves in memory, on CosyVoice2's full-size
flow with random weights (built from the official yaml in memory; no folder): keys/values in float8
(`STUDIO_FLOW_STATE_FP8=1`), the blocks' attention inputs (`STUDIO_FLOW_STATE_INPUTS=1`), and both.

Streams one take (a prompt of --prompt-tokens, then --tokens speech tokens on upstream's hop schedule: 25, 50,
100 tokens, each call with 3 lookahead tokens) through `IncrementalFlow`: with its keys/values in the compute
dtype (the exact stream), then once per kind in --kinds. Prints per chunk each kind's mel relative error (L2 norm
of the difference over the exact chunk's) and largest absolute difference, then what a take's state costs per
mel frame and for takes of 5 to 30 s. Random weights are not a trained model's: the errors are a proxy until
measured on real weights.

Usage: python benchmarks/probes/flow_state_check.py [--tokens 250] [--prompt-tokens 100]
       [--kinds fp8,inputs,inputs-fp8] [--device cpu|cuda] [--dtype float32|float16] [--threads 2]
       [--fp16-too] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from studio.tts.fabricate.builder import full_size_section
from studio.tts.flow.streaming.batched_solve import stored_bytes_per_frame
from studio.tts.flow.streaming.incremental import IncrementalFlow
from studio.tts.flow.streaming.solver import EstimatorSolver
from studio.tts.memory import STATE_STEPS

LOOKAHEAD = 3
KINDS = {"exact": (False, False), "fp8": (True, False), "inputs": (False, True), "inputs-fp8": (True, True)}
TAKE_SECONDS = (5, 10, 20, 30)
MEL_FRAMES_PER_SECOND = 50


def full_flow(device: str, dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    return full_size_section("flow").to(device=device, dtype=dtype).eval()


def hop_ends(tokens: int) -> list[tuple[int, bool]]:
    """(tokens given, finalize) per call on upstream's schedule: hops of 25, 50, then 100 tokens."""
    ends, given, hop = [], 0, 25
    while given + hop + LOOKAHEAD < tokens:
        given += hop
        ends.append((given + LOOKAHEAD, False))
        hop = min(2 * hop, 100)
    ends.append((tokens, True))
    return ends


def stream(flow, inputs: dict, speech: list[int], kind: str) -> list[torch.Tensor]:
    """The take's mel per chunk with its state kept as `kind` says (the flow's solver made for it)."""
    fp8, keeps_inputs = KINDS[kind]
    os.environ["STUDIO_FLOW_STATE_FP8"] = "1" if fp8 else "0"
    flow.decoder._solver = EstimatorSolver(flow.decoder, graphs=False, keeps_inputs=keeps_inputs)
    take = IncrementalFlow(flow, **inputs)
    return [take.mel(speech[:end], finalize=final)[0].float() for end, final in hop_ends(len(speech))]


def state_costs(layout, dtype: torch.dtype) -> dict:
    """What a take's flow state costs per mel frame and per take of `TAKE_SECONDS`, kept each way (printed)."""
    per_frame = {
        kind: stored_bytes_per_frame(layout, STATE_STEPS, 2, dtype, fp8, keeps_inputs)
        for kind, (fp8, keeps_inputs) in KINDS.items()
    }
    seconds = " / ".join(str(s) for s in TAKE_SECONDS)
    print(f"a take's flow state, the flow in {dtype}: per mel frame, and per take of {seconds} s")
    costs = {}
    for kind, size in per_frame.items():
        take_bytes = {seconds: size * MEL_FRAMES_PER_SECOND * seconds for seconds in TAKE_SECONDS}
        smaller = per_frame["exact"] / size
        costs[kind] = {"bytes_per_frame": size, "take_bytes": take_bytes, "smaller": smaller}
        takes = " / ".join(f"{take / 2**20:6.0f}" for take in take_bytes.values())
        print(f"  {kind:10s} {size / 2**20:5.2f} MiB  {takes} MiB  ({smaller:.1f}x smaller)")
    return costs


def relative_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return float((ours - theirs).norm() / theirs.norm().clamp_min(1e-30))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=250)
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--kinds", default="fp8,inputs,inputs-fp8", help="of: fp8, inputs, inputs-fp8")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--fp16-too",
        action="store_true",
        help="also stream the exact state with the flow in float16 (the GPU's precision) and report its error "
        "against the float32 stream: the tolerance the default already runs at, beside float8's",
    )
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    flow = full_flow(args.device, dtype)
    generator = torch.Generator().manual_seed(1)
    prompt = args.prompt_tokens
    inputs = dict(
        prompt_token=torch.randint(0, 6561, (1, prompt), generator=generator, dtype=torch.int32),
        prompt_feat=(torch.randn(1, 2 * prompt, 80, generator=generator) - 5).to(args.device, dtype),
        embedding=torch.randn(1, 192, generator=generator).to(args.device),
    )
    speech = torch.randint(0, 6561, (args.tokens,), generator=generator).tolist()
    kinds = [kind for kind in args.kinds.split(",") if kind]
    with torch.inference_mode():
        exact = stream(flow, inputs, speech, "exact")
        streams = {kind: stream(flow, inputs, speech, kind) for kind in kinds}
        if args.fp16_too:  # the exact state with the flow in float16: the tolerance the default runs at
            flow16 = full_flow(args.device, torch.float16)  # the same seed: the same weights, rounded
            inputs16 = {**inputs, "prompt_feat": inputs["prompt_feat"].half()}
            streams["fp16 compute"] = stream(flow16, inputs16, speech, "exact")
    chunks = []
    print(f"full CosyVoice2 flow, {args.device} {args.dtype}, prompt {prompt} tokens, take {args.tokens}")
    print(" chunk  frames" + "".join(f"  {kind + ' rel. / max':>26s}" for kind in streams))
    for index, theirs in enumerate(exact):
        chunk, line = {"frames": theirs.shape[2]}, f" {index:5d}  {theirs.shape[2]:6d}"
        for kind, mels in streams.items():
            relative, largest = relative_error(mels[index], theirs), float((mels[index] - theirs).abs().max())
            chunk[kind] = {"relative_error": relative, "max_abs_diff": largest}
            line += f"  {relative:12.2e} / {largest:9.2e}"
        chunks.append(chunk)
        print(line)
    layout = EstimatorSolver(flow.decoder, graphs=False).layout
    costs = {str(kept): state_costs(layout, kept) for kept in dict.fromkeys([torch.float16, dtype])}
    if args.json:
        report = {
            "probe": "flow_state_check",
            "args": vars(args),
            "torch": torch.__version__,
            "state_costs": costs,
            "chunks": chunks,
        }
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
