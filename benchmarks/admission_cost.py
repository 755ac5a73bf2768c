"""What admission by a take's token bound costs in concurrency: the takes a VRAM plan's take share holds at
once for a workload (studio/workloads.py), computed with the runtime's own estimate (`take_state_bytes`)
on the full-size flow built on the meta device (no weights, no GPU). Compared: the bound (what the gate
reserves), the same once a take whose prompt state is cached gives its prompt's share back (it reads those
frames in place), the state at rest (keys/values of the take's own frames, no growth headroom, no prompt), and,
for a real model that stops by itself, the bound of its text (20 speech tokens per text token). Then the flow's
work arena (`--arena-share-gib`, by default as large as the take share: the plan splits what is left in halves):
how many takes one batched solve holds at the context of a median and of a long take, with an arena of every
Euler step (one pass) and of one step (`EstimatorSolver` runs a batch a step at a time when one pass does not fit).

    .venv/bin/python benchmarks/admission_cost.py --workload sentences --takes-share-gib 8.81
"""

from __future__ import annotations

import argparse
import statistics
import types

import torch

from studio import workloads
from studio.tts.fabricate.builder import full_size_section
from studio.tts.flow.streaming.incremental import prompt_boundary
from studio.tts.flow.streaming.solver import solver_for
from studio.tts.memory import STATE_STEPS, shared_prompt_bytes, take_state_bytes
from studio.tts.pipeline import EXPECTED_TOKENS_PER_TEXT_TOKEN

GIB = 2**30
TAKES_SHARE_24 = (
    9463589606  # the 24 GiB plan's take share (results/2026-12-04/nvidia-h200_stop22-vram-budget-24.json)
)


def full_flow() -> torch.nn.Module:
    with torch.device("meta"):
        return full_size_section("flow")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", default="sentences", choices=sorted(workloads.WORKLOADS))
    parser.add_argument("--takes-share-gib", type=float, default=TAKES_SHARE_24 / GIB)
    parser.add_argument("--speech-per-text-token", type=float, default=7.5, help="a real model's, English")
    parser.add_argument("--arena-share-gib", type=float, help="the flow arena's share (default: the takes')")
    args = parser.parse_args()
    flow = full_flow()
    parts = types.SimpleNamespace(flow=flow, fp16=True)
    per_frame = solver_for(flow.decoder).layout.bytes_per_frame(STATE_STEPS, 2, torch.float16)
    capacity = args.takes_share_gib * GIB
    takes = workloads.takes(args.workload, 4000)
    prompt_frames = [int(50 * (3.0 + t.voice % 4)) for t in takes]  # bench's voices: 3-6 s prompts
    text_tokens = [max(1, round(t.speech_tokens / args.speech_per_text_token)) for t in takes]
    rows = {
        "state at rest (own frames x per-frame bytes)": [per_frame * 2 * t.speech_tokens for t in takes],
        "reserved, exact length (bench --workload)": [
            take_state_bytes(parts, p, t.speech_tokens) for t, p in zip(takes, prompt_frames, strict=True)
        ],
        "reserved, exact length, prompt read in place (cached)": [
            take_state_bytes(parts, p, t.speech_tokens)
            - shared_prompt_bytes(parts, p, t.speech_tokens, 2 * prompt_boundary(flow, p // 2))
            for t, p in zip(takes, prompt_frames, strict=True)
        ],
        "reserved, a real model's text bound (20 x text tokens)": [
            take_state_bytes(parts, p, 20 * n) for p, n in zip(prompt_frames, text_tokens, strict=True)
        ],
    }
    print(
        f"{args.workload}: estimator state {per_frame / 1e6:.2f} MB per mel frame, "
        f"{per_frame * 50 / 1e6:.0f} MB per second of audio; take share {args.takes_share_gib:.2f} GiB"
    )
    for name, needs in rows.items():
        mean = statistics.mean(needs)
        print(
            f"  {name:55s} mean {mean / GIB:.2f} GiB, median {statistics.median(needs) / GIB:.2f} GiB: "
            f"{capacity / mean:.1f} takes at once"
        )
    # admitted by the state of its expected length, growing to its text bound: the gate keeps one take's growth
    # free (the banker's rule for alike takes: n starts plus one take's headroom fit the share)
    starts = [
        take_state_bytes(parts, p, min(20, EXPECTED_TOKENS_PER_TEXT_TOKEN) * n)
        for p, n in zip(prompt_frames, text_tokens, strict=True)
    ]
    start, bound = (
        statistics.mean(starts),
        statistics.mean(rows["reserved, a real model's text bound (20 x text tokens)"]),
    )
    label = f"admitted by its expected length ({EXPECTED_TOKENS_PER_TEXT_TOKEN} x text tokens)"
    print(
        f"  {label:55s} mean {start / GIB:.2f} GiB, growing to {bound / GIB:.2f}: "
        f"{(capacity - (bound - start)) / start:.1f} takes at once"
    )
    arena = (args.arena_share_gib or args.takes_share_gib) * GIB
    contexts = sorted(p + 2 * t.speech_tokens for t, p in zip(takes, prompt_frames, strict=True))
    print(f"flow arena {arena / GIB:.2f} GiB: takes one batched solve holds (context in 256-frame steps)")
    for name, frames in (
        ("median", statistics.median(contexts)),
        ("95th-percentile", contexts[len(contexts) * 95 // 100]),
    ):
        context = 256 * -(-int(frames) // 256)
        one_pass = arena / (context * per_frame)
        print(
            f"  a {name} take ({context} frames): {one_pass:.1f} with every Euler step, "
            f"{one_pass * STATE_STEPS:.1f} a step at a time"
        )


if __name__ == "__main__":
    main()
