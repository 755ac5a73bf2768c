"""``cosyvoice-studio transcribe AUDIO``: what a reference recording says, and in which language (Whisper)."""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "transcribe",
        help="transcribe a reference recording (Whisper) and detect its language",
        description="Transcribe a reference recording with Whisper; the model is downloaded once on first "
        "use (with resume), or taken from a local folder.",
    )
    parser.add_argument(
        "audio", metavar="AUDIO", help="the recording (WAV, FLAC, OGG, MP3, ...; at most 30 s)"
    )
    add_asr_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def add_asr_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--asr-model", metavar="DIR|ID", help="Whisper model folder or hub id (default: the saved setting)"
    )
    parser.add_argument(
        "--language", metavar="L", help="the recording's language (code or name): skips detection"
    )


def asr_model_from(args: argparse.Namespace) -> str:
    """``--asr-model``, else the studio's setting."""
    if getattr(args, "asr_model", None):
        return args.asr_model
    from studio.settings import load_settings

    return load_settings().asr_model


def transcribe_file(path: str, model: str, language: str | None = None):
    """Load the recording (refusing what cannot be a reference) and transcribe it; raises AsrError/AudioError."""
    from studio.asr.transcriber import MAX_SECONDS, Transcriber, resolve_model
    from studio.audio.io import load_audio

    audio = load_audio(path, max_duration_s=MAX_SECONDS + 0.5)
    folder = resolve_model(model, progress=lambda message: print(message, file=sys.stderr))
    return Transcriber(folder).transcribe(audio.samples, audio.sample_rate, language)


def run(args: argparse.Namespace) -> int:
    from studio.asr.transcriber import AsrError
    from studio.audio.errors import AudioError

    try:
        transcript = transcribe_file(args.audio, asr_model_from(args), args.language)
    except (AsrError, AudioError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(transcript.to_dict(), ensure_ascii=False))
    else:
        print(transcript.text)
        print(
            f"language: {transcript.language} ({transcript.language_name}); "
            f"{transcript.seconds:.2f} s with {transcript.model}",
            file=sys.stderr,
        )
    return 0
