"""What keeping a take's flow keys/values in float8 (`STUDIO_FLOW_STATE_FP8=1`) costs in accuracy and saves in
memory, on CosyVoice2's full-size flow with random weights (built from the official yaml in memory; no folder).

Streams one take (a prompt of --prompt-tokens, then --tokens speech tokens on upstream's hop schedule: 25, 50,
100 tokens, each call with 3 lookahead tokens) twice through `IncrementalFlow`: its state in the compute dtype,
then in float8 with a scale per key or value vector. Prints per chunk the mel's relative error (L2 norm of the
difference over the exact chunk's) and the largest absolute difference, and the state's bytes per mel frame
both ways. Random weights are not a trained model's: the figure is a proxy until measured on real weights.

Usage: python benchmarks/probes/flow_state_fp8_check.py [--tokens 250] [--prompt-tokens 100]
       [--device cpu|cuda] [--dtype float32|float16] [--threads 2] [--fp16-too] [--json out.json]
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
from studio.tts.flow.streaming.solver import solver_for
from studio.tts.memory import STATE_STEPS

LOOKAHEAD = 3


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


def stream(flow, inputs: dict, speech: list[int], fp8: bool) -> list[torch.Tensor]:
    os.environ["STUDIO_FLOW_STATE_FP8"] = "1" if fp8 else "0"
    take = IncrementalFlow(flow, **inputs)
    return [take.mel(speech[:end], finalize=final)[0].float() for end, final in hop_ends(len(speech))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=250)
    parser.add_argument("--prompt-tokens", type=int, default=100)
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
    with torch.inference_mode():
        exact = stream(flow, inputs, speech, fp8=False)
        quantized = stream(flow, inputs, speech, fp8=True)
        half = None
        if args.fp16_too:
            flow16 = full_flow(args.device, torch.float16)  # the same seed: the same weights, rounded
            inputs16 = {**inputs, "prompt_feat": inputs["prompt_feat"].half()}
            half = stream(flow16, inputs16, speech, fp8=False)
    layout = solver_for(flow.decoder).layout
    state_dtype = torch.float16 if args.device == "cuda" else dtype
    bytes_exact = stored_bytes_per_frame(layout, STATE_STEPS, 2, state_dtype, False)
    bytes_fp8 = stored_bytes_per_frame(layout, STATE_STEPS, 2, state_dtype, True)
    chunks = []
    print(f"full CosyVoice2 flow, {args.device} {args.dtype}, prompt {prompt} tokens, take {args.tokens}")
    print(" chunk  frames  relative error  max |diff|" + ("  fp16's relative error" if half else ""))
    for index, (ours, theirs) in enumerate(zip(quantized, exact, strict=True)):
        relative = float((ours - theirs).norm() / theirs.norm().clamp_min(1e-30))
        largest = float((ours - theirs).abs().max())
        chunk = {"frames": ours.shape[2], "relative_error": relative, "max_abs_diff": largest}
        line = f" {index:5d}  {ours.shape[2]:6d}  {relative:14.2e}  {largest:10.2e}"
        if half is not None:
            chunk["fp16_relative_error"] = float(
                (half[index] - theirs).norm() / theirs.norm().clamp_min(1e-30)
            )
            line += f"  {chunk['fp16_relative_error']:22.2e}"
        chunks.append(chunk)
        print(line)
    print(
        f"state per mel frame: {bytes_exact / 2**20:.2f} MiB in {state_dtype}, {bytes_fp8 / 2**20:.2f} MiB fp8"
    )
    if args.json:
        report = {
            "probe": "flow_state_fp8_check",
            "args": vars(args),
            "torch": torch.__version__,
            "state_bytes_per_frame": {
                "exact": bytes_exact,
                "fp8": bytes_fp8,
                "exact_dtype": str(state_dtype),
            },
            "chunks": chunks,
        }
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
