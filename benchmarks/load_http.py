"""Load test of a running speech server (`cosyvoice-studio serve`): N clients, each sending streamed PCM
requests back to back for T seconds; prints first-byte latency p50/p95/p99, the error rate and audio
seconds per second. Loopback servers only, and bounded (N <= 256, T <= 3600), so it can never be aimed at
somebody else's machine by mistake.

    .venv/bin/python benchmarks/load_http.py --url http://127.0.0.1:8080 --key KEY --voice narrator \\
        --clients 4 --seconds 30 --json OUT.json

``--workload NAME`` (studio/workloads.py, as `bench --workload`) sends the users' work instead: seeded take
lengths (the text sized so that the server's length bound, 20 speech tokens per text token, lands on each),
``--voice a,b,c`` several voices, ``--clients LIST`` closed-loop levels or ``--rates LIST`` Poisson arrivals,
``--takes N`` per level; it writes ``workload`` and ``levels[]`` with the keys `bench --workload` writes
(first audio is the first byte; an underrun, bytes that arrive after the audio before them finished playing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from urllib.parse import urlparse

from studio import workloads

TEXT = "The quick brown fox jumps over the lazy dog, and the server keeps reading without a pause."


def loopback(url: str) -> bool:
    from studio.commands.serve import is_loopback

    return is_loopback(urlparse(url).hostname or "")


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


async def client(http, args, deadline: float, results: list) -> None:
    body = {"input": args.text, "voice": args.voice, "response_format": "pcm", "stream": True}
    while time.monotonic() < deadline:
        start = time.perf_counter()
        first, size, ok = None, 0, False
        try:
            async with http.stream("POST", "/v1/audio/speech", json=body) as answer:
                ok = answer.status_code == 200
                async for piece in answer.aiter_raw():
                    first = first if first is not None else time.perf_counter() - start
                    size += len(piece)
        except Exception:  # noqa: BLE001 - counted as an error
            ok = False
        results.append(
            {"ok": ok, "first_byte_s": first, "seconds": time.perf_counter() - start, "bytes": size}
        )


async def workload_take(http, args, take, voices: list[str], arrived: float) -> dict:
    """One workload take: first byte and underruns from ``arrived`` (perf_counter), or its error."""
    body = {
        "input": take.text,
        "voice": voices[take.voice % len(voices)],
        "response_format": "pcm",
        "stream": True,
        "seed": take.index,
    }
    pieces: list[tuple[float, float]] = []
    status = None
    record = {"index": take.index, "seconds": take.seconds, "voice": take.voice}
    try:
        async with http.stream("POST", "/v1/audio/speech", json=body) as answer:
            status = answer.status_code
            if status != 200:
                await answer.aread()
                retry = answer.headers.get("retry-after")
                error = f"HTTP {status}" + (" (Retry-After)" if retry else "")
                return {**record, "error": error, "status": status}
            async for piece in answer.aiter_raw():
                pieces.append((time.perf_counter() - arrived, len(piece) / 2 / args.rate))
    except Exception as exc:  # noqa: BLE001 - counted as an error
        return {**record, "error": f"{type(exc).__name__}", "status": status}
    if not pieces:
        return {**record, "error": "no audio", "status": status}
    count, silence = workloads.underruns(pieces)
    return {
        **record,
        "first_audio_s": pieces[0][0],
        "audio_s": sum(s for _, s in pieces),
        "underruns": count,
        "underrun_s": silence,
        "status": status,
    }


async def workload_level(http, args, voices: list[str], level: float, open_loop: bool) -> dict:
    count = args.takes or (round(level * args.seconds) if open_loop else max(32, 2 * int(level)))
    takes = workloads.takes(args.workload, count, args.seed, len(voices))
    records: list = []
    started = time.perf_counter()
    if open_loop:
        arrivals = workloads.poisson_arrivals(level, count, args.seed)

        async def arrive(take, at):
            await asyncio.sleep(max(0.0, started + at - time.perf_counter()))
            records.append(await workload_take(http, args, take, voices, started + at))

        await asyncio.gather(*(arrive(t, at) for t, at in zip(takes, arrivals, strict=True)))
    else:
        queue = iter(takes)

        async def client_loop():
            for take in queue:
                records.append(await workload_take(http, args, take, voices, time.perf_counter()))

        await asyncio.gather(*(client_loop() for _ in range(int(level))))
    wall = time.perf_counter() - started
    statuses: dict[str, int] = {}
    for record in records:
        statuses[str(record.get("status"))] = statuses.get(str(record.get("status")), 0) + 1
    refused = sum(1 for r in records if r.get("status") in (429, 503))
    key = "rate" if open_loop else "concurrency"
    return {
        key: level if open_loop else int(level),
        **workloads.level_figures(records, wall),
        "refused": refused,
        "status_codes": statuses,
        "queued": None,
        "peak_vram_gib": None,
        "take_seconds": workloads.percentiles([t.seconds for t in takes]),
    }


async def run_workload(args) -> dict:
    import httpx

    voices = [v.strip() for v in args.voice.split(",") if v.strip()]
    open_loop = args.rates is not None
    levels = args.rates if open_loop else args.clients
    headers = {"Authorization": f"Bearer {args.key}"} if args.key else {}
    most = int(max(levels)) if not open_loop else 256
    limits = httpx.Limits(max_connections=most)
    report: dict = {
        "workload": args.workload,
        "description": workloads.WORKLOADS[args.workload].description,
        "arrivals": "poisson" if open_loop else "closed",
        "seed": args.seed,
        "voices": voices,
        "url": args.url,
        "machine": platform.processor() or platform.machine(),
        "good_first_audio_s": workloads.GOOD_FIRST_AUDIO_S,
        "levels": [],
    }
    async with httpx.AsyncClient(base_url=args.url, headers=headers, timeout=600, limits=limits) as http:
        health = (await http.get("/health")).json()
        report["server"] = {k: health.get(k) for k in ("backend", "device", "model")}
        for level in levels:
            figures = await workload_level(http, args, voices, level, open_loop)
            report["levels"].append(figures)
            first = figures["first_audio_s"]
            where = f"rate {level}/s" if open_loop else f"{int(level)} clients"
            p95 = "-" if first["p95"] is None else f"{first['p95'] * 1000:.0f}"
            print(
                f"{where}: {figures['takes']} takes, first byte p95 {p95} ms, {figures['underruns']} underruns, "
                f"{figures['errors']} errors ({figures['refused']} refused), goodput "
                f"{figures['goodput_takes_per_s']:.2f} takes/s, {figures['audio_seconds_per_second']:.2f} audio-s/s",
                flush=True,
            )
    return report


async def run(args) -> dict:
    import httpx

    headers = {"Authorization": f"Bearer {args.key}"} if args.key else {}
    limits = httpx.Limits(max_connections=args.clients)
    results: list = []
    async with httpx.AsyncClient(base_url=args.url, headers=headers, timeout=600, limits=limits) as http:
        health = (await http.get("/health")).json()
        started = time.monotonic()
        deadline = started + args.seconds
        await asyncio.gather(*(client(http, args, deadline, results) for _ in range(args.clients)))
        wall = time.monotonic() - started
    firsts = [r["first_byte_s"] for r in results if r["ok"] and r["first_byte_s"] is not None]
    audio_seconds = sum(r["bytes"] for r in results if r["ok"]) / 2 / args.rate
    return {
        "url": args.url,
        "clients": args.clients,
        "seconds": args.seconds,
        "wall_s": wall,
        "server": {k: health.get(k) for k in ("backend", "device", "model")},
        "machine": platform.processor() or platform.machine(),
        "requests": len(results),
        "error_rate": (sum(not r["ok"] for r in results) / len(results)) if results else None,
        "first_byte_ms": {
            name: (None if value is None else value * 1000)
            for name, value in (
                ("p50", percentile(firsts, 0.5)),
                ("p95", percentile(firsts, 0.95)),
                ("p99", percentile(firsts, 0.99)),
                ("mean", statistics.mean(firsts) if firsts else None),
            )
        },
        "audio_seconds_per_second": audio_seconds / wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--key", default="")
    parser.add_argument("--voice", required=True)
    parser.add_argument("--clients", default="4", help="clients (--workload: a list of levels, e.g. 16,64)")
    parser.add_argument("--seconds", type=float, default=30.0, help="test length (--rates: of arrivals)")
    parser.add_argument("--workload", choices=sorted(workloads.WORKLOADS), help="the users' work (see above)")
    parser.add_argument("--rates", help="--workload: Poisson arrivals at these takes per second, e.g. 1,2,4")
    parser.add_argument("--takes", type=int, help="--workload: takes per level")
    parser.add_argument("--seed", type=int, default=0, help="--workload: its seed")
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--rate", type=int, default=24000, help="the server's sample rate (X-Sample-Rate)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    if not loopback(args.url):
        print(
            "error: load tests run against a server on this machine only (127.0.0.1, ::1, localhost)",
            file=sys.stderr,
        )
        return 2
    try:
        args.clients = [int(c) for c in args.clients.split(",") if c.strip()]
        args.rates = None if args.rates is None else [float(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        print("error: --clients and --rates are numbers separated by commas", file=sys.stderr)
        return 2
    if not args.clients or not all(1 <= c <= 256 for c in args.clients) or not 0 < args.seconds <= 3600:
        print("error: --clients must be 1-256 and --seconds 0-3600", file=sys.stderr)
        return 2
    if (args.rates is not None or len(args.clients) > 1) and not args.workload:
        print("error: --rates and several --clients levels need --workload", file=sys.stderr)
        return 2
    if args.rates is not None and not all(0 < r <= 64 for r in args.rates):
        print("error: --rates must be between 0 and 64 takes per second", file=sys.stderr)
        return 2
    if args.workload:
        report = asyncio.run(run_workload(args))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as out:
                json.dump(report, out, indent=2)
                out.write("\n")
        return 0
    args.clients = args.clients[0]
    report = asyncio.run(run(args))
    latency = report["first_byte_ms"]
    print(
        f"{report['requests']} requests from {args.clients} clients in {report['wall_s']:.1f} s: first byte "
        f"p50 {latency['p50']:.0f} / p95 {latency['p95']:.0f} / p99 {latency['p99']:.0f} ms, errors "
        f"{report['error_rate']:.1%}, {report['audio_seconds_per_second']:.2f} audio-s per s"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=2)
            out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
