"""Where a model folder's saved voices live: per folder, in the user's data dir (the folder may be read-only)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from studio import envs
from studio.user_dirs import user_dir


def voices_dir(model_dir: Path) -> Path:
    """Where this model folder's saved voices go: ``$STUDIO_DATA_DIR`` or the user data dir, per folder."""
    key = hashlib.sha1(str(model_dir.resolve()).encode()).hexdigest()[:12]
    return user_dir(envs.DATA_DIR, "user_data_dir") / "voices" / f"{model_dir.name}-{key}"
