"""``cosyvoice-studio bench``: the benchmark loop — warm-up, then N runs per concurrency, per backend.

Each take decodes exactly ``--tokens`` speech tokens (stop ids ignored) so runs and backends compare
like for like even on random weights. Reports avg/min/max/p95 first-chunk latency, RTF, aggregate
audio-seconds per wall second, the llm/flow/hift time split, peak VRAM per level and overall (NVML, this
process tree), time to ready (load + warm-up) and the VRAM plan (``--vram-budget GIB`` simulates a smaller
card on a larger one); ``--json`` writes everything. The model runs in this process; concurrency comes
from threads. ``--workload NAME`` runs the users' work instead (studio/commands/bench_workload.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from studio.commands.bench_counters import flow_counters, gate_counters
from studio.commands.vram_sampler import VramSampler
from studio.model_layout import family_of

BENCH_TEXT = "The quick brown fox jumps over the lazy dog, and the studio keeps reading without a pause."


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("expected positive numbers")
    return values


def _backend_list(text: str) -> list[str]:
    values = [part.strip() for part in text.split(",") if part.strip()]
    bad = [v for v in values if v not in ("pytorch", "vllm")]
    if not values or bad:
        raise argparse.ArgumentTypeError(f"backends are pytorch and/or vllm, got {text!r}")
    return values


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="benchmark latency and throughput",
        description="Warm up, then time N runs at each concurrency, for each backend, side by side.",
    )
    parser.add_argument("--model", required=True, metavar="DIR", help="CosyVoice2 or CosyVoice3 model folder")
    parser.add_argument(
        "--backends",
        type=_backend_list,
        default=["pytorch", "vllm"],
        metavar="LIST",
        help="pytorch,vllm (default: both, side by side)",
    )
    parser.add_argument("--concurrency", type=_int_list, default=[1], metavar="LIST", help="e.g. 1,4,16")
    parser.add_argument("--runs", type=int, default=3, metavar="N", help="timed runs per concurrency")
    parser.add_argument(
        "--tokens",
        type=int,
        default=100,
        metavar="N",
        help="speech tokens per take (25 per second of audio; default 100 = 4 s)",
    )
    parser.add_argument("--no-stream", dest="stream", action="store_false", help="offline takes (one chunk)")
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument(
        "--warmup-rounds",
        type=int,
        default=1,
        metavar="N",
        help="untimed rounds before each concurrency level (default 1)",
    )
    parser.add_argument(
        "--first-hop",
        type=int,
        default=0,
        metavar="N",
        help="streaming: the first chunk after N speech tokens (0, the default: upstream's 25 + alignment)",
    )
    parser.add_argument(
        "--first-hop-levels",
        type=_int_list,
        metavar="LIST",
        help="with --first-hop: time only these concurrencies with it, after the levels without it",
    )
    parser.add_argument("--text", default=BENCH_TEXT)
    parser.add_argument("--json", metavar="OUT", help="write the results as JSON")
    parser.add_argument(
        "--log-graphs",
        action="store_true",
        help="print each CUDA-graph capture and work-arena growth, with its time (where a take stalled)",
    )
    from studio.commands.bench_workload import add_arguments as add_workload_arguments
    from studio.commands.vllm_flags import add_vllm_arguments

    add_workload_arguments(parser)
    add_vllm_arguments(parser)
    parser.set_defaults(func=run)


def summarize(values: list[float]) -> dict[str, float]:
    import numpy as np

    array = np.asarray(values, dtype=float)
    return {
        "avg": float(array.mean()),
        "min": float(array.min()),
        "max": float(array.max()),
        "p95": float(np.percentile(array, 95)),
    }


def speed_variables_set() -> dict[str, str]:
    """The speed switches (studio/envs.py) set in this environment, as set: the run's configuration."""
    from studio import envs

    return {var.name: var.raw() for var in envs.ALL if var.speed and var.raw() is not None}


