"""``cosyvoice-studio mcp``: a Model Context Protocol server on stdin/stdout, so an assistant (any MCP client)
can list the saved voices, speak text to a file or the speakers, and render a script. The model loads once,
in the background, when the server starts, and is closed when the client closes the connection. The protocol
owns stdout: logs go to stderr."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "mcp",
        help="serve the studio to AI assistants over MCP (stdio)",
        description="A Model Context Protocol server on stdin/stdout: tools list_voices, speak_to_file, "
        "speak_to_speakers and render_script. Needs the 'mcp' extra.",
    )
    parser.add_argument("--model", required=True, metavar="DIR", help="CosyVoice2 or CosyVoice3 model folder")
    parser.add_argument(
        "--backend",
        choices=("pytorch", "vllm"),
        default="pytorch",
        help="run the LLM on PyTorch or vLLM (falls back to PyTorch with the reason logged)",
    )
    parser.add_argument("--fp16", action="store_true", help="half precision flow and vocoder (GPU)")
    parser.add_argument(
        "--voices",
        default="",
        metavar="DIR",
        help="the voice library folder (default: the studio's saved voices)",
    )
    parser.add_argument(
        "--out-dir",
        default="",
        metavar="DIR",
        help="where relative output paths point (default: the current folder)",
    )
    from studio.commands.vllm_flags import add_vllm_arguments

    add_vllm_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging

    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if not Path(args.model).is_dir():
        print(f"error: model folder not found: {args.model}", file=sys.stderr)
        return 2
    try:
        from studio.mcp.server import build_server
    except ImportError as exc:
        print(
            f"error: the MCP server needs the 'mcp' extra ({exc}); install cosyvoice-studio[mcp]",
            file=sys.stderr,
        )
        return 2
    from studio.commands.vllm_flags import vllm_options_from, vram_budget_from
    from studio.lifetime import sigterm_exits
    from studio.mcp.runtime import StudioRuntime
    from studio.settings import data_dir
    from studio.voices import VoiceLibrary

    library = VoiceLibrary(args.voices or data_dir(create=False) / "voices")
    out_dir = Path(args.out_dir).expanduser() if args.out_dir else Path.cwd()
    runtime = StudioRuntime(
        args.model,
        library,
        backend=args.backend,
        fp16=args.fp16,
        vllm_options=vllm_options_from(args),
        vram_budget_gb=vram_budget_from(args),
        out_dir=out_dir,
    )
    with sigterm_exits():  # a SIGTERM while vLLM starts leaves none of its processes
        build_server(runtime).run("stdio")
    return 0
