"""``cosyvoice-studio clean IN OUT``: clean a reference recording into a prompt and print the report."""

from __future__ import annotations

import argparse
from pathlib import Path


def _cut_value(text: str) -> float | str:
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cut takes 'auto' or seconds, not {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("--cut must be a positive number of seconds")
    return value


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "clean",
        help="clean a reference recording into a 16 kHz prompt",
        description="Clean a reference recording into a CosyVoice2 prompt: 16 kHz mono, DC removed, "
        "silence trimmed, peak at -3 dBFS. The original file is never modified.",
    )
    parser.add_argument("input", metavar="IN", help="the recording (WAV, FLAC, OGG, MP3, ...)")
    parser.add_argument("output", metavar="OUT", help="the cleaned prompt to write (.wav or .flac)")
    parser.add_argument("--denoise", action="store_true", help="reduce background noise (noisereduce)")
    parser.add_argument("--json", metavar="REPORT", help="also write the report as JSON to this file")
    parser.add_argument(
        "--cut",
        type=_cut_value,
        default=None,
        metavar="auto|SECONDS",
        help="for speech over 30 s: cut at the best pause ('auto') or at this time",
    )
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from studio.atomic_files import remove_leftover_parts
    from studio.audio.clean import CleanOptions, clean_file
    from studio.audio.errors import AudioError

    options = CleanOptions(denoise=args.denoise, cut=args.cut)
    remove_leftover_parts(Path(args.output).parent)
    try:
        report = clean_file(args.input, args.output, options, overwrite=args.force)
    except AudioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(report.text())
    if args.json:
        from studio.commands.reports import write_report

        if not write_report(args.json, report.to_json() + "\n"):
            return 1
    return 0