def bench_concurrency(loaded, make_request, concurrency: int, runs: int, warmup_rounds: int = 1) -> dict:
    """``runs`` rounds of ``concurrency`` simultaneous takes; per-take and aggregate numbers.

    ``warmup_rounds`` untimed rounds come first: the first time a batch size is seen, the flow captures
    its CUDA graphs, which is start-up work, not the steady state being measured.
    """
    from concurrent.futures import ThreadPoolExecutor

    from studio.runtime.runner import run_take

    takes, throughput = [], []
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="bench") as pool:

        def one_round() -> list:
            futures = [
                pool.submit(run_take, loaded.model, make_request(i), backend=loaded.backend)
                for i in range(concurrency)
            ]
            return [f.result() for f in futures]

        for _ in range(warmup_rounds):
            one_round()
        counters_before = flow_counters(loaded)
        queued_before = gate_counters(loaded).get("queued_takes", 0)
        for _ in range(runs):
            start = time.perf_counter()
            round_takes = one_round()
            wall = time.perf_counter() - start
            takes.extend(round_takes)
            throughput.append(sum(t.audio_seconds for t in round_takes) / wall)
    stages: dict[str, float] = {}
    for take in takes:
        for stage, seconds in take.stage_seconds.items():
            stages[stage] = stages.get(stage, 0.0) + seconds
    counters = {k: v - counters_before.get(k, 0) for k, v in flow_counters(loaded).items()}
    stage_total = sum(stages.values()) or 1.0
    first: dict[str, float] = {}
    for take in takes:
        for stage, seconds in take.first_chunk_stages.items():
            first[stage] = first.get(stage, 0.0) + seconds / len(takes)
    # what the first chunk waited for besides the LM, flow and HiFT: the prompt, text and scheduling
    first["other"] = max(0.0, sum(t.first_chunk_latency for t in takes) / len(takes) - sum(first.values()))
    return {
        "concurrency": concurrency,
        "takes": len(takes),
        "speech_tokens_per_take": takes[0].speech_tokens,
        "audio_seconds_per_take": takes[0].audio_seconds,
        "first_chunk_latency_s": summarize([t.first_chunk_latency for t in takes]),
        "rtf": summarize([t.rtf for t in takes]),
        # playback from the first chunk on: waits for a later chunk (streaming must stay ahead)
        "stall_s": summarize([t.stall_seconds for t in takes]),
        "takes_with_stall": sum(1 for t in takes if t.stall_seconds > 0.0),
        "audio_seconds_per_second": summarize(throughput),
        "stage_seconds": stages,
        "stage_share": {k: v / stage_total for k, v in stages.items()},
        "first_chunk_stages_s": first,
        "flow_solver": counters,  # while timed: solves (batches, requests), graph captures, scheduler ticks/jobs
        "queued_takes": gate_counters(loaded).get("queued_takes", 0) - queued_before,  # waited for VRAM
    }


def bench_backend(args: argparse.Namespace, backend: str) -> dict:
    from studio.engine.protocol import Synthesize
    from studio.runtime.warmup import WARMUP_PROMPT_TEXT, synthetic_voice

    prompt = synthetic_voice(16000, 3.0)

    def make_request(index: int, first_hop: int = 0) -> Synthesize:
        return Synthesize(
            args.text,
            prompt_wav=prompt,
            prompt_sr=16000,
            prompt_text=WARMUP_PROMPT_TEXT,
            stream=args.stream,
            seed=index,
            exact_speech_tokens=args.tokens,
            first_hop_tokens=first_hop,
            request_id=f"bench-{index}",
        )

    with VramSampler() as vram:
        loaded, result = load_and_warm(args, backend, vram)
        if loaded is None:
            return result
        try:
            result["levels"] = []
            for concurrency, first_hop in level_plan(args):
                vram.new_window()
                level = bench_concurrency(
                    loaded,
                    lambda i, hop=first_hop: make_request(i, hop),
                    concurrency,
                    args.runs,
                    args.warmup_rounds,
                )
                level["first_hop_tokens"] = first_hop
                level["peak_vram_bytes"] = vram.window_peak
                result["levels"].append(level)
                print_level(backend, level)
        finally:
            loaded.close()
    result["peak_vram_bytes"] = vram.peak
    return result


