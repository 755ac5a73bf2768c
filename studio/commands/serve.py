"""``cosyvoice-studio serve``: the OpenAI-compatible speech API over the studio's runtime, in this process
(uvicorn on 127.0.0.1 by default; a key protects every route but /health)."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys
import threading
from pathlib import Path

log = logging.getLogger("studio.serve")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve an OpenAI-compatible speech API",
        description="POST /v1/audio/speech, /v1/voices, /health and /metrics over the studio's runtime.",
    )
    parser.add_argument("--model", required=True, metavar="DIR", help="CosyVoice2 or CosyVoice3 model folder")
    parser.add_argument("--backend", choices=("pytorch", "vllm"), default="vllm")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: this computer only)")
    parser.add_argument("--port", type=int, default=8080)
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument("--api-key", metavar="KEY", help="clients send Authorization: Bearer KEY")
    keys.add_argument("--api-key-file", metavar="FILE", help="read the key from this file (first line)")
    parser.add_argument("--no-fp16", dest="fp16", action="store_false", help="float32 flow and LM on CUDA")
    parser.add_argument(
        "--asr-model",
        default="",
        metavar="SPEC",
        help="Whisper folder or hub id to transcribe voices uploaded without a transcript",
    )
    parser.add_argument("--voices", metavar="DIR", help="voice library folder (default: the studio's)")
    parser.add_argument("--no-warmup", dest="warmup", action="store_false", help=argparse.SUPPRESS)
    parser.add_argument(
        "--drain-seconds",
        type=float,
        default=30.0,
        metavar="S",
        help="on SIGTERM or Ctrl+C, let running takes finish for up to S seconds, then cancel them",
    )
    parser.add_argument(
        "--max-queued",
        type=int,
        default=64,
        metavar="N",
        help="when N takes already wait for GPU memory or a worker, answer 503 with Retry-After (0: no limit)",
    )
    parser.add_argument(
        "--voice-alias",
        action="append",
        default=[],
        metavar="NAME=VOICE",
        help="another name for a library voice, e.g. an OpenAI voice: --voice-alias alloy=narrator (repeatable)",
    )
    parser.add_argument(
        "--ray", action="store_true", help="scale out on Ray Serve (local Ray, or RAY_ADDRESS)"
    )
    parser.add_argument("--replicas", default="1", metavar="N|auto", help="Ray Serve replicas (auto: 1-8)")
    parser.add_argument(
        "--gpus-per-replica",
        type=float,
        default=None,
        metavar="G",
        help="GPUs each replica takes (default: 1 with --backend vllm on a GPU machine, else 0)",
    )
    from studio.commands.vllm_flags import add_vllm_arguments

    add_vllm_arguments(parser)
    parser.set_defaults(func=run)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_key(args: argparse.Namespace) -> str | None:
    if args.api_key_file:
        text = Path(args.api_key_file).expanduser().read_text(encoding="utf-8").strip().splitlines()
        if not text or not text[0].strip():
            raise SystemExit(f"error: {args.api_key_file} holds no key")
        return text[0].strip()
    return args.api_key or None


def voice_aliases(pairs: list[str]) -> dict[str, str]:
    """``["alloy=narrator", ...]`` as ``{"alloy": "narrator"}``; SystemExit on a malformed pair."""
    aliases = {}
    for pair in pairs:
        name, _, voice = pair.partition("=")
        if not name.strip() or not voice.strip():
            raise SystemExit(f"error: --voice-alias takes NAME=VOICE (e.g. alloy=narrator), not {pair!r}")
        aliases[name.strip()] = voice.strip()  # the service compares names as voice names (any case)
    return aliases


def build_service(args: argparse.Namespace):
    from studio.commands.vllm_flags import vllm_options_from, vram_budget_from
    from studio.serve.service import SpeechService
    from studio.settings import data_dir
    from studio.voices import VoiceLibrary

    voices = VoiceLibrary(Path(args.voices).expanduser() if args.voices else data_dir() / "voices")
    return SpeechService(
        args.model,
        voices,
        backend=args.backend,
        fp16=args.fp16,
        vllm_options=vllm_options_from(args),
        vram_budget_gb=vram_budget_from(args),
        warmup=args.warmup,
        asr_model=args.asr_model,
        max_queued=max(0, args.max_queued),
        voice_aliases=voice_aliases(args.voice_alias),
    )


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn  # noqa: F401 - the serve extra, checked before anything starts

        from studio.serve.app import create_app
    except ImportError as exc:
        print(
            f"error: serve needs its extra ({exc.name} is missing): pip install 'cosyvoice-studio[serve]'",
            file=sys.stderr,
        )
        return 2

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not Path(args.model).is_dir():
        print(f"error: model folder not found: {args.model}", file=sys.stderr)
        return 2
    key = read_key(args)
    if not is_loopback(args.host) and not key:
        log.warning(
            "serving on %s without an API key: anyone who reaches this port can use it "
            "(--api-key or --api-key-file)",
            args.host,
        )
    if args.ray:
        return run_on_ray(args, key)
    service = build_service(args)
    threading.Thread(target=service.load, name="load-model", daemon=True).start()  # /health says "loading"
    from studio.commands.serve_lifetime import serve_until_stopped

    return serve_until_stopped(create_app(service, key), service, args.host, args.port, args.drain_seconds)


def run_on_ray(args: argparse.Namespace, key: str | None) -> int:
    try:
        from studio.serve.ray_app import ReplicaSpec, run
    except ImportError as exc:
        print(
            f"error: --ray needs Ray Serve ({exc.name} is missing): pip install 'ray[serve]'", file=sys.stderr
        )
        return 2
    from studio.commands.vllm_flags import vllm_options_from, vram_budget_from
    from studio.settings import data_dir

    if args.replicas != "auto" and not args.replicas.isdigit():
        print("error: --replicas is a number or auto", file=sys.stderr)
        return 2
    gpus = args.gpus_per_replica
    if gpus is None:
        from studio.gpu.nvml import NvmlUnavailable, query_gpus

        try:
            gpus = 1.0 if query_gpus() else 0.0
        except NvmlUnavailable:
            gpus = 0.0
    voices = str(Path(args.voices).expanduser() if args.voices else data_dir() / "voices")
    spec = ReplicaSpec(
        str(Path(args.model).resolve()),
        voices,
        args.backend,
        args.fp16,
        vram_budget_from(args),
        key,
        vllm_options_from(args),
        args.asr_model,
        voice_aliases=voice_aliases(args.voice_alias),
    )
    run(spec, args.host, args.port, args.replicas if args.replicas == "auto" else int(args.replicas), gpus)
    return 0
