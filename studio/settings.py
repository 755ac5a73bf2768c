"""Persisted user settings: a plain dataclass stored as JSON in the user's config folder. Qt-free.

Usage::

    from studio.settings import Settings, load_settings, save_settings, data_dir
    s = load_settings()                  # defaults (plus a warning) when the file is missing fields,
    s = dataclasses.replace(s, fp16=True)  # unknown keys, bad types or corrupt JSON; never raises
    save_settings(s)                     # atomic write (temp file + os.replace)

Where things live: ``config_dir()`` is ``$STUDIO_CONFIG_DIR`` or platformdirs' user config dir for
"cosyvoice-studio"; ``data_dir()`` (takes, voices, logs) is ``$STUDIO_DATA_DIR`` or platformdirs' user
data dir. Each is created when something is written there, never to read.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio import envs
from studio.asr import DEFAULT_ASR_MODEL
from studio.atomic_files import atomic_write_bytes, ensure_folder
from studio.user_dirs import user_dir
from studio.vllm_options import VLLM_DEFAULTS, VLLM_OPTION_NAMES, VLLM_OPTIONS

SETTINGS_FILE = "settings.json"
BACKENDS = ("pytorch", "vllm")


class SettingsWarning(UserWarning):
    """A settings file could not be used as written; defaults were used for some or all fields."""


def config_dir(create: bool = False) -> Path:
    """The folder holding settings.json (``$STUDIO_CONFIG_DIR`` overrides the platform default).

    Only named unless ``create``: commands that only read settings run without a writable (or any) folder;
    with ``create`` a failure is a `DiskError` naming it.
    """
    path = user_dir(envs.CONFIG_DIR, "user_config_dir")
    return ensure_folder(path) if create else path


def data_dir(create: bool = True) -> Path:
    """The folder for takes, saved voices and logs (``$STUDIO_DATA_DIR`` overrides the default).

    With ``create`` it is made if missing (a failure is a `DiskError` naming it); without, it is only named.
    """
    path = user_dir(envs.DATA_DIR, "user_data_dir")
    return ensure_folder(path) if create else path


def default_output_dir() -> str:
    return str(data_dir(create=False) / "takes")


@dataclass
class Settings:
    """Everything the studio remembers between runs; vLLM knobs are passed to the engine as given."""

    model_dir: str = ""
    output_dir: str = ""  # empty: data_dir()/takes
    backend: str = "vllm"  # "pytorch" | "vllm" (vLLM falls back to PyTorch only with a reported reason)
    fp16: bool = True  # CUDA only (the LM and the flow in half precision); ignored on the CPU
    # vLLM engine options: one field per entry of studio.vllm_options.VLLM_OPTIONS (checked there)
    gpu_memory_utilization: float = VLLM_DEFAULTS["gpu_memory_utilization"]
    max_num_seqs: int = VLLM_DEFAULTS["max_num_seqs"]
    max_num_batched_tokens: int = VLLM_DEFAULTS["max_num_batched_tokens"]
    enforce_eager: bool = VLLM_DEFAULTS["enforce_eager"]
    dtype: str = VLLM_DEFAULTS["dtype"]
    max_model_len: int = VLLM_DEFAULTS["max_model_len"]
    # GPU memory: 0 = 80% of what is free when the engine starts; GiB; negative = no budget (vLLM's share
    # from gpu_memory_utilization): sizes vLLM, the flow's arena and the takes admitted at once
    vram_budget_gb: float = 0.0
    # where the engine runs: "" = this computer (a process of the studio), else a speech server's URL
    # (cosyvoice-studio serve) and its API key
    engine_url: str = ""
    engine_key: str = ""
    # audio
    audio_input_device: str = ""  # empty: system default
    audio_output_device: str = ""
    stream: bool = True
    fast_first_audio: bool = False  # streaming: the first chunk after FAST_FIRST_HOP_TOKENS tokens
    denoise: bool = False
    # exported takes and scripts: the rate (0: the model's) and the loudness (0: as made, else LUFS)
    export_sample_rate: int = 0
    export_loudness_lufs: float = 0.0
    # the folder every export dialog starts in: the one exported to last ("": the home folder)
    last_export_folder: str = ""
    # automatic transcripts: a Whisper folder or hub id (downloaded once); "" turns them off
    asr_model: str = DEFAULT_ASR_MODEL
    # free-form per-panel state other parts may keep here (JSON-serialisable values only)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {self.backend!r}")
        for option in VLLM_OPTIONS:
            option.check(getattr(self, option.name))
        if self.engine_url and not self.engine_url.startswith(("http://", "https://")):
            raise ValueError(f"engine_url must be an http:// or https:// address, not {self.engine_url!r}")
        if not math.isfinite(self.vram_budget_gb):
            raise ValueError("vram_budget_gb must be a number of GiB (0: automatic)")
        from studio.audio.export import OUTPUT_RATES

        if self.export_sample_rate not in (0, *OUTPUT_RATES):
            raise ValueError(f"export_sample_rate must be 0 (the model's) or one of {OUTPUT_RATES}")
        if self.export_loudness_lufs != 0.0 and not -40.0 <= self.export_loudness_lufs <= -6.0:
            raise ValueError("export_loudness_lufs must be 0 (as made) or from -40 to -6 LUFS")

    @property
    def export_loudness(self) -> float | None:
        """The exports' loudness target in LUFS, None when exports keep the level they were made at."""
        return self.export_loudness_lufs or None

    def resolved_output_dir(self) -> Path:
        """The folder new takes go to (``output_dir`` or the data folder's ``takes``)."""
        return Path(self.output_dir).expanduser() if self.output_dir else Path(default_output_dir())

    def vllm_options(self) -> dict[str, Any]:
        """The keyword arguments CosyVoice2(..., **vllm_options) takes for the vLLM engine."""
        return {name: getattr(self, name) for name in VLLM_OPTION_NAMES}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def settings_path() -> Path:
    return config_dir() / SETTINGS_FILE


