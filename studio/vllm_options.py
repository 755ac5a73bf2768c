"""The vLLM engine options the studio exposes, listed once: settings, the settings dialog and the command
line (`synth`, `bench`) are all built from `VLLM_OPTIONS`. No Qt, no torch, no vllm."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

VLLM_DTYPES = ("auto", "bfloat16", "float16", "float32")


@dataclass(frozen=True)
class VllmOption:
    """One keyword argument of vLLM's engine: its type, default, valid values and how it is shown."""

    name: str
    kind: type  # float, int, bool or str
    default: Any
    label: str  # settings dialog
    help: str  # command line
    minimum: float | None = None  # valid values (inclusive; `exclusive_minimum` for float shares)
    maximum: float | None = None
    exclusive_minimum: bool = False
    choices: tuple[str, ...] = ()
    ui_range: tuple[float, float] | None = None  # spin-box range where narrower than the valid one
    ui_step: float | None = None
    metavar: str = "N"
    gpu_only: bool = False  # means nothing without a CUDA GPU (the settings dialog hides it there)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> None:
        """Raise ValueError naming the option when ``value`` is not valid for it."""
        if self.choices and value not in self.choices:
            raise ValueError(f"{self.name} must be one of {self.choices}, not {value!r}")
        if self.minimum is not None:
            low_ok = value > self.minimum if self.exclusive_minimum else value >= self.minimum
            high_ok = self.maximum is None or value <= self.maximum
            if not (low_ok and high_ok):
                if self.kind is int:
                    raise ValueError(f"{self.name} must be a positive integer")
                bound = "(" if self.exclusive_minimum else "["
                raise ValueError(f"{self.name} must be in {bound}{self.minimum:g}, {self.maximum:g}]")


VLLM_OPTIONS: tuple[VllmOption, ...] = (
    VllmOption(
        "gpu_memory_utilization",
        float,
        0.2,
        "vLLM GPU memory share (no budget)",
        "share of GPU memory for vLLM when there is no VRAM budget (--vram-budget -1); a budget sizes it",
        minimum=0.0,
        maximum=1.0,
        exclusive_minimum=True,
        ui_range=(0.05, 1.0),
        ui_step=0.05,
        metavar="F",
        gpu_only=True,
    ),
    VllmOption(
        "max_num_seqs",
        int,
        16,
        "vLLM max sequences",
        "most requests decoded at once",
        minimum=1,
        ui_range=(1, 1024),
    ),
    VllmOption(
        "max_num_batched_tokens",
        int,
        4096,
        "vLLM max batched tokens",
        "tokens per engine step",
        minimum=1,
        ui_range=(64, 1 << 20),
    ),
    VllmOption(
        "max_model_len",
        int,
        4096,
        "vLLM max model length",
        "longest prompt + output in tokens",
        minimum=1,
        ui_range=(256, 1 << 17),
    ),
    VllmOption("dtype", str, "auto", "vLLM dtype", "vLLM weights dtype", choices=VLLM_DTYPES),
    VllmOption(
        "enforce_eager",
        bool,
        False,
        "Eager mode (no CUDA graphs: starts faster, runs slower)",
        "no CUDA graphs / compilation (starts faster, runs slower)",
        gpu_only=True,
    ),
)
VLLM_OPTION_NAMES = tuple(option.name for option in VLLM_OPTIONS)
VLLM_DEFAULTS: dict[str, Any] = {option.name: option.default for option in VLLM_OPTIONS}


def with_defaults(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` over `VLLM_DEFAULTS`; an option given as None takes its default."""
    return {**VLLM_DEFAULTS, **{k: v for k, v in options.items() if v is not None}}
