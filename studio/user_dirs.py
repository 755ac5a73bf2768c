"""The studio's per-user folders: an environment variable when set, else the platform's default.

One rule for every folder (settings, data, cache), so tests and CI can move them all with
``STUDIO_CONFIG_DIR``, ``STUDIO_DATA_DIR`` and ``STUDIO_CACHE_DIR``. Nothing is created here.
"""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "cosyvoice-studio"


def user_dir(env_var: str, platform_kind: str) -> Path:
    """``$env_var`` when set, else platformdirs' ``platform_kind`` folder ("user_data_dir", ...)."""
    override = os.environ.get(env_var)
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(getattr(platformdirs, platform_kind)(APP_NAME, appauthor=False))
