"""Where one engine start goes, from the process's first line to its first take.

One fresh process per run (a second engine in one process is not a start): imports, vLLM's fork of its
engine core (or its absence: spawned), our weights, vLLM ready, warm-up. Logs at INFO with
milliseconds since this process began on stderr (vLLM's own lines: its weights, compile, graphs).

    python3 scripts/gpu/start_profile.py --model /tmp/full --json OUT.json [--vram-budget GIB] [--sample PREFIX]

`--sample PREFIX` also samples every thread's stack of this process and of the children it forks
(`stack_sampler.py`): PREFIX-PID.txt per process, a timeline and the functions by inclusive time.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

FORKS: list[dict] = []


def _since() -> float:
    return round(time.perf_counter() - T0, 3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--json", required=True)
    parser.add_argument("--vram-budget", type=float, default=0.0)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--no-warm-beside", action="store_true", help="warm up only after vLLM is ready")
    parser.add_argument("--sample", default="", help="stack samples to PREFIX-PID.txt (this process, forks)")
    args = parser.parse_args()
    sampler = None
    if args.sample:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from stack_sampler import sample_this_and_forks

        sampler = sample_this_and_forks(args.sample, T0, interval=0.02)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format="%(relativeCreated)8.0f ms %(process)d %(threadName)s %(name)s: %(message)s",
    )  # fmt: skip
    os.register_at_fork(
        after_in_parent=lambda: FORKS.append({"at_s": _since(), "thread": threading.current_thread().name})
    )
    marks = {"python_start_s": 0.0}
    import torch

    marks["torch_imported_s"] = _since()
    import vllm

    marks["vllm_imported_s"] = _since()
    from studio.runtime import runner
    from studio.runtime.warmup import warmup_request

    options = {"max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": 8192}
    loaded = runner.load_model(
        args.model,
        "vllm",
        fp16=True,
        vllm_options=options,
        vram_budget_gb=args.vram_budget,
        warm_beside=not args.no_warm_beside,
    )
    marks["loaded_s"] = _since()
    captures = {"at_load": _captures(loaded.model)}
    runner.run_take(loaded.model, warmup_request(), backend=loaded.backend)
    marks["warm_s"] = _since()
    captures["after_warm_up"] = _captures(loaded.model)
    if sampler is not None:
        sampler.stop()
    plan = getattr(loaded.model, "vram_plan", None)
    result = {
        "command": " ".join(sys.argv),
        "backend": loaded.backend,
        "backend_reason": loaded.backend_reason,
        "marks": marks,
        "load_seconds": round(loaded.load_seconds, 3),
        "time_to_ready_s": round(loaded.load_seconds + marks["warm_s"] - marks["loaded_s"], 3),  # as bench
        "process_start_to_ready_s": marks["warm_s"],
        "forks": FORKS,
        "flow_graph_captures": captures,  # a capture in the warm-up after the load is time the start could save
        "vram_plan": None if plan is None else plan.describe(),
        "environment": {k: v for k, v in os.environ.items() if k.startswith(("STUDIO_", "VLLM_"))},
        "versions": {"torch": torch.__version__, "vllm": vllm.__version__},
    }
    print(json.dumps(result, indent=1), flush=True)
    with open(args.json, "w") as handle:
        json.dump(result, handle, indent=1)
    loaded.close()


def _captures(model) -> int:
    from studio.tts.flow.streaming.solver import solver_stats

    return solver_stats(model.model.flow)["captures"]


if __name__ == "__main__":
    main()
