"""``cosyvoice-studio make-model``: write a random-weight model folder in the official layout of CosyVoice2-0.5B
(``--family cosyvoice2``, the default) or Fun-CosyVoice3-0.5B (``--family cosyvoice3``).

``--size tiny`` is the test model (seconds to build, under 50 MB); ``--size full`` has the official
shapes (about 3.5 GB on disk for CosyVoice2) for GPU benchmarks, where compute does not depend on weight
values.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

FAMILY_CHOICES = ("cosyvoice2", "cosyvoice3")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "make-model",
        help="write a random-weight CosyVoice2 or CosyVoice3 model folder (tests, benchmarks)",
        description="Write a complete CosyVoice2-0.5B- or Fun-CosyVoice3-0.5B-style folder with seeded "
        "random weights.",
    )
    parser.add_argument("directory", metavar="DIR", help="folder to create (must be empty or absent)")
    parser.add_argument(
        "--family",
        choices=FAMILY_CHOICES,
        default="cosyvoice2",
        help="which model's layout: cosyvoice2 (CosyVoice2-0.5B) or cosyvoice3 (Fun-CosyVoice3-0.5B) "
        "(default: cosyvoice2)",
    )
    parser.add_argument(
        "--size",
        choices=("tiny", "full"),
        default="tiny",
        help="tiny: test model; full: the official shapes (default: tiny)",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="weight seed (default: 0)")
    parser.add_argument("--force", action="store_true", help="write into a folder that is not empty")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from studio.tts.fabricate.builder import BuildError, build_model_folder, folder_size_bytes

    started = time.perf_counter()
    try:
        folder = build_model_folder(
            Path(args.directory), size=args.size, seed=args.seed, overwrite=args.force, family=args.family
        )
    except (BuildError, OSError) as exc:
        print(f"make-model: {exc}", file=sys.stderr)
        return 2
    size_mb = folder_size_bytes(folder) / 1e6
    print(
        f"wrote {args.size} model ({args.family}, seed {args.seed}) to {folder}: {size_mb:.1f} MB "
        f"in {time.perf_counter() - started:.1f} s"
    )
    return 0
