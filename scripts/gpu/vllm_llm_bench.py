"""LLM stage alone, vLLM vs PyTorch: time to first token, per-token decode time, aggregate tokens/s.

Builds a seeded random CosyVoice2 LM (tiny or full-size), exports it through studio.tts.llm.vllm.export,
serves it with studio.tts.llm.vllm.backend (plugin path, V1 multiprocessing on) and writes one JSON.
Usage: python scripts/gpu/vllm_llm_bench.py --size full --json out.json [--concurrency 1,4,16,32,128]
Speech tokens are 25 per audio second, so tokens/s / 25 = audio-s of tokens per s (LLM only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "vllm"))


def run_stream(backend, prompt, n_tokens, sampling, seed, out):
    cancel = threading.Event()
    start = time.perf_counter()
    stamps = []
    for _ in backend.generate(
        prompt, min_len=0, max_len=n_tokens, sampling=sampling, seed=seed, cancel=cancel, ignore_stop=True
    ):
        stamps.append(time.perf_counter() - start)
    out.append(stamps)


def measure(backend, prompt, concurrency, n_tokens, sampling):
    results: list[list[float]] = []
    threads = [
        threading.Thread(target=run_stream, args=(backend, prompt, n_tokens, sampling, i, results))
        for i in range(concurrency)
    ]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    tokens = sum(len(r) for r in results)
    first = sorted(r[0] for r in results)
    steps = [(r[-1] - r[0]) / max(len(r) - 1, 1) for r in results]
    return {
        "concurrency": concurrency,
        "tokens": tokens,
        "wall_s": round(wall, 3),
        "tokens_per_s": round(tokens / wall, 1),
        "audio_s_per_s_llm_only": round(tokens / wall / 25, 2),
        "first_token_ms_p50": round(1000 * statistics.median(first), 2),
        "first_token_ms_p95": round(1000 * first[min(len(first) - 1, int(0.95 * len(first)))], 2),
        "decode_ms_per_token_p50": round(1000 * statistics.median(steps), 3),
    }


def torch_path(lm, prompt, n_tokens, sampling):
    import torch

    from studio.tts.llm.torch_backend import TorchTokenBackend

    cancel = threading.Event()
    backend = TorchTokenBackend(lm)
    list(backend.generate(prompt, min_len=0, max_len=8, sampling=sampling, seed=0, cancel=cancel))  # warm
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    stamps = []
    for _ in backend.generate(
        prompt, min_len=0, max_len=n_tokens, sampling=sampling, seed=0, cancel=cancel, ignore_stop=True
    ):
        stamps.append(time.perf_counter() - start)
    return {
        "first_token_ms": round(1000 * stamps[0], 2),
        "decode_ms_per_token": round(1000 * (stamps[-1] - stamps[0]) / (len(stamps) - 1), 3),
    }


def main() -> None:
    import torch
    from random_lm import FULL_QWEN2, TINY_QWEN2, build_lm, write_llm_pt

    from studio.tts.llm.sampling import RasSampling
    from studio.tts.llm.vllm.backend import create_vllm_backend

    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=["tiny", "full"], default="full")
    parser.add_argument("--concurrency", default="1,4,16,32,128")
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--prompt-len", type=int, default=150)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--torch-dtype", default="float32", help="dtype of the PyTorch path for comparison")
    parser.add_argument("--json", required=True)
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    full = args.size == "full"
    lm = build_lm(FULL_QWEN2 if full else TINY_QWEN2, std=0.02 if full else 0.08, device=device)
    work = Path(tempfile.mkdtemp(prefix="llm-bench-"))
    write_llm_pt(lm, work)
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    t0 = time.perf_counter()
    backend = create_vllm_backend(
        lm,
        work,
        dtype=args.dtype,
        enforce_eager=args.enforce_eager,
        max_num_seqs=max(concurrencies),
        gpu_memory_utilization=0.3,
        max_model_len=4096,
        max_num_batched_tokens=8192,
    )
    startup = time.perf_counter() - t0
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randn(args.prompt_len, lm.llm_input_size, generator=gen).to(device) * 0.5
    result = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "size": args.size,
        "vllm_dtype": args.dtype,
        "enforce_eager": args.enforce_eager,
        "prompt_len": args.prompt_len,
        "tokens_per_stream": args.tokens,
        "engine_start_s": round(startup, 1),
        "vllm": {},
        "pytorch": {},
    }
    import vllm

    result["vllm_version"] = vllm.__version__
    result["torch_version"] = torch.__version__
    for name, sampling in (("greedy", RasSampling(top_k=1)), ("ras", RasSampling())):
        measure(backend, prompt, 2, 16, sampling)  # warm-up
        result["vllm"][name] = [measure(backend, prompt, c, args.tokens, sampling) for c in concurrencies]
        print(name, json.dumps(result["vllm"][name], indent=None), flush=True)
    backend.close()
    lm = lm.to(getattr(torch, args.torch_dtype))
    result["pytorch"] = {
        "dtype": args.torch_dtype,
        "ras_1_stream": torch_path(lm, prompt.to(lm.llm_decoder.weight.dtype), 100, RasSampling()),
    }
    print("pytorch", result["pytorch"], flush=True)
    Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
