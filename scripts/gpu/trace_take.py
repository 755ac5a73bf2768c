"""Where the milliseconds of one streamed take go: a Chrome trace and a timeline table (issue 11, item 5).

Loads the model as `cosyvoice-studio bench` does (same prompt, text and exact token count), warms it up,
then runs one take under torch.profiler (CPU ops and CUDA kernels) with named spans around each stage:
prompt preparation, LM prompt embeddings, the LM request (each token's arrival), every flow call (its
encoder and Euler solve), every HiFT call, and each chunk handed out. Writes

- OUT/trace-take.json.gz: the Chrome trace (chrome://tracing or ui.perfetto.dev),
- OUT/trace-take.md: the timeline (ms since the take started) and where the first chunk's time went,
- OUT/trace-take-events.json: the same events as data.

The spans are added here by wrapping the runtime's functions; the runtime itself is unchanged.
Usage: python scripts/gpu/trace_take.py --model DIR [--backend vllm] [--fp16] [--tokens 100] --out DIR
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

EVENTS: list[tuple[str, float, float]] = []  # (name, start s, end s) on perf_counter's clock
T0 = [0.0]


def span(owner, name: str, label: str | None = None) -> None:
    """Wrap `owner.name` so each call is a profiler range and an event (start, end)."""
    import torch

    original = getattr(owner, name)
    label = label or f"{owner.__name__}.{name}"

    @functools.wraps(original)
    def wrapped(*args, **kwargs):
        started = time.perf_counter()
        with torch.profiler.record_function(label):
            try:
                return original(*args, **kwargs)
            finally:
                EVENTS.append((label, started, time.perf_counter()))

    setattr(owner, name, wrapped)


def token_stamps(owner) -> None:
    """Wrap the token backend's `generate` so the request and each token's arrival become events."""
    original = owner.generate

    @functools.wraps(original)
    def generate(self, *args, **kwargs):
        started = time.perf_counter()
        EVENTS.append(("lm.request", started, started))
        for index, token in enumerate(original(self, *args, **kwargs)):
            now = time.perf_counter()
            EVENTS.append((f"lm.token.{index + 1}", now, now))
            yield token

    owner.generate = generate


def instrument(backend: str) -> None:
    from studio.tts import chunk_scheduler, cosyvoice2, token2wav
    from studio.tts.flow.streaming import incremental, prompt_cache, solver
    from studio.tts.llm import model as lm_model

    span(cosyvoice2.CosyVoice2, "_prepare_prompt", "prompt.prepare")
    span(lm_model.Qwen2LM, "build_prompt_embeds", "lm.prompt_embeds")
    span(token2wav.Token2WavStream, "_render", "chunk.render")  # the take's wait for a chunk (flow + HiFT)
    span(token2wav, "begin_many", "flow.begin")  # one chunk, or a scheduler tick's chunks
    span(token2wav.Token2WavStream, "vocode", "hift.call")
    span(incremental, "_encode", "flow.encoder")  # a chunk's own incremental encoder
    span(incremental, "encode_prefixes", "flow.encoder.batch")  # the tick's prefixes, recomputed at once
    span(prompt_cache.PromptFlowCache, "start", "flow.prompt_cache.start")
    span(prompt_cache.PromptFlowCache, "store", "flow.prompt_cache.store")
    span(solver.EstimatorSolver, "solve", "flow.solve")  # STUDIO_FLOW_SCHEDULER=0: each take's own
    span(solver.EstimatorSolver, "solve_many", "flow.solve_many")  # the chunk scheduler's tick
    span(chunk_scheduler.ChunkScheduler, "_deliver", "scheduler.wait_gpu")
    span(solver.EstimatorSolver, "_copy_in", "flow.solve.copy_in")
    span(solver.EstimatorSolver, "_copy_out", "flow.solve.copy_out")
    span(solver, "batch_inputs", "flow.solve.inputs")
    span(solver.EstimatorSolver, "_replay", "flow.solve.replay")
    span(solver.EstimatorSolver, "_plan", "flow.solve.plan")
    span(solver.EstimatorSolver, "_arena_for", "flow.solve.arena")
    span(solver.EstimatorSolver, "_capture", "flow.solve.capture")
    span(cosyvoice2.SpeechTokenProducer, "wait_for", "wait.tokens")
    if backend == "vllm":
        from studio.tts.llm.vllm.backend import VllmTokenBackend

        token_stamps(VllmTokenBackend)
    else:
        from studio.tts.llm.torch_backend import TorchTokenBackend

        token_stamps(TorchTokenBackend)


def timeline(first_chunk_s: float) -> tuple[list[dict], str]:
    t0 = T0[0]
    events = sorted(EVENTS, key=lambda e: e[1])
    rows = [
        {"event": name, "start_ms": round((s - t0) * 1000, 2), "ms": round((e - s) * 1000, 2)}
        for name, s, e in events
        if s >= t0
    ]
    tokens = [r for r in rows if r["event"].startswith("lm.token.")]
    lines = ["| event | start (ms since the take began) | took (ms) |", "| --- | --- | --- |"]
    shown = [r for r in rows if not r["event"].startswith("lm.token.") and r["event"] != "wait.tokens"]
    for index in (1, 2, 10, 28, 50, 75, 100):
        shown += [r for r in tokens if r["event"] == f"lm.token.{index}"]
    for r in sorted(shown, key=lambda r: r["start_ms"]):
        lines.append(f"| {r['event']} | {r['start_ms']:.1f} | {r['ms']:.1f} |")
    lines.append(f"| first chunk handed out | {first_chunk_s * 1000:.1f} | |")
    if len(tokens) > 2:
        gaps = [b["start_ms"] - a["start_ms"] for a, b in zip(tokens, tokens[1:], strict=False)]
        lines.append(
            f"\nLM: first token at {tokens[0]['start_ms']:.1f} ms after the take began; then "
            f"{sum(gaps) / len(gaps):.2f} ms per token on average (min {min(gaps):.2f}, max {max(gaps):.2f})."
        )
        first_render = next((r["start_ms"] for r in rows if r["event"] == "chunk.render"), None)
        before = [
            g
            for g, t in zip(gaps, tokens[1:], strict=False)
            if first_render is None or t["start_ms"] <= first_render
        ]
        after = gaps[len(before) :]
        if before:
            lines.append(
                f"Before the first flow call {sum(before) / len(before):.2f} ms per token ({len(before)} gaps); "
                + (
                    f"after it {sum(after) / len(after):.2f} ms ({len(after)} gaps)."
                    if after
                    else "none after it."
                )
            )
    first_flow = next((r for r in rows if r["event"] == "chunk.render"), None)
    first_hift = next((r for r in rows if r["event"] == "hift.call"), None)
    waited = sum(
        r["ms"]
        for r in rows
        if r["event"] == "wait.tokens" and first_flow and r["start_ms"] < first_flow["start_ms"]
    )
    if first_flow and first_hift:
        lines.append(
            f"First chunk: waited {waited:.1f} ms for its tokens, flow and HiFT {first_flow['ms']:.1f} ms "
            f"(HiFT's part {first_hift['ms']:.1f} ms), handed out at {first_chunk_s * 1000:.1f} ms."
        )
    return rows, "\n".join(lines) + "\n"


def first_chunk_gpu(trace: dict) -> str:
    """The GPU's side of the first chunk in the Chrome trace: kernels run while the take waited for it, the
    time they kept the GPU busy, the kernels that took most, and the gaps (GPU idle, waiting for the host)."""
    events = trace.get("traceEvents", [])
    render = min(
        (e for e in events if e.get("name") == "chunk.render" and e.get("ph") == "X"),
        key=lambda e: e["ts"],
        default=None,
    )
    if render is None:
        return ""
    start, end = render["ts"], render["ts"] + render["dur"]
    kernels = sorted(
        (
            e
            for e in events
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and start <= e.get("ts", -1) <= end
        ),
        key=lambda e: e["ts"],
    )
    if not kernels:
        return ""
    busy = sum(k["dur"] for k in kernels) / 1000
    by_name: dict[str, float] = {}
    for k in kernels:
        by_name[k["name"][:70]] = by_name.get(k["name"][:70], 0.0) + k["dur"] / 1000
    gaps = [
        ((a["ts"] + a["dur"] - start) / 1000, (b["ts"] - a["ts"] - a["dur"]) / 1000)
        for a, b in zip(kernels, kernels[1:], strict=False)
        if b["ts"] - a["ts"] - a["dur"] > 1000
    ]
    lines = [
        "\n## The first chunk on the GPU (this trace)\n",
        f"{len(kernels)} kernels and copies while the take waited {render['dur'] / 1000:.1f} ms for it: busy "
        f"{busy:.1f} ms ({1000 * busy / len(kernels):.1f} us each on average); idle gaps over 1 ms: "
        + (", ".join(f"{g:.1f} ms at +{at:.1f}" for at, g in gaps) or "none")
        + "\n",
        "| kernel | ms |",
        "| --- | --- |",
    ]
    lines += [f"| `{name}` | {ms:.2f} |" for name, ms in sorted(by_name.items(), key=lambda kv: -kv[1])[:10]]
    return "\n".join(lines) + "\n"


def describe(stats) -> str:
    stages = json.dumps({k: round(v, 4) for k, v in stats.stage_seconds.items()})
    return (
        f"first chunk {stats.first_chunk_latency * 1000:.1f} ms, total {stats.total_seconds * 1000:.1f} ms, "
        f"audio {stats.audio_seconds:.2f} s, RTF {stats.rtf:.3f}, {stats.chunks} chunks; stage seconds {stages}"
    )


def counters(loaded) -> dict[str, float]:
    """The flow's counters as bench reports them (solver batches and captures, scheduler ticks and turns)."""
    from studio.commands.bench import flow_counters

    return {k: float(v) for k, v in flow_counters(loaded).items() if isinstance(v, (int, float))}


