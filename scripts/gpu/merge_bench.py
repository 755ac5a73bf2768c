"""Merge the H200 run's JSON files into one dated benchmark file and print its markdown summary table.

Usage: python scripts/gpu/merge_bench.py --date 2026-11-30 --gpu "NVIDIA H200" --out benchmarks/X.json \
           FILE.json [FILE.json ...]
Inputs are `cosyvoice-studio bench --json` reports (any backends) and scripts/gpu/vllm_llm_bench.py output.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load_reports(paths: list[str]) -> tuple[list[dict], list[dict]]:
    bench, llm_only = [], []
    for path in paths:
        data = json.loads(Path(path).read_text())
        (bench if "backends" in data else llm_only).append(data)
    return bench, llm_only


def levels_by_backend(bench: list[dict]) -> dict[str, dict[int, dict]]:
    table: dict[str, dict[int, dict]] = {}
    for report in bench:
        for entry in report["backends"]:
            for level in entry.get("levels", []):
                table.setdefault(entry["backend"], {})[level["concurrency"]] = {
                    **level,
                    "peak_vram_bytes": entry.get("peak_vram_bytes"),
                }
    return table


def markdown(table: dict[str, dict[int, dict]]) -> str:
    rows = [
        "| backend | streams | first chunk avg / p95 (ms) | RTF avg | audio-s per s | LLM / flow / HiFT | "
        "peak VRAM (GiB) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for backend in sorted(table):
        for concurrency, level in sorted(table[backend].items()):
            lat, share = level["first_chunk_latency_s"], level["stage_share"]
            split = " / ".join(f"{share.get(k, 0):.0%}" for k in ("llm", "flow", "hift"))
            vram = level["peak_vram_bytes"]
            vram_text = f"{vram / 2**30:.1f}" if vram else "n/a"
            rows.append(
                f"| {backend} | {concurrency} | {lat['avg'] * 1000:.0f} / {lat['p95'] * 1000:.0f} | "
                f"{level['rtf']['avg']:.3f} | {level['audio_seconds_per_second']['avg']:.2f} | {split} | "
                f"{vram_text} |"
            )
    pytorch, vllm = table.get("pytorch", {}), table.get("vllm", {})
    ratios = [
        f"x{c}: {vllm[c]['audio_seconds_per_second']['avg'] / pytorch[c]['audio_seconds_per_second']['avg']:.1f}x"
        for c in sorted(set(pytorch) & set(vllm))
    ]
    if ratios:
        rows.append("")
        rows.append("vLLM / PyTorch aggregate throughput: " + ", ".join(ratios))
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--date", required=True)
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--note", default="")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    bench, llm_only = load_reports(args.files)
    merged = {"date": args.date, "gpu": args.gpu, "note": args.note, "bench": bench, "llm_only": llm_only}
    Path(args.out).write_text(json.dumps(merged, indent=2) + "\n")
    print(markdown(levels_by_backend(bench)))


if __name__ == "__main__":
    main()
