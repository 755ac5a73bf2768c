"""Operations a CosyVoice3 take's flow calls and vocoder pushes dispatch: eager against their CUDA-graph paths.

On a GPU each dispatched operation that computes is a kernel launch, and stop 43's trace showed CosyVoice3
launch-bound (37,474 launches a 4 s take; 555 ms of host time against 148 ms on the GPU). This counts, with a
`TorchDispatchMode` on the CPU, the operations each call of a take dispatches (views included) on a DiT of the
official depth (22 blocks; width and heads do not change the count) with upstream's 10 Euler steps, on
upstream's hop schedule (a first hop that fills the prompt's last chunk and one more, then 25 tokens a hop):

- eager: `solve_plans`, the path without graphs (`STUDIO_CUDA_GRAPHS=0`);
- graphed: a `DiTGraphSolver` whose shapes two earlier takes on the same schedule captured (a stand-in capture
  whose replay re-runs the solve unseen by the count: on CUDA a replay is one launch). What remains is each
  call's own work: its plan (token features, conditions, rotary angles), the arena copies, the inputs.

Then the same for the causal HiFT's pushes of one take (50-frame pushes through `push_many`, the scheduler's
batched path): eager, and with the network through `SpectrumGraphs`.

Usage: python benchmarks/probes/cv3_graph_ops.py [--prompt-tokens 60] [--hops 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import torch
from cv3_flow_batch_check import HOP, Voice, build_flow, first_hop  # this script's folder is on sys.path
from cv3_hift_batch_check import build_hift
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from studio.tts.cosyvoice3.flow_graphs import attach_dit_graphs
from studio.tts.cosyvoice3.hift_batch import HiftPush, attach_hift_graphs, push_many
from studio.tts.cosyvoice3.hift_stream import CausalHiftStream


class CountOperations(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


class UnseenReplay:
    """Stands in for a captured graph: `replay` runs the solve again into the captured outputs, uncounted."""

    def __init__(self, run, outputs):
        self.run, self.outputs = run, outputs

    def replay(self) -> None:
        with _disable_current_modes():
            for kept, new in zip(self.outputs, self.run(), strict=True):
                kept.copy_(new)


def unseen_capture(run, device, pool, context=None, warmup=1):
    outputs = run()
    return UnseenReplay(run, outputs), outputs, pool


def take_operations(flow, voice: Voice, counts: list[int]) -> list[int]:
    """Operations dispatched by each call of one take (the last finalizes)."""
    stream = voice.stream(flow, 10)
    per_call = []
    for index, count in enumerate(counts):
        with CountOperations() as counter:
            stream.mel(voice.tokens[:, :count], index == len(counts) - 1)
        per_call.append(counter.count)
    return per_call


def push_operations(hift, pushes: int = 5, frames: int = 50) -> list[int]:
    """Operations dispatched by each of a take's batched pushes (the last finalizes)."""
    stream, mel = (
        CausalHiftStream(hift),
        torch.randn(1, 80, pushes * frames, generator=torch.Generator().manual_seed(1)),
    )
    per_push = []
    for index in range(pushes):
        with CountOperations() as counter:
            chunk = mel[:, :, index * frames : (index + 1) * frames]
            push_many([HiftPush(stream, chunk, index == pushes - 1)])
        per_push.append(counter.count)
    return per_push


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-tokens", type=int, default=60)
    parser.add_argument("--hops", type=int, default=4, help="hops of 25 tokens after the first")
    parser.add_argument("--json", help="write the counts here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    flow = build_flow("narrow", "cpu", torch.float32)
    first = first_hop(args.prompt_tokens)
    counts = [first + HOP * hop for hop in range(args.hops + 1)]
    voice = Voice(1, args.prompt_tokens, counts[-1], "cpu", torch.float32)
    with torch.inference_mode():
        eager = take_operations(flow, voice, counts)
        graphed_flow = copy.deepcopy(flow)
        solver = attach_dit_graphs(graphed_flow, capture=unseen_capture)
        for _ in range(2):  # each shape eager once, then captured
            take_operations(graphed_flow, voice, counts)
        graphed = take_operations(graphed_flow, voice, counts)
    print(f"DiT of 22 blocks, 10 Euler steps; {args.prompt_tokens}-token prompt; calls at tokens {counts}")
    print(f"eager operations per call:   {eager}")
    print(f"graphed operations per call: {graphed} (and one replay each; {solver.captures} shapes captured)")
    print(f"take: {sum(eager)} eager, {sum(graphed)} graphed ({sum(eager) / sum(graphed):.0f}x fewer)")
    hift = build_hift("tiny", "cpu")  # the official layers at 16 channels: the same operations
    with torch.inference_mode():
        hift_eager = push_operations(hift)
        attach_hift_graphs(hift, capture=unseen_capture)
        for _ in range(2):
            push_operations(hift)
        hift_graphed = push_operations(hift)
    print(
        f"HiFT, 50-frame pushes of one take: {hift_eager} eager, {hift_graphed} graphed (and one replay each)"
    )
    if args.json:
        report = {
            "args": vars(args),
            "calls": counts,
            "eager": eager,
            "graphed": graphed,
            "hift_push_eager": hift_eager,
            "hift_push_graphed": hift_graphed,
        }
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
