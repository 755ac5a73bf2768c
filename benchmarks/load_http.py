"""Load test of a running speech server (`cosyvoice-studio serve`): N clients, each sending streamed PCM
requests back to back for T seconds; prints first-byte latency p50/p95/p99, the error rate and audio
seconds per second. Loopback servers only, and bounded (N <= 256, T <= 3600), so it can never be aimed at
somebody else's machine by mistake.

    .venv/bin/python benchmarks/load_http.py --url http://127.0.0.1:8080 --key KEY --voice narrator \\
        --clients 4 --seconds 30 --json OUT.json
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
        },  # fmt: skip
        "audio_seconds_per_second": audio_seconds / wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--key", default="")
    parser.add_argument("--voice", required=True)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--rate", type=int, default=24000, help="the server's sample rate (X-Sample-Rate)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    if not loopback(args.url):
        print("error: load tests run against a server on this machine only (127.0.0.1, ::1, localhost)",
              file=sys.stderr)  # fmt: skip
        return 2
    if not 1 <= args.clients <= 256 or not 0 < args.seconds <= 3600:
        print("error: --clients must be 1-256 and --seconds 0-3600", file=sys.stderr)
        return 2
    report = asyncio.run(run(args))
    latency = report["first_byte_ms"]
    print(f"{report['requests']} requests from {args.clients} clients in {report['wall_s']:.1f} s: first byte "
          f"p50 {latency['p50']:.0f} / p95 {latency['p95']:.0f} / p99 {latency['p99']:.0f} ms, errors "
          f"{report['error_rate']:.1%}, {report['audio_seconds_per_second']:.2f} audio-s per s")  # fmt: skip
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=2)
            out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