def load_and_warm(args: argparse.Namespace, backend: str, vram: VramSampler):
    """(the loaded model, its load figures) after one untimed take; (None, figures) when ``backend`` is not
    available. The caller closes the model."""
    from studio.commands.vllm_flags import vllm_options_from, vram_budget_from
    from studio.runtime import runner
    from studio.runtime.warmup import warmup_request

    loaded = runner.load_model(
        args.model,
        backend,
        fp16=args.fp16,
        vllm_options=vllm_options_from(args),
        vram_budget_gb=vram_budget_from(args),
        warm_beside=True,
    )
    result: dict = {
        "backend_asked": backend,
        "backend": loaded.backend,
        "backend_reason": loaded.backend_reason,
        "load_seconds": loaded.load_seconds,
    }
    if loaded.backend != backend:
        print(f"[{backend}] unavailable: {loaded.backend_reason}", file=sys.stderr)
        result["skipped"] = True
        loaded.close()
        return None, result
    try:
        start = time.perf_counter()
        runner.run_take(loaded.model, warmup_request(), backend=loaded.backend)
    except BaseException:
        loaded.close()
        raise
    result["warmup_seconds"] = time.perf_counter() - start
    result["time_to_ready_s"] = loaded.load_seconds + result["warmup_seconds"]
    plan = getattr(loaded.model, "vram_plan", None)
    result["vram_plan"] = None if plan is None else dataclasses.asdict(plan)
    result["peak_vram_at_ready_bytes"] = vram.peak
    described = f"; {plan.describe()}" if plan is not None else ""
    ready = f"ready in {result['time_to_ready_s']:.1f} s (load {loaded.load_seconds:.1f} s)"
    print(f"[{backend}] {ready}{described}", flush=True)
    return loaded, result


def level_plan(args: argparse.Namespace) -> list[tuple[int, int]]:
    """(concurrency, first hop) of each timed level: every level with --first-hop, or, with
    --first-hop-levels, every level without it and then those with it."""
    if not args.first_hop_levels:
        return [(c, args.first_hop) for c in args.concurrency]
    return [(c, 0) for c in args.concurrency] + [(c, args.first_hop) for c in args.first_hop_levels]


def print_level(backend: str, level: dict) -> None:
    lat, rtf, thr = level["first_chunk_latency_s"], level["rtf"], level["audio_seconds_per_second"]
    split = " ".join(f"{k} {v:.0%}" for k, v in level["stage_share"].items())
    first = " ".join(f"{k} {v * 1000:.0f}" for k, v in level.get("first_chunk_stages_s", {}).items())
    solver = level.get("flow_solver") or {}
    if solver.get("batches"):
        first += f"  flow batch {solver['requests'] / solver['batches']:.1f}, captures {solver['captures']}"
        first += f" (encoder {solver.get('encoder_captures', 0)}, HiFT {solver.get('hift_captures', 0)};"
        first += f" {solver.get('idle_captures', 0)} while idle; {solver.get('stepwise_batches', 0)} a step at a time)"
    if solver.get("ticks"):  # the chunk scheduler: busy launching (host-bound) or waiting for the GPU?
        first += (
            f"  scheduler host {solver['scheduler_host_s']:.1f} s, GPU wait {solver['scheduler_gpu_wait_s']:.1f} s,"
            f" idle {solver['scheduler_idle_s']:.1f} s, tick GPU {solver['tick_gpu_s']:.1f} s,"
            f" LM waited for {solver.get('turn_ticks', 0)} of {solver['ticks']} ticks,"
            f" gathered first chunks {solver.get('gather_s', 0.0) * 1000:.0f} ms"
        )
    peak = level.get("peak_vram_bytes")
    if peak is not None:
        first += f"  peak VRAM {peak / 2**30:.1f} GiB"
    if level.get("takes_with_stall"):
        first += (
            f"  {level['takes_with_stall']} take(s) stalled (max {level['stall_s']['max'] * 1000:.0f} ms)"
        )
    if level.get("queued_takes"):
        first += f"  {level['queued_takes']} take(s) queued for memory"
    hop = f" hop{level['first_hop_tokens']}" if level.get("first_hop_tokens") else ""
    print(
        f"{backend:8}{hop} x{level['concurrency']:<3} first chunk avg {lat['avg'] * 1000:7.0f} ms "
        f"(min {lat['min'] * 1000:.0f}, max {lat['max'] * 1000:.0f}, p95 {lat['p95'] * 1000:.0f})  "
        f"RTF avg {rtf['avg']:.3f} (p95 {rtf['p95']:.3f})  {thr['avg']:.2f} audio-s/s  [{split}]  "
        f"first chunk ms: {first}",
        flush=True,
    )


