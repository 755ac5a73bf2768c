"""Command line: no arguments opens the studio window; subcommands script the same engine.

Each subcommand lives in its own module under ``studio.commands`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` (called with the parsed
arguments, returns an exit status). Modules keep heavy imports (torch, vllm, Qt) inside
their ``run`` functions so ``--help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from studio import __version__

#: Subcommand modules, in the order ``--help`` lists them.
COMMAND_MODULES = (
    "studio.commands.synth",
    "studio.commands.render",
    "studio.commands.transcribe",
    "studio.commands.bench",
    "studio.commands.serve",
    "studio.commands.mcp",
    "studio.commands.doctor",
    "studio.commands.download",
    "studio.commands.make_model",
    "studio.commands.make_asr_model",
    "studio.commands.clean",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cosyvoice-studio",
        description="CosyVoice Studio. Without a subcommand, opens the studio window.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a real import error inside the module: surface it
                raise
            continue  # the command is not built yet
        module.register(sub)
    return parser


def open_window() -> int:
    from studio.gui.app import run_studio

    return run_studio()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command is None:
        return open_window()
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 130
    except Exception as exc:  # a failure no command caught: one line, never a traceback or a library's advice
        from studio import envs

        if envs.DEBUG.enabled():
            raise
        lines = str(exc).splitlines()
        print(
            f"error: {args.command} failed: {type(exc).__name__}: {lines[0][:300] if lines else ''} "
            "(STUDIO_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1


def gui_main() -> int:
    """Entry point of the ``cosyvoice-studio-gui`` launcher (no console on Windows)."""
    return open_window()


if __name__ == "__main__":
    sys.exit(main())
