"""Command-line flags for the vLLM engine knobs, shared by `synth` and `bench`.

Each flag defaults to the saved setting (studio/settings.py), so the command line only overrides.
"""

from __future__ import annotations

import argparse
from typing import Any

VLLM_OPTION_NAMES = (
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enforce_eager",
    "dtype",
    "max_model_len",
)


def add_vllm_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("vLLM engine (default: the saved settings)")
    group.add_argument(
        "--gpu-memory-utilization", type=float, metavar="F", help="share of GPU memory for vLLM"
    )
    group.add_argument("--max-num-seqs", type=int, metavar="N", help="most requests decoded at once")
    group.add_argument("--max-num-batched-tokens", type=int, metavar="N", help="tokens per engine step")
    group.add_argument(
        "--enforce-eager",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="no CUDA graphs / compilation (starts faster, runs slower)",
    )
    group.add_argument(
        "--dtype", choices=("auto", "bfloat16", "float16", "float32"), help="vLLM weights dtype"
    )
    group.add_argument("--max-model-len", type=int, metavar="N", help="longest prompt + output in tokens")


def vllm_options_from(args: argparse.Namespace) -> dict[str, Any]:
    """The saved settings' vLLM options with the flags given on the command line applied."""
    from studio.settings import load_settings

    options = load_settings().vllm_options()
    for name in VLLM_OPTION_NAMES:
        value = getattr(args, name, None)
        if value is not None:
            options[name] = value
    return options