def print_side_by_side(backends: list[dict]) -> None:
    """One row per concurrency, one column group per backend that ran."""
    ran = [b for b in backends if b.get("levels")]
    if not ran:
        return
    print(
        "\nconcurrency | " + " | ".join(f"{b['backend']}: first chunk ms / RTF / audio-s per s" for b in ran)
    )
    for index, level in enumerate(ran[0]["levels"]):
        cells = []
        for backend in ran:
            row = backend["levels"][index]
            cells.append(
                f"{row['first_chunk_latency_s']['avg'] * 1000:.0f} / {row['rtf']['avg']:.3f} / "
                f"{row['audio_seconds_per_second']['avg']:.2f}"
            )
        print(f"{level['concurrency']:>11} | " + " | ".join(cells))
    for backend in ran:
        peak = backend.get("peak_vram_bytes")
        print(
            f"{backend['backend']}: peak VRAM "
            + (f"{peak / 2**30:.2f} GiB" if peak is not None else "n/a (no GPU)")
        )


GRAPH_LOGGERS = ("studio.tts.flow.streaming.solver", "studio.tts.device.cuda_graphs")


def log_graphs() -> None:
    """The solver's and the graph caches' INFO lines (captures, arena growth) on stderr, timed."""
    import logging

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    for name in GRAPH_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)


def run(args: argparse.Namespace) -> int:
    import platform

    if not Path(args.model).is_dir():
        print(f"error: model folder not found: {args.model}", file=sys.stderr)
        return 2
    if args.first_hop < 0:
        print("error: --first-hop must be 0 (upstream's schedule) or more tokens", file=sys.stderr)
        return 2
    if args.runs < 1 or args.tokens < 1 or args.warmup_rounds < 0:
        print("error: --runs and --tokens must be positive, --warmup-rounds not negative", file=sys.stderr)
        return 2
    if args.log_graphs:
        log_graphs()
    if args.workload or args.rates:
        from studio.commands import bench_workload

        if not args.workload:
            print("error: --rates needs --workload", file=sys.stderr)
            return 2
        return bench_workload.run(args)
    import torch

    report = {
        "model": str(args.model),
        "family": family_of(args.model).name,
        "tokens_per_take": args.tokens,
        "stream": args.stream,
        "runs": args.runs,
        "warmup_rounds": args.warmup_rounds,
        "fp16": args.fp16,
        "first_hop_tokens": args.first_hop,
        "speed_variables": speed_variables_set(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cuda_device": None,
        "backends": [],
    }
    for backend in args.backends:
        try:
            report["backends"].append(bench_backend(args, backend))
        except Exception as exc:  # noqa: BLE001 - one backend failing must not hide the others
            print(f"[{backend}] failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            report["backends"].append({"backend_asked": backend, "error": f"{type(exc).__name__}: {exc}"})
    # Asked only now: a CUDA call before the engine starts would make vLLM spawn its process, not fork it.
    report["cuda_device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    print_side_by_side(report["backends"])
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 1 if any("error" in b for b in report["backends"]) else 0
