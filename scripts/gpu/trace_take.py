"""Where the milliseconds of one streamed take go: a Chrome trace and a timeline table.

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

# (name, start s, end s[, tag]) on perf_counter's clock; tag: a take's seed, what a scheduler tick held
EVENTS: list[tuple] = []
T0 = [0.0]


def span(owner, name: str, label: str | None = None, tag=None) -> None:
    """Wrap `owner.name` so each call is a profiler range and an event (start, end[, `tag(*args)`])."""
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
                ended = time.perf_counter()
                EVENTS.append((label, started, ended) + (() if tag is None else (tag(*args),)))

    setattr(owner, name, wrapped)


def token_stamps(owner) -> None:
    """Wrap the token backend's `generate` so the request and each token's arrival become events."""
    original = owner.generate

    @functools.wraps(original)
    def generate(self, *args, **kwargs):
        started = time.perf_counter()
        seed = kwargs.get("seed")
        EVENTS.append(("lm.request", started, started, seed))
        for index, token in enumerate(original(self, *args, **kwargs)):
            now = time.perf_counter()
            EVENTS.append((f"lm.token.{index + 1}", now, now, seed))
            yield token

    owner.generate = generate


def instrument(backend: str) -> None:
    from studio.tts import cosyvoice2, pipeline, token2wav
    from studio.tts.device import cuda_graphs
    from studio.tts.flow.streaming import batched_encode, batched_solve, incremental, prompt_cache, solver
    from studio.tts.llm import model as lm_model
    from studio.tts.scheduler import chunk_scheduler, gpu_work

    span(cosyvoice2.CosyVoice2, "_prepare_prompt", "prompt.prepare")
    span(lm_model.Qwen2LM, "build_prompt_embeds", "lm.prompt_embeds")
    span(token2wav.Token2WavStream, "_render", "chunk.render")  # the take's wait for a chunk (flow + HiFT)
    span(token2wav, "begin_many", "flow.begin")  # one chunk, or a scheduler tick's chunks
    span(token2wav.Token2WavStream, "vocode", "hift.call")
    span(incremental, "encode_window", "flow.encoder")  # a chunk's own incremental encoder
    span(incremental, "encode_prefixes", "flow.encoder.batch")  # the tick's prefixes, recomputed at once
    span(prompt_cache.PromptFlowCache, "start", "flow.prompt_cache.start")
    span(prompt_cache.PromptFlowCache, "store", "flow.prompt_cache.store")
    span(solver.EstimatorSolver, "solve", "flow.solve")  # STUDIO_FLOW_SCHEDULER=0: each take's own
    span(solver.EstimatorSolver, "solve_many", "flow.solve_many")  # the chunk scheduler's tick
    scheduler = chunk_scheduler.ChunkScheduler  # each tick's encoders begun and its audio delivered
    span(
        gpu_work,
        "begin",
        "tick.begin",
        lambda jobs: f"{len(jobs)} chunks, {sum(j.first for j in jobs)} first",
    )
    span(scheduler, "_deliver", "tick.deliver", lambda _, tick: f"{len(tick.jobs)} chunks")
    # host copies of a tick: any that waits for the GPU's queued work stalls the scheduler's thread
    span(gpu_work, "to_host_async", "copy.speech_to_host")
    span(batched_encode, "to_device", "copy.encoder_inputs")
    span(batched_solve, "to_device", "copy.solve_inputs")
    span(solver, "copy_in", "flow.solve.copy_in")  # the name solver.py calls
    span(solver.EstimatorSolver, "_copy_out", "flow.solve.copy_out")
    span(solver, "batch_inputs", "flow.solve.inputs")
    span(solver.EstimatorSolver, "_replay", "flow.solve.replay")
    span(solver.EstimatorSolver, "_plan", "flow.solve.plan")
    span(solver.EstimatorSolver, "_arena_for", "flow.solve.arena")
    span(cuda_graphs.ShapeGraphs, "_new_graph", "graphs.capture")  # any shape-keyed graph: the solve's too
    span(pipeline.SpeechTokenProducer, "wait_for", "wait.tokens")
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
        for name, s, e, *_ in events
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
    from studio.commands.bench_counters import flow_counters

    return {k: float(v) for k, v in flow_counters(loaded).items() if isinstance(v, (int, float))}


def streams_summary(loaded, request, streams: int) -> str:
    """`streams` takes at once without the profiler: the wall time each span took, summed over takes."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from studio.runtime import runner

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

    for seed0 in (3000, 4000):  # untimed (as bench): the flow captures its graphs for these batch sizes
        one_round(seed0)
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
    for name, s, e, *_ in EVENTS:
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
    text = "\n".join(lines) + "\n\n" + round_timeline(started, takes, seed0=2000)
    with SyncCalls() as syncs:  # a round of its own: recording each wait slows it
        one_round(5000)
    return text + syncs.table()


