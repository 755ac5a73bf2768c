"""``cosyvoice-studio make-asr-model``: write a random-weight Whisper folder in the official layout (tests)."""

from __future__ import annotations

import argparse
import sys
import time


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "make-asr-model",
        help="write a random-weight Whisper folder (tests)",
        description="Write a Whisper folder (config, weights, tokenizer, feature extractor) with seeded "
        "random weights; it loads like a real one and transcribes gibberish.",
    )
    parser.add_argument("directory", metavar="DIR", help="folder to create")
    parser.add_argument(
        "--size",
        choices=("tiny", "full"),
        default="tiny",
        help="tiny: the test model; full: whisper-large-v3-turbo's shapes (GPU timings)",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="weight seed (default: 0)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from studio.asr.fabricate import write_asr_folder

    started = time.perf_counter()
    try:
        folder = write_asr_folder(args.directory, size=args.size, seed=args.seed)
    except (OSError, ValueError) as exc:
        print(f"make-asr-model: {exc}", file=sys.stderr)
        return 2
    print(
        f"wrote {args.size} Whisper model (seed {args.seed}) to {folder} in {time.perf_counter() - started:.1f} s"
    )
    return 0
