"""How long an automatic transcript takes: a random-weight Whisper folder (tiny, or large-v3-turbo's shapes)
transcribing a speech-like reference of N seconds, cold (first call) and warm (mean of the next runs).

    .venv/bin/python benchmarks/asr_time.py --size tiny --seconds 10 --runs 5 [--device cpu] [--json OUT]

Random weights rarely emit the end token, so each run decodes the transcriber's whole token budget for the
recording (16 + 8 per second): the figure is an upper bound for real speech (~3 tokens a second).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--model", type=Path, help="an existing Whisper folder instead of building one")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import torch

    from studio.asr.fabricate import write_asr_folder
    from studio.asr.transcriber import Transcriber
    from studio.runtime.warmup import synthetic_voice

    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        folder = args.model or write_asr_folder(Path(scratch) / f"whisper-{args.size}", size=args.size)
        build_s = time.perf_counter() - started
        started = time.perf_counter()
        transcriber = Transcriber(folder, device=args.device)
        load_s = time.perf_counter() - started
        reference = synthetic_voice(16000, args.seconds)
        times, tokens = [], 0
        for _ in range(args.runs + 1):
            if transcriber.device.type == "cuda":
                torch.cuda.synchronize()
            heard = transcriber.transcribe(reference, 16000)
            times.append(heard.seconds)
            tokens = len(transcriber.processor.tokenizer(heard.text)["input_ids"])
    result = {
        "size": args.size if args.model is None else str(args.model),
        "device": str(transcriber.device),
        "gpu": torch.cuda.get_device_name() if transcriber.device.type == "cuda" else None,
        "torch": torch.__version__,
        "reference_s": args.seconds,
        "build_s": round(build_s, 2),
        "load_s": round(load_s, 2),
        "cold_s": round(times[0], 3),
        "warm_mean_s": round(statistics.mean(times[1:]), 3) if len(times) > 1 else None,
        "warm_min_s": round(min(times[1:]), 3) if len(times) > 1 else None,
        "text_tokens": tokens,
        "language": heard.language,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