def streams_summary(loaded, request, streams: int) -> str:
    """`streams` takes at once without the profiler: the wall time each span took, summed over takes."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from studio.engine import runner

    EVENTS.clear()
    lateness: list[float] = []
    stop = threading.Event()

    def probe() -> None:  # asks for the interpreter every ms: how late it gets it shows the lock's queue
        while not stop.is_set():
            asked = time.perf_counter()
            time.sleep(0.001)
            lateness.append(time.perf_counter() - asked - 0.001)

    def one_round(seed0: int) -> list:
        with ThreadPoolExecutor(streams) as pool:
            return list(pool.map(lambda i: runner.run_take(loaded.model, request(seed0 + i), backend=loaded.backend),
                                 range(streams)))  # fmt: skip

    one_round(3000)  # untimed: the flow captures its graphs for these batch sizes on first sight
    before = counters(loaded)
    EVENTS.clear()
    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    started = time.perf_counter()
    takes = one_round(2000)
    wall = time.perf_counter() - started
    after = counters(loaded)
    stop.set()
    prober.join()
    lateness.sort()
    totals: dict[str, list[float]] = {}
    for name, s, e in EVENTS:
        if not name.startswith("lm.token."):
            totals.setdefault(name, []).append(e - s)
    audio = sum(t.audio_seconds for t in takes)
    lines = [
        f"## {streams} takes at once, without the profiler\n",
        f"wall {wall:.2f} s, {audio / wall:.1f} audio-s per s; per span: calls, summed wall time (threads overlap, "
        "so a sum beyond the wall time means spans waited for each other or the interpreter lock)\n",
        f"A thread sleeping 1 ms at a time woke {1000 * sum(lateness) / max(1, len(lateness)):.2f} ms late on average "
        f"(p95 {1000 * lateness[int(0.95 * (len(lateness) - 1))] if lateness else 0:.2f} ms): the wait for the "
        "interpreter lock.\n",
        "Counters over the timed round: "
        + ", ".join(f"{k} {after[k] - before[k]:g}" for k in after if after[k] != before[k])
        + "\n",
        "| span | calls | summed s | mean ms |",
        "| --- | --- | --- | --- |",
    ]
    for name, values in sorted(totals.items(), key=lambda kv: -sum(kv[1])):
        lines.append(
            f"| {name} | {len(values)} | {sum(values):.2f} | {1000 * sum(values) / len(values):.1f} |"
        )
    return "\n".join(lines) + "\n\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--backend", default="vllm", choices=["vllm", "pytorch"])
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--warmups", type=int, default=3)
    parser.add_argument("--streams", type=int, default=16, help="also time this many takes at once (1: no)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import logging

    import torch
    from torch.profiler import ProfilerActivity, profile

    from studio.commands.bench import BENCH_TEXT
    from studio.engine import runner
    from studio.engine.protocol import Synthesize
    from studio.engine.warmup import WARMUP_PROMPT_TEXT, synthetic_voice

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    instrument(args.backend)
    loaded = runner.load_model(args.model, args.backend, fp16=args.fp16)
    prompt = synthetic_voice(16000, 3.0)

    def request(seed: int) -> Synthesize:
        return Synthesize(
            BENCH_TEXT,
            prompt_wav=prompt,
            prompt_sr=16000,
            prompt_text=WARMUP_PROMPT_TEXT,
            stream=True,
            seed=seed,
            exact_speech_tokens=args.tokens,
            request_id=f"trace-{seed}",
        )

    try:
        for seed in range(args.warmups):
            runner.run_take(loaded.model, request(seed), backend=loaded.backend)
        # the timeline from a take without the profiler (which slows every launch), then the traced one
        EVENTS.clear()
        T0[0] = time.perf_counter()
        plain = runner.run_take(loaded.model, request(999), backend=loaded.backend)
        plain_rows, plain_table = timeline(plain.first_chunk_latency)
        concurrent = streams_summary(loaded, request, args.streams) if args.streams > 1 else ""
        EVENTS.clear()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        with profile(activities=activities) as prof:
            T0[0] = time.perf_counter()
            stats = runner.run_take(loaded.model, request(1000), backend=loaded.backend)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        raw = out / "trace-take.json"
        prof.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.open(out / "trace-take.json.gz", "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
        gpu = first_chunk_gpu(json.loads(raw.read_text()))
        raw.unlink()
        rows, table = timeline(stats.first_chunk_latency)
        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
        text = (
            f"# One streamed take: {args.backend}, fp16 {args.fp16}, {args.tokens} tokens, {device}\n\n"
            f"## Without the profiler\n\n{describe(plain)}\n\n{plain_table}\n{concurrent}"
            f"## Under torch.profiler (trace-take.json.gz; every launch is slower there)\n\n"
            f"{describe(stats)}\n\n{table}\n{gpu}"
        )
        (out / "trace-take.md").write_text(text, encoding="utf-8")
        events = {"plain": plain_rows, "profiled": rows}
        (out / "trace-take-events.json").write_text(json.dumps(events, indent=1) + "\n", encoding="utf-8")
        print(text)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    finally:
        loaded.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
