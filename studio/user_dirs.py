"""The studio's per-user folders: an environment variable when set, else the platform's default.

One rule for every folder (settings, data, cache), so tests and CI can move them all with
``STUDIO_CONFIG_DIR``, ``STUDIO_DATA_DIR`` and ``STUDIO_CACHE_DIR``. Nothing is created here.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from studio import envs
from studio.envs import EnvVar

APP_NAME = "cosyvoice-studio"


def user_dir(var: EnvVar, platform_kind: str) -> Path:
    """``$var`` when set, else platformdirs' ``platform_kind`` folder ("user_data_dir", ...)."""
    override = var.path()
    if override is not None:
        return override
    import platformdirs

    return Path(getattr(platformdirs, platform_kind)(APP_NAME, appauthor=False))


def voices_dir(model_dir: Path) -> Path:
    """Where a model folder's saved voices go: ``$STUDIO_DATA_DIR`` or the user data dir, one folder per model
    folder (the model folder itself may be read-only)."""
    key = hashlib.sha1(str(model_dir.resolve()).encode()).hexdigest()[:12]
    return user_dir(envs.DATA_DIR, "user_data_dir") / "voices" / f"{model_dir.name}-{key}"
