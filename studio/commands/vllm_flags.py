"""Command-line flags for the vLLM engine knobs, shared by `synth` and `bench`.

Each flag defaults to the saved setting (studio/settings.py), so the command line only overrides; the
options themselves are listed once, in studio/vllm_options.py.
"""

from __future__ import annotations

import argparse
from typing import Any

from studio.vllm_options import VLLM_OPTION_NAMES, VLLM_OPTIONS


def add_vllm_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("vLLM engine (default: the saved settings)")
    for option in VLLM_OPTIONS:
        if option.kind is bool:
            group.add_argument(
                option.flag, action=argparse.BooleanOptionalAction, default=None, help=option.help
            )
        elif option.choices:
            group.add_argument(option.flag, choices=option.choices, help=option.help)
        else:
            group.add_argument(option.flag, type=option.kind, metavar=option.metavar, help=option.help)
    parser.add_argument(
        "--vram-budget",
        type=float,
        metavar="GIB",
        help="GPU memory the engine may use, vLLM included (default: the saved setting; 0: 80%% of the "
        "free memory; -1: no budget). Smaller than the card, it behaves like a smaller card",
    )


def vram_budget_from(args: argparse.Namespace) -> float:
    """``--vram-budget`` when given, else the saved setting."""
    if getattr(args, "vram_budget", None) is not None:
        return float(args.vram_budget)
    from studio.settings import load_settings

    return load_settings().vram_budget_gb


def vllm_options_from(args: argparse.Namespace) -> dict[str, Any]:
    """The saved settings' vLLM options with the flags given on the command line applied."""
    from studio.settings import load_settings

    options = load_settings().vllm_options()
    for name in VLLM_OPTION_NAMES:
        value = getattr(args, name, None)
        if value is not None:
            options[name] = value
    return options
