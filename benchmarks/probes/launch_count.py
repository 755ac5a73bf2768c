"""How many kernels one scheduler tick's parts launch on a GPU, counted on the CPU: the operators (views and
allocations left out) that CosyVoice2's full-size flow dispatches for one batch of takes' chunks in its batched
encoder (each take's whole prefix again) and its batched Euler solve, and that HiFT dispatches for one batch.

A CUDA graph replays those kernels without their launch cost, but each kernel still runs for a few microseconds
however small its work, so a tick's GPU time has a floor of about kernels x that minimum, whatever the batch. The
counts hold for any number of takes and frames (the solve is the static one the GPU captures); on the CPU its
compute is real (fp32, random weights), so keep the takes few and the chunk short.

Usage: python benchmarks/probes/launch_count.py [--takes 2] [--prompt-tokens 50] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from flow_state_check import full_flow  # noqa: E402

from studio.tts.fabricate.builder import full_size_section  # noqa: E402
from studio.tts.flow.streaming.incremental import IncrementalFlow, begin_many  # noqa: E402
from studio.tts.flow.streaming.solver import solver_for  # noqa: E402

ALLOCATIONS = {"empty", "empty_strided", "new_empty", "new_empty_strided", "detach", "lift_fresh", "alias"}
SYNCS = {
    "_local_scalar_dense",
    "item",
    "nonzero",
}  # a read of device values by the host: the GPU drains first


class KernelCount(TorchDispatchMode):
    """Operators dispatched meanwhile that run a kernel on a GPU: no views, no bare allocations."""

    def __init__(self):
        super().__init__()
        self.kernels: collections.Counter = collections.Counter()
        self.syncs = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in SYNCS:
            self.syncs += 1
        elif not func.is_view and name not in ALLOCATIONS:
            self.kernels[name] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.kernels.values())


def full_hift() -> torch.nn.Module:
    torch.manual_seed(0)
    hift = full_size_section("hift").eval()
    hift.fuse_weight_norm()  # as the loader leaves it (load_hift_state_dict)
    return hift


def counted(work) -> KernelCount:
    with torch.inference_mode(), KernelCount() as count:
        work()
    return count


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--takes", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    flow = full_flow("cpu", torch.float32)
    generator = torch.Generator().manual_seed(1)
    prompt = args.prompt_tokens
    takes, speech = [], []
    for _ in range(args.takes):
        takes.append(
            IncrementalFlow(
                flow,
                prompt_token=torch.randint(0, 6561, (1, prompt), generator=generator, dtype=torch.int32),
                prompt_feat=torch.randn(1, 2 * prompt, 80, generator=generator) - 5,
                embedding=torch.randn(1, 192, generator=generator),
                recompute_encoder=True,  # the chunk scheduler's way on a GPU: one encoder batch a tick
            )
        )
        speech.append(torch.randint(0, 6561, (60,), generator=generator).tolist())
    with torch.inference_mode():  # each take's first chunk (25 tokens and 3 of lookahead), one by one
        for take, tokens in zip(takes, speech, strict=True):
            take.mel(tokens[:28], finalize=False)
    chunks = [(take, tokens[:53], False) for take, tokens in zip(takes, speech, strict=True)]
    steps: list = []
    encoder = counted(lambda: steps.extend(begin_many(chunks)))
    solver = solver_for(flow.decoder)
    solve = counted(lambda: solver.solve_many([step.request for step in steps]))
    for take, step in zip(takes, steps, strict=True):
        take.complete(step)
    hift = full_hift()
    frames = 108  # a steady chunk's HiFT input: 100 new mel frames after 8 cached
    mel = torch.randn(args.takes, 80, frames, generator=generator) - 5
    source = torch.zeros(args.takes, 1, 3840)
    vocoder = counted(lambda: hift.inference_rows(mel, source, [None] * args.takes))
    parts = {"flow encoder batch": encoder, "flow solve batch": solve, "HiFT batch": vocoder}
    print(
        f"CosyVoice2 full size, {args.takes} takes' second chunks (25 tokens), CPU fp32: kernels a GPU would run"
    )
    for name, count in parts.items():
        top = ", ".join(f"{op} {n}" for op, n in count.kernels.most_common(6))
        print(f"{name:20s} {count.total:6d} kernels, {count.syncs} host reads; most: {top}")
    if args.json:
        report = {
            "probe": "launch_count",
            "args": vars(args),
            "torch": torch.__version__,
            "parts": {
                name: {"kernels": count.total, "host_reads": count.syncs, "by_operator": dict(count.kernels)}
                for name, count in parts.items()
            },
        }
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
