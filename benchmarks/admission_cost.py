"""How many takes a VRAM plan's take share runs at once for a workload (studio/workloads.py), computed with
the runtime's own estimate (`state_bytes`) on the full-size flow built on the meta device (no weights, no
GPU). Compared: the state at rest (keys/values of the take's own frames, no prompt), admission by the bound
(a take reserves its token bound up front), and the take gate as it runs (`TakeGate`: admitted with its prompt
and first chunks, growing before each chunk under the banker's rule), simulated: the queue is never empty,
every running take that is not deferred makes one 25-token chunk a step, the figure is the mean number of
takes running. Each with the exact length as bound (bench --workload) and, for a real model that stops by
itself, the bound of its text (20 speech tokens per text token).

    .venv/bin/python benchmarks/admission_cost.py --workload sentences --takes-share-gib 8.81
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import types
from pathlib import Path

import torch

from studio import workloads
from studio.tts.config import read_config
from studio.tts.fabricate import yaml_template
from studio.tts.flow.streaming.solver import solver_for
from studio.tts.memory import STATE_STEPS, state_bytes, take_state_bytes
from studio.tts.take_gate import TakeGate

GIB = 2**30
TAKES_SHARE_24 = (
    9463589606  # the 24 GiB plan's take share (2026-12-04_nvidia-h200_stop22-vram-budget-24.json)
)


def full_flow() -> torch.nn.Module:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cosyvoice2.yaml"
        path.write_text(yaml_template.render_yaml(yaml_template.FULL_DIMENSIONS), encoding="utf-8")
        with torch.device("meta"):
            return read_config(path).build("flow")


CHUNK, LOOKAHEAD, RATIO = 25, 3, 2


def simulate(parts, capacity: float, takes: list[tuple[int, int, int]]) -> tuple[float, float]:
    """(mean takes running, share of chunk steps deferred) for takes (prompt frames, tokens, token bound)
    through a `TakeGate`: admitted with their prompt and first two chunks, growing before each chunk."""
    gate, queue, running = TakeGate(int(capacity)), list(reversed(takes)), []
    counts, deferred, steps = [], 0, 0
    while queue or running:
        while queue:
            prompt, tokens, bound = queue[-1]
            first = state_bytes(parts, prompt + RATIO * min(bound, 2 * CHUNK))
            holding = gate.try_admit(first, state_bytes(parts, prompt + RATIO * bound))
            if holding is None:
                break
            queue.pop()
            holding.need_at = functools.partial(state_bytes, parts)
            running.append([holding, prompt, tokens, 0])
        counts.append(len(running))
        for take in list(running):
            holding, prompt, tokens, done = take
            end = min(tokens, done + CHUNK)
            steps += 1
            if not holding.try_grow(holding.need_for(prompt + RATIO * min(tokens, end + LOOKAHEAD))):
                deferred += 1
                continue
            take[3] = end
            if end == tokens:
                gate.release(holding)
                running.remove(take)
    return statistics.mean(counts), deferred / max(1, steps)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", default="sentences", choices=sorted(workloads.WORKLOADS))
    parser.add_argument("--takes-share-gib", type=float, default=TAKES_SHARE_24 / GIB)
    parser.add_argument("--simulated", type=int, default=1000, help="takes through the simulated gate")
    parser.add_argument("--speech-per-text-token", type=float, default=7.5, help="a real model's, English")
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

    simulated = takes[: args.simulated]
    for name, bounds in (
        ("take gate, exact length as bound", [t.speech_tokens for t in simulated]),
        ("take gate, a real model's text bound", [20 * n for n in text_tokens[: len(simulated)]]),
    ):
        at_once, deferred = simulate(
            parts,
            capacity,
            [
                (p, t.speech_tokens, b)
                for t, p, b in zip(simulated, prompt_frames[: len(simulated)], bounds, strict=True)
            ],
        )
        print(f"  {name:55s} {at_once:.1f} takes at once, {100 * deferred:.1f}% of chunk steps deferred")


if __name__ == "__main__":
    main()
