"""``bench --workload NAME``: the users' work in process — take lengths from a seeded distribution
(studio/workloads.py), several voices, arrivals closed-loop (``--concurrency``: N clients back to back) or
open-loop (``--rates``: Poisson arrivals, swept). Each take runs to its length exactly (stop ids ignored).

Per take: first audio (from its arrival), underruns (a chunk that arrives after the audio before it has
finished playing; playback starts at the first chunk), errors. Per level: goodput (takes/s with first
audio <= 500 ms and no underrun), first audio p50/p95/p99, underruns, errors, audio-s/s, peak VRAM, takes
queued for memory. ``--json`` writes ``workload`` and ``levels`` (each with its ``backend``).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from studio import workloads
from studio.commands.vram_sampler import VramSampler
from studio.model_layout import family_of

GIB = 2**30
OPEN_LOOP_LEVEL_S = 60.0  # open loop without --takes: a minute of arrivals per rate
MAX_IN_FLIGHT = 512  # open loop: takes running at once (beyond, an arrival waits for a thread)


def _rate_list(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected rates separated by commas, got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError("expected positive rates (takes per second)")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "workload (--workload NAME: the users' work instead of --tokens rounds)"
    )
    group.add_argument(
        "--workload",
        choices=sorted(workloads.WORKLOADS),
        metavar="NAME",
        help="; ".join(f"{w.name}: {w.description}" for w in workloads.WORKLOADS.values()),
    )
    group.add_argument(
        "--rates",
        type=_rate_list,
        metavar="LIST",
        help="open loop: Poisson arrivals at these takes per second (instead of --concurrency)",
    )
    group.add_argument(
        "--takes",
        type=int,
        metavar="N",
        help="takes per level (default: max(32, 2 x concurrency); a minute of arrivals per rate)",
    )
    group.add_argument(
        "--seconds", type=float, metavar="S", help="stop starting takes after S seconds per level"
    )
    group.add_argument(
        "--admit-by-text",
        nargs="?",
        const="expected",
        choices=("expected", "bound"),
        help="admit each take as a model that stops is admitted (at the length its text is expected to take, "
        "growing towards its text's bound of twice that) instead of by its exact length; the takes' texts sized "
        "so that each stops where its text is expected to (expected, the default) or runs to its text's bound "
        "(bound: growing from half its length to all of it, what random weights do through the server)",
    )
    group.add_argument("--voices", type=int, default=workloads.VOICES, metavar="N", help="voices (default 4)")
    group.add_argument(
        "--seed", type=int, default=0, help="the workload's seed (same takes on every machine)"
    )


def voice_prompts(count: int) -> list:
    """``count`` distinct synthetic voices: 3-6 s prompts at different pitches."""
    from studio.runtime.warmup import synthetic_voice

    return [
        synthetic_voice(16000, 3.0 + v % 4, f0=110.0 + 40.0 * (v % 4) + 7.0 * (v // 4), seed=v)
        for v in range(count)
    ]


def prepare_voices(loaded, prompts: list) -> float | None:
    """Make the voices' prompt states before the levels, as the studio (while the user types) and the server
    (once loaded) do: a level measures takes of prepared voices. The seconds it took (None: the model
    cannot)."""
    prepare = getattr(loaded.model, "prepare_voice", None)
    if prepare is None:
        return None
    start = time.perf_counter()
    for prompt in prompts:
        prepare(prompt, 16000)
    return time.perf_counter() - start


def one_take(
    loaded,
    take: workloads.Take,
    prompts: list,
    stream: bool,
    arrived: float,
    seed: int,
    admit_by_text: bool = False,
) -> dict:
    """Run ``take``; its record: first audio and underruns from ``arrived`` (perf_counter), or its error."""
    from studio.engine.protocol import Synthesize
    from studio.runtime.runner import output_rate, run_take
    from studio.runtime.warmup import WARMUP_PROMPT_TEXT

    rate = output_rate(loaded.model)
    chunks: list[tuple[float, float]] = []
    record = {"index": take.index, "seconds": take.seconds, "voice": take.voice}
    try:
        request = Synthesize(
            take.text,
            prompt_wav=prompts[take.voice % len(prompts)],
            prompt_sr=16000,
            prompt_text=WARMUP_PROMPT_TEXT,
            stream=stream,
            seed=seed + take.index,
            exact_speech_tokens=take.speech_tokens,
            admit_by_text=admit_by_text,
            request_id=f"workload-{take.index}",
        )
        stats = run_take(
            loaded.model,
            request,
            backend=loaded.backend,
            on_chunk=lambda audio: chunks.append((time.perf_counter() - arrived, audio.size / rate)),
        )
    except Exception as exc:  # noqa: BLE001 - an error is a figure of the level
        # where it came from (with its causes) in the log: a take's error must be traceable from a GPU run
        print(f"take {take.index} failed:", file=sys.stderr)
        traceback.print_exception(exc, file=sys.stderr)
        return {**record, "error": f"{type(exc).__name__}: {exc}"[:300]}
    count, silence = workloads.underruns(chunks)
    first = chunks[0][0] if chunks else time.perf_counter() - arrived
    return {
        **record,
        "first_audio_s": first,
        "audio_s": stats.audio_seconds,
        "underruns": count,
        "underrun_s": silence,
        "rtf": stats.rtf,
    }


def closed_loop(loaded, takes: list, prompts: list, args, concurrency: int, deadline: float | None) -> list:
    """``concurrency`` clients, each starting its next take when the last one ends."""
    queue, lock, records = iter(takes), threading.Lock(), []

    def client() -> None:
        while deadline is None or time.perf_counter() < deadline:
            with lock:
                take = next(queue, None)
            if take is None:
                return
            record = one_take(
                loaded, take, prompts, args.stream, time.perf_counter(), args.seed, bool(args.admit_by_text)
            )
            with lock:
                records.append(record)

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="workload") as pool:
        for future in [pool.submit(client) for _ in range(concurrency)]:
            future.result()
    return records


def open_loop(loaded, takes: list, prompts: list, args, rate: float, deadline: float | None) -> list:
    """Takes arriving at random (Poisson at ``rate``/s) whatever is still running; first audio counts from
    each take's arrival, so time spent waiting for a thread counts too."""
    arrivals = workloads.poisson_arrivals(rate, len(takes), args.seed)
    start, futures = time.perf_counter(), []
    with ThreadPoolExecutor(
        max_workers=min(MAX_IN_FLIGHT, len(takes)), thread_name_prefix="workload"
    ) as pool:
        for take, at in zip(takes, arrivals, strict=True):
            arrive = start + at
            if deadline is not None and arrive > deadline:
                break
            time.sleep(max(0.0, arrive - time.perf_counter()))
            futures.append(
                pool.submit(
                    one_take, loaded, take, prompts, args.stream, arrive, args.seed, bool(args.admit_by_text)
                )
            )
        return [f.result() for f in futures]


