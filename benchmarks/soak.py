"""Soak test of ONE real engine process: does its memory, thread count or fd count creep up over takes?

Starts the engine through ``EngineClient`` (the studio's own path), loads a model folder with the PyTorch
backend, runs a warm-up (some sequential takes and one burst), then ``--takes`` sequential takes and
``--bursts`` bursts of ``--burst-size`` concurrent takes, each of exactly ``--tokens`` speech tokens. The
engine process's RSS, thread count and open fds are sampled at start, after the load, after the warm-up,
after every take and burst (at once: the engine gives memory back just after it), and when the engine
has been idle for ``--settle`` seconds after the warm-up, the sequential takes and the bursts.

    nice -n 10 .venv/bin/python benchmarks/soak.py [--model DIR] [--takes 500] [--bursts 10]
        [--burst-size 8] [--tokens 40] [--warmup-takes 10] [--settle 2] [--every 50] [--json OUT]

Without ``--model`` the tiny random-weight model is used (built into ``.cache/test-models`` if needed).
Growth is measured from the sample after the warm-up to the settled sample at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from studio.engine.client import EngineClient  # noqa: E402
from studio.engine.protocol import EngineState, Error, LoadModel, State, Synthesize, TakeFinished  # noqa: E402
from studio.runtime.warmup import WARMUP_PROMPT_TEXT, synthetic_voice  # noqa: E402

MB = 1024 * 1024


def tiny_folder() -> Path:
    from studio.tts.fabricate.builder import BUILDER_VERSION, build_model_folder, source_fingerprint

    folder = REPO / ".cache" / "test-models" / f"tiny-v{BUILDER_VERSION}-{source_fingerprint()}"
    if not (folder / "README.md").is_file():
        build_model_folder(folder, size="tiny", seed=0, overwrite=True)
    return folder


def process_facts(pid: int) -> dict:
    """RSS (bytes), threads and open fds of process ``pid`` (psutil when installed, else /proc)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        proc = psutil.Process(pid)
        return {"rss": proc.memory_info().rss, "threads": proc.num_threads(), "fds": proc.num_fds()}
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status if ":" in line)
    return {
        "rss": int(fields["VmRSS"].split()[0]) * 1024,
        "threads": int(fields["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


class Soak:
    def __init__(self, client: EngineClient, tokens: int, timeout: float) -> None:
        self.client, self.tokens, self.timeout = client, tokens, timeout
        self.prompt = synthetic_voice(16000, 2.0)
        self.samples: list[dict] = []
        self.failures: list[str] = []
        self.seed = 0
        self.started = time.monotonic()

    def sample(self, phase: str, index: int = 0) -> dict:
        facts = {"phase": phase, "index": index, "t": round(time.monotonic() - self.started, 2)}
        facts.update(process_facts(self.client.pid))
        self.samples.append(facts)
        return facts

    def request(self) -> Synthesize:
        self.seed += 1
        return Synthesize(
            "Hello there, this is a soak test of the studio.",
            prompt_wav=self.prompt,
            prompt_sr=16000,
            prompt_text=WARMUP_PROMPT_TEXT,
            stream=True,
            seed=self.seed,
            exact_speech_tokens=self.tokens,
        )

    def run(self, count: int) -> None:
        """Send ``count`` takes at once and wait for each one's outcome (the audio is dropped)."""
        pending = {self.client.synthesize(self.request()) for _ in range(count)}
        deadline = time.monotonic() + self.timeout
        while pending:
            event = self.client.get_event(timeout=max(0.1, deadline - time.monotonic()))
            if event is None:
                raise SystemExit(f"takes {sorted(pending)} did not finish within {self.timeout:.0f} s")
            if isinstance(event, State) and event.state is EngineState.CRASHED:
                raise SystemExit(f"the engine crashed: {event.detail}")
            if isinstance(event, (TakeFinished, Error)) and event.request_id in pending:
                pending.discard(event.request_id)
                if isinstance(event, Error):
                    self.failures.append(event.message)
        # READY follows the last outcome; waiting for it keeps bursts from overlapping
        self.client.wait_for_state(EngineState.READY, timeout=self.timeout)


def growth(first: dict, last: dict) -> float:
    return round(100.0 * (last["rss"] - first["rss"]) / first["rss"], 2)


def summary(samples: list[dict]) -> dict:
    by_phase = {s["phase"]: s for s in samples}  # the last sample of each phase
    start, warm, end = by_phase["start"], by_phase["warm"], by_phase["settled"]
    after = [s for s in samples if samples.index(s) > samples.index(warm)]
    return {
        "rss_start_mb": round(start["rss"] / MB, 1),
        "rss_loaded_mb": round(by_phase["loaded"]["rss"] / MB, 1),
        "rss_warm_mb": round(warm["rss"] / MB, 1),
        "rss_end_mb": round(end["rss"] / MB, 1),
        "rss_peak_after_warmup_mb": round(max(s["rss"] for s in after) / MB, 1),
        "growth_after_warmup_pct": growth(warm, end),
        "growth_of_sequential_takes_pct": growth(warm, by_phase["takes-idle"]),
        "growth_of_bursts_pct": growth(by_phase["takes-idle"], end),
        "threads_warm_end": [warm["threads"], end["threads"]],
        "threads_max_after_warmup": max(s["threads"] for s in after),
        "fds_warm_end": [warm["fds"], end["fds"]],
        "fds_max_after_warmup": max(s["fds"] for s in after),
    }


def print_row(sample: dict) -> None:
    print(
        f"{sample['phase']:>10} {sample['index']:>5} {sample['t']:>8.1f} "
        f"{sample['rss'] / MB:>9.1f} {sample['threads']:>7} {sample['fds']:>5}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, help="model folder (default: the tiny random-weight model)")
    parser.add_argument("--takes", type=int, default=500, help="sequential takes after the warm-up")
    parser.add_argument("--bursts", type=int, default=10, help="bursts of concurrent takes after those")
    parser.add_argument("--burst-size", type=int, default=8, help="concurrent takes per burst")
    parser.add_argument("--tokens", type=int, default=40, help="speech tokens per take (exact)")
    parser.add_argument("--warmup-takes", type=int, default=10, help="sequential takes of the warm-up")
    parser.add_argument("--warmup-bursts", type=int, default=1, help="bursts of the warm-up")
    parser.add_argument("--settle", type=float, default=2.0, help="idle seconds before the last sample")
    parser.add_argument("--every", type=int, default=50, help="print every Nth sequential take's sample")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per take or burst")
    parser.add_argument("--json", type=Path, help="write the samples and the summary here")
    args = parser.parse_args(argv)

    model = args.model or tiny_folder()
    log_dir = Path(tempfile.mkdtemp(prefix="soak-"))
    client = EngineClient(log_path=log_dir / "engine.log")
    hello = client.start()
    soak = Soak(client, args.tokens, args.timeout)
    print(f"engine pid {hello.pid}, model {model}, logs in {log_dir}", flush=True)
    print(f"{'phase':>10} {'#':>5} {'t (s)':>8} {'RSS (MB)':>9} {'threads':>7} {'fds':>5}")
    try:
        print_row(soak.sample("start"))
        client.load_model(LoadModel(str(model), backend="pytorch"))
        client.wait_for_state(EngineState.READY, timeout=args.timeout)
        print_row(soak.sample("loaded"))
        for _ in range(args.warmup_takes):
            soak.run(1)
        for _ in range(args.warmup_bursts):
            soak.run(args.burst_size)
        time.sleep(args.settle)
        print_row(soak.sample("warm"))
        for index in range(1, args.takes + 1):
            soak.run(1)
            row = soak.sample("take", index)
            if index % args.every == 0 or index == args.takes:
                print_row(row)
        time.sleep(args.settle)
        print_row(soak.sample("takes-idle"))
        for index in range(1, args.bursts + 1):
            soak.run(args.burst_size)
            print_row(soak.sample("burst", index))
        time.sleep(args.settle)
        print_row(soak.sample("settled"))
    finally:
        client.shutdown()
    result = summary(soak.samples)
    print(json.dumps(result, indent=2))
    if soak.failures:
        print(f"{len(soak.failures)} take(s) failed, first: {soak.failures[0]}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "command": " ".join(sys.argv),
            "model": str(model),
            "config": {k: str(v) for k, v in vars(args).items()},
            "python": platform.python_version(),
            "machine": platform.platform(),
            "cpus": os.cpu_count(),
            "malloc_arena_max_of_user": os.environ.get("MALLOC_ARENA_MAX"),  # else the engine's own, 2
            "summary": result,
            "failures": soak.failures,
            "samples": soak.samples,
        }
        args.json.write_text(json.dumps(payload, indent=1))
    return 1 if soak.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