class SyncCalls:
    """While active (CUDA only): every call that makes the host wait for the GPU, by where in the studio it
    came from (torch's sync debug mode warns on each; the warnings are counted by their innermost studio
    frame). A wait in a take's or the scheduler's thread while ticks are queued stalls them."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __enter__(self) -> SyncCalls:
        import traceback
        import warnings

        import torch

        self._shown = warnings.showwarning
        self._filters = warnings.filters[:]
        warnings.simplefilter("always")

        def record(message, category, filename, lineno, file=None, line=None):
            frames = [f for f in traceback.extract_stack() if "/studio/" in f.filename]
            where = (
                f"{frames[-1].filename.split('/studio/')[-1]}:{frames[-1].lineno} {frames[-1].name}"
                if frames
                else filename
            )
            key = f"{str(message).splitlines()[0][:60]} @ {where}"
            self.counts[key] = self.counts.get(key, 0) + 1

        warnings.showwarning = record
        if torch.cuda.is_available():
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc) -> None:
        import warnings

        import torch

        if torch.cuda.is_available():
            torch.cuda.set_sync_debug_mode("default")
        warnings.showwarning = self._shown
        warnings.filters[:] = self._filters

    def table(self) -> str:
        lines = ["### Calls that waited for the GPU, in one more round (torch's sync debug mode)\n",
                 "| calls | what @ where |", "| --- | --- |"]  # fmt: skip
        lines += [f"| {n} | `{k}` |" for k, n in sorted(self.counts.items(), key=lambda kv: -kv[1])[:25]]
        return "\n".join(lines) + "\n\n"


def round_timeline(started: float, takes: list, seed0: int) -> str:
    """Each take of the round (ms since it began): its LM request, first and 28th token, first chunk out;
    then the scheduler's ticks (encoders begun, audio delivered) until the last first chunk was out."""
    ms = lambda t: 1000 * (t - started)  # noqa: E731
    stamps: dict[tuple[str, int], float] = {}
    for name, s, _, *tag in EVENTS:
        if tag and isinstance(tag[0], int) and name in ("lm.request", "lm.token.1", "lm.token.28"):
            stamps.setdefault((name, tag[0]), s)
    lines = [
        "### Each take of the timed round (ms since the round began)\n",
        "| take | LM request | token 1 | token 28 | first chunk out |",
        "| --- | --- | --- | --- | --- |",
    ]
    outs = []
    for index, take in enumerate(takes):
        seed = seed0 + index
        cells = [stamps.get((name, seed)) for name in ("lm.request", "lm.token.1", "lm.token.28")]
        out = 1000 * take.first_chunk_latency
        outs.append(out)
        lines.append(
            f"| {seed} | "
            + " | ".join("-" if c is None else f"{ms(c):.1f}" for c in cells)
            + f" | {out:.1f} |"
        )
    last = max(outs, default=0.0)
    lines += [
        "\n### The scheduler's ticks until then\n",
        "| event | start ms | took ms | what |",
        "| --- | --- | --- | --- |",
    ]
    for name, s, e, *tag in sorted(EVENTS, key=lambda e: e[1]):
        if name.startswith("tick.") and 0 <= ms(s) <= last + 50:
            lines.append(f"| {name} | {ms(s):.1f} | {1000 * (e - s):.1f} | {tag[0] if tag else ''} |")
    return "\n".join(lines) + "\n\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--backend", default="vllm", choices=["vllm", "pytorch"])
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--warmups", type=int, default=3)
    parser.add_argument(
        "--streams", default="16", help="also time this many takes at once, e.g. 16,64 (1: none)"
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import logging

    import torch
    from torch.profiler import ProfilerActivity, profile

    from studio.commands.bench import BENCH_TEXT
    from studio.engine.protocol import Synthesize
    from studio.runtime import runner
    from studio.runtime.warmup import WARMUP_PROMPT_TEXT, synthetic_voice

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
        counts = [int(n) for n in str(args.streams).split(",") if int(n) > 1]
        concurrent = "".join(streams_summary(loaded, request, n) for n in counts)
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