def _coerce(name: str, value: Any, default: Any) -> Any:
    """Return value if it has the default's JSON type (ints accepted for floats), else raise TypeError."""
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, str):
        ok = isinstance(value, str)
    elif isinstance(default, dict):
        ok = isinstance(value, dict)
    else:
        ok = True
    if not ok:
        raise TypeError(f"{name}: expected {type(default).__name__}, got {type(value).__name__}")
    return value


def settings_from_dict(data: dict[str, Any]) -> tuple[Settings, list[str]]:
    """Build Settings from a loaded dict; returns the settings and a list of problems (fields reset)."""
    defaults = Settings()
    problems: list[str] = []
    values: dict[str, Any] = {}
    known = {f.name for f in dataclasses.fields(Settings)}
    for key in sorted(set(data) - known):
        problems.append(f"unknown key {key!r} ignored")
    for name in known & set(data):
        try:
            candidate = _coerce(name, data[name], getattr(defaults, name))
            dataclasses.replace(defaults, **{name: candidate})  # runs the field's validation
        except (TypeError, ValueError) as exc:
            problems.append(f"{exc} (default used)")
            continue
        values[name] = candidate
    return Settings(**values), problems


def load_settings(path: Path | None = None) -> Settings:
    """Read settings; a missing file gives defaults silently, a bad one gives defaults and a warning."""
    path = path or settings_path()
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):  # no settings yet (or no folder for them)
        return Settings()
    except OSError as exc:
        warnings.warn(f"cannot read {path}: {exc}; using default settings", SettingsWarning, stacklevel=2)
        return Settings()
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("top level is not an object")
    except ValueError as exc:
        warnings.warn(f"{path} is corrupt ({exc}); using default settings", SettingsWarning, stacklevel=2)
        return Settings()
    settings, problems = settings_from_dict(data)
    if problems:
        warnings.warn(f"{path}: " + "; ".join(problems), SettingsWarning, stacklevel=2)
    return settings


def save_settings(settings: Settings, path: Path | None = None) -> Path:
    """Write settings atomically (a temporary file in the same folder, then os.replace)."""
    path = path or settings_path()
    ensure_folder(path.parent)
    payload = json.dumps(settings.to_dict(), indent=2, sort_keys=True) + "\n"
    atomic_write_bytes(path, payload.encode("utf-8"))
    return path