def level_takes(args, level: float, open_loop_level: bool) -> int:
    if args.takes:
        return args.takes
    if open_loop_level:
        return max(1, round(level * (args.seconds or OPEN_LOOP_LEVEL_S)))
    return max(32, 2 * int(level))


def text_ratio(args) -> int:
    """Speech tokens per text token of the takes' texts: admitted by text (``expected``), a take's length is what
    its text is expected to take (so it starts at its length and may grow to twice it); else (exact lengths, or
    ``bound``) its text's bound."""
    if args.admit_by_text in (None, "bound"):
        return workloads.SPEECH_TOKENS_PER_TEXT_TOKEN
    from studio.tts.pipeline import EXPECTED_TOKENS_PER_TEXT_TOKEN

    return EXPECTED_TOKENS_PER_TEXT_TOKEN


def bench_level(loaded, args, prompts: list, vram: VramSampler, level: float, open_level: bool) -> dict:
    from studio.commands.bench_counters import (
        flow_counters,
        gate_counters,
        memory_counters,
        restart_memory_peaks,
    )

    count = level_takes(args, level, open_level)
    ratio = text_ratio(args)
    warm = workloads.takes(args.workload, 4 if open_level else int(level), args.seed + 1, args.voices, ratio)
    for _ in range(args.warmup_rounds):  # untimed: the first batches of a size capture their CUDA graphs
        closed_loop(loaded, warm, prompts, args, len(warm), None)
    takes = workloads.takes(args.workload, count, args.seed, args.voices, ratio)
    vram.new_window()
    counters, gate_before = flow_counters(loaded), gate_counters(loaded)
    gate = getattr(loaded.model, "take_gate", None)
    if gate is not None:
        gate.restart_peak()  # this level's peak from here
    restart_memory_peaks(loaded)
    start = time.perf_counter()
    deadline = None if args.seconds is None else start + args.seconds
    run = open_loop if open_level else closed_loop
    records = run(loaded, takes, prompts, args, level if open_level else int(level), deadline)
    wall = time.perf_counter() - start
    figures = workloads.level_figures(records, wall)
    peak = vram.window_peak
    return {
        "backend": loaded.backend,
        ("rate" if open_level else "concurrency"): level if open_level else int(level),
        **figures,
        **{  # takes that waited for memory, and takes admitted lean (no flow state kept) instead
            name: gate_counters(loaded).get(key, 0) - gate_before.get(key, 0)
            for name, key in (
                ("queued", "queued_takes"),
                ("lean", "lean_takes"),
                ("released", "released_bytes"),
                ("grow_waits", "grow_waits"),
            )
        },
        "admitted_at_once": None if gate is None else gate.running_peak,  # the most takes the gate let run
        "peak_vram_gib": None if peak is None else peak / GIB,
        "take_seconds": workloads.percentiles([t.seconds for t in takes[: len(records)]]),
        "rtf": workloads.percentiles([r["rtf"] for r in records if "rtf" in r]),
        "flow_solver": {k: v - counters.get(k, 0) for k, v in flow_counters(loaded).items()},
        "memory_gib": memory_counters(loaded),
    }


