"""CPU real-time factor of the tiny random-weight model (a benchmark, not a test).

Builds the tiny folder if needed (``.cache/test-models/tiny-v<N>-<code hash>``, as the tests), then synthesises a fixed number of
speech tokens per take (``exact_speech_tokens``: a random LM rarely stops, so takes are compared like for
like) and prints RTF = synthesis seconds / audio seconds, per stage, offline and streaming.

    .venv/bin/python benchmarks/cpu_rtf_tiny.py [--tokens 250] [--repeats 3] [--threads N] [--full-prefix-flow]
        [--prompt-seconds 3] [--same-voice | --flow-only]

Streaming renders each chunk with the incremental (cached) flow; ``--full-prefix-flow`` selects upstream's
re-run of the flow over the whole token prefix per chunk, for comparison. Streaming takes reuse the
prompt's flow state across takes (the per-voice prompt cache; ``STUDIO_PROMPT_CACHE_MB=0`` disables it);
``--same-voice`` instead reports, per repeat with the cache emptied first, the first take with a voice
(cold) against the second (warm); ``--flow-only`` times the first streamed chunk's flow alone (no LM thread
competing for the CPU): no prompt cache, a miss, and a hit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "tts"))


def tiny_folder() -> Path:
    from studio.tts.fabricate.builder import BUILDER_VERSION, build_model_folder, source_fingerprint

    folder = REPO / ".cache" / "test-models" / f"tiny-v{BUILDER_VERSION}-{source_fingerprint()}"
    if not (folder / "README.md").is_file():
        build_model_folder(folder, size="tiny", seed=0, overwrite=True)
    return folder


def take(model, prompt, tokens: int, stream: bool, seed: int) -> dict:
    from studio.tts.cosyvoice2 import SynthesisSpec

    spec = SynthesisSpec(
        text="Hello, this is a benchmark of the studio.",
        mode="zero_shot",
        prompt_wav=prompt,
        prompt_sr=16000,
        prompt_text="A short prompt for the voice.",
        stream=stream,
        seed=seed,
        exact_speech_tokens=tokens,
    )
    started = time.perf_counter()
    first = first_flow = None
    samples = 0
    stages = {"llm": 0.0, "flow": 0.0, "hift": 0.0}
    for out in model.synthesize(spec):
        if first is None:
            first, first_flow = time.perf_counter() - started, out["timings"].get("flow", 0.0)
        samples += out["tts_speech"].shape[1]
        for stage, seconds in out["timings"].items():
            stages[stage] += seconds
    total = time.perf_counter() - started
    audio = samples / model.sample_rate
    return {
        "rtf": total / audio,
        "first": first,
        "first_flow": first_flow,
        "audio": audio,
        **{k: v / audio for k, v in stages.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=250, help="speech tokens per take (25 per second)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument(
        "--full-prefix-flow",
        action="store_true",
        help="streaming: re-run the flow over the whole token prefix per chunk (upstream) instead of caching",
    )
    parser.add_argument("--prompt-seconds", type=float, default=3.0, help="length of the synthetic prompt")
    parser.add_argument(
        "--same-voice",
        action="store_true",
        help="streaming only: first take with a voice (prompt cache cold) vs the second (warm)",
    )
    parser.add_argument(
        "--flow-only",
        action="store_true",
        help="time the first streamed chunk's flow alone: no prompt cache vs cache miss vs cache hit",
    )
    args = parser.parse_args()
    if args.full_prefix_flow:
        os.environ["STUDIO_INCREMENTAL_FLOW"] = "0"

    import torch
    from conftest import voiced_prompt

    from studio.tts.cosyvoice2 import CosyVoice2

    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    model = CosyVoice2(tiny_folder())
    flow_path = "full-prefix" if args.full_prefix_flow else "incremental"
    print(
        f"load {time.perf_counter() - started:.1f} s; torch threads {torch.get_num_threads()}; "
        f"streaming flow {flow_path}"
    )
    prompt = voiced_prompt(args.prompt_seconds)
    take(model, prompt, 30, stream=False, seed=0)  # warm-up: first calls build oneDNN kernels
    if args.flow_only:
        return flow_only(model, prompt, args)
    if args.same_voice:
        return same_voice(model, prompt, args)
    for stream in (False, True):
        runs = [take(model, prompt, args.tokens, stream, seed) for seed in range(args.repeats)]
        median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(
            f"{'streaming' if stream else 'offline  '}: {median['audio']:.1f} s audio, RTF {median['rtf']:.3f} "
            f"(llm {median['llm']:.3f}, flow {median['flow']:.3f}, hift {median['hift']:.3f}), "
            f"first chunk {median['first']:.2f} s  [median of {args.repeats}]"
        )
    return 0


def same_voice(model, prompt, args) -> int:
    """Streaming takes in pairs with one voice: the first fills the prompt cache, the second reuses it."""
    from studio.tts.flow.streaming.prompt_cache import default_cache

    cache = default_cache(model.model.device)
    print(f"prompt cache: {'off' if cache is None else f'{cache.max_bytes / 2**20:.0f} MB'}")
    pairs = []
    for seed in range(args.repeats):
        if cache is not None:
            cache.clear()
        pairs.append([take(model, prompt, args.tokens, True, seed) for _ in range(2)])
    for index, name in enumerate(("first take (cold)", "second take (warm)")):
        runs = [pair[index] for pair in pairs]
        median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(
            f"{name}: first chunk {median['first'] * 1000:.0f} ms (its flow {median['first_flow'] * 1000:.0f} ms), RTF {median['rtf']:.3f} "
            f"(flow {median['flow']:.3f})  [median of {args.repeats}]"
        )
    if cache is not None:
        print(f"cache: {cache.stats()}")
    return 0


def flow_only(model, prompt, args) -> int:
    """The first streamed chunk's flow (prompt + hop + lookahead tokens), interleaved runs, median."""
    import torch

    from studio.tts.flow.streaming.incremental import IncrementalFlow
    from studio.tts.flow.streaming.prompt_cache import PromptFlowCache

    features = model.model.frontend.prompt_features(prompt, 16000)
    inputs = dict(
        prompt_token=features.speech_token, prompt_feat=features.speech_feat, embedding=features.embedding
    )
    flow, n_prompt = model.model.flow, features.speech_token.shape[1]
    hop = -(-n_prompt // model.token_hop_len) * model.token_hop_len - n_prompt + model.token_hop_len
    tokens = torch.randint(
        0, 6561, (hop + flow.pre_lookahead_len,), generator=torch.Generator().manual_seed(0)
    )
    times: dict[str, list[float]] = {"no prompt cache": [], "miss": [], "hit": []}
    for _ in range(args.repeats):
        for label, runs in times.items():
            cache = None if label == "no prompt cache" else PromptFlowCache(1 << 40)
            if label == "hit":
                IncrementalFlow(flow, **inputs, cache=cache).mel(tokens.tolist(), finalize=False)
            incremental = IncrementalFlow(flow, **inputs, cache=cache)
            started = time.perf_counter()
            incremental.mel(tokens.tolist(), finalize=False)
            runs.append(time.perf_counter() - started)
    boundary = IncrementalFlow(flow, **inputs).prompt_boundary()
    print(f"prompt {n_prompt} tokens ({boundary} reusable); first chunk {n_prompt + hop} tokens; flow only:")
    for label, runs in times.items():
        print(f"  {label}: {statistics.median(runs) * 1000:.0f} ms  [median of {args.repeats}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
