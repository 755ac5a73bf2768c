"""Open a model folder with the class of its family (upstream's ``AutoModel``): CosyVoice2 or CosyVoice3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from studio.model_layout import COSYVOICE3, folder_family
from studio.tts.cosyvoice2 import CosyVoice2


def model_class(model_dir: str | Path) -> type[CosyVoice2]:
    """The class that runs ``model_dir``: its yaml names the family (CosyVoice2 when it holds none, so the
    loader reports what the folder lacks)."""
    if folder_family(model_dir) == COSYVOICE3:
        from studio.tts.cosyvoice3.voice import CosyVoice3

        return CosyVoice3
    return CosyVoice2


def open_model(model_dir: str | Path, **options: Any) -> CosyVoice2:
    """Load ``model_dir`` with its family's class; ``options`` are the classes' (``load_vllm``, ``fp16``, ...)."""
    return model_class(model_dir)(model_dir, **options)


AutoModel = open_model  # upstream's name