def print_level(level: dict) -> None:
    first, peak = level["first_audio_s"], level["peak_vram_gib"]
    where = f"rate {level['rate']}/s" if "rate" in level else f"x{level['concurrency']}"
    ms = " / ".join("-" if first[k] is None else f"{first[k] * 1000:.0f}" for k in ("p50", "p95", "p99"))
    print(
        f"{level['backend']:8} {where:>10}: {level['takes']} takes, first audio p50/p95/p99 {ms} ms, "
        f"{level['underruns']} underruns ({level['takes_with_underrun']} takes), {level['errors']} errors, "
        f"goodput {level['goodput_takes_per_s']:.2f} takes/s ({level['goodput_share']:.0%}), "
        f"{level['audio_seconds_per_second']:.2f} audio-s/s, {level['queued']} queued for memory, {level.get('lean', 0)} lean"
        + (
            ""
            if level.get("admitted_at_once") is None
            else f", at most {level['admitted_at_once']} admitted at once"
        )
        + ("" if peak is None else f", peak VRAM {peak:.1f} GiB")
        + _memory_words(level.get("memory_gib") or {}),
        flush=True,
    )
    for message in level["error_messages"]:
        print(f"    error: {message}", file=sys.stderr)


def _memory_words(memory: dict) -> str:
    """ ", takes held at most X of Y GiB, allocator peak Z GiB" where the level measured them."""
    words = ""
    if "gate_held_peak" in memory:
        words += f", takes held at most {memory['gate_held_peak']:.1f} of {memory['gate_capacity']:.1f} GiB"
    if "allocated_peak" in memory:
        words += f", allocator peak {memory['allocated_peak']:.1f} GiB"
    return words


def run(args: argparse.Namespace) -> int:
    import platform

    import torch

    from studio.commands.bench import load_and_warm, speed_variables_set

    if (args.takes is not None and args.takes < 1) or (args.seconds is not None and args.seconds <= 0):
        print("error: --takes and --seconds must be positive", file=sys.stderr)
        return 2
    if args.voices < 1:
        print("error: --voices must be at least 1", file=sys.stderr)
        return 2
    open_levels = args.rates is not None
    levels = args.rates if open_levels else args.concurrency
    workload = workloads.WORKLOADS[args.workload]
    report: dict = {
        "workload": workload.name,
        "description": workload.description,
        "arrivals": "poisson" if open_levels else "closed",
        "seed": args.seed,
        "voices": args.voices,
        "model": str(args.model),
        "family": family_of(args.model).name,
        "stream": args.stream,
        "admission": {None: "exact length", "expected": "text", "bound": "text, run to its bound"}[
            args.admit_by_text
        ],
        "fp16": args.fp16,
        "warmup_rounds": args.warmup_rounds,
        "good_first_audio_s": workloads.GOOD_FIRST_AUDIO_S,
        "speed_variables": speed_variables_set(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "backends": [],
        "levels": [],
    }
    prompts = voice_prompts(args.voices)
    for backend in args.backends:
        with VramSampler() as vram:
            try:
                loaded, result = load_and_warm(args, backend, vram)
            except Exception as exc:  # noqa: BLE001 - one backend failing must not hide the others
                print(f"[{backend}] failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                report["backends"].append({"backend_asked": backend, "error": f"{type(exc).__name__}: {exc}"})
                continue
            report["backends"].append(result)
            if loaded is None:
                continue
            try:
                result["voices_prepared_s"] = prepare_voices(loaded, prompts)
                for level in levels:
                    report["levels"].append(bench_level(loaded, args, prompts, vram, level, open_levels))
                    print_level(report["levels"][-1])
            finally:
                loaded.close()
            result["peak_vram_bytes"] = vram.peak
    report["cuda_device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    failed = any("error" in b for b in report["backends"])
    return 1 if failed or not report["levels"] else 0
