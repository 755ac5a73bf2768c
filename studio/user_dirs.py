"""The studio's per-user folders: an environment variable when set, else the platform's default.

One rule for every folder (settings, data, cache), so tests and CI can move them all with
``STUDIO_CONFIG_DIR``, ``STUDIO_DATA_DIR`` and ``STUDIO_CACHE_DIR``. Nothing is created here.
"""

from __future__ import annotations

from pathlib import Path

from studio.envs import EnvVar

APP_NAME = "cosyvoice-studio"


def user_dir(var: EnvVar, platform_kind: str) -> Path:
    """``$var`` when set, else platformdirs' ``platform_kind`` folder ("user_data_dir", ...)."""
    override = var.path()
    if override is not None:
        return override
    import platformdirs

    return Path(getattr(platformdirs, platform_kind)(APP_NAME, appauthor=False))
