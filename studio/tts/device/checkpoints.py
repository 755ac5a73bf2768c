"""Reading PyTorch checkpoints safely: ``torch.load(weights_only=True)`` only, and errors that name the file.

A checkpoint torch's weights-only unpickler refuses (a crafted or foreign pickle) becomes a
`ModelFolderError` saying so, never torch's own message, which ends in advice to retry with
``weights_only=False`` (that would run the file's code).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

from studio.tts.errors import MissingModelFileError, ModelFolderError


def first_line(exc: BaseException, limit: int = 200) -> str:
    """``Type: first line of the message`` (libraries' messages run long and end in advice for developers)."""
    lines = str(exc).splitlines()
    return f"{type(exc).__name__}: {lines[0][:limit] if lines else ''}"


def load_problem(exc: BaseException) -> str:
    """Why ``torch.load(weights_only=True)`` failed, without torch's advice to retry it unsafely."""
    if isinstance(exc, pickle.UnpicklingError) or "weights_only" in str(exc):
        return "UnpicklingError: not a file of plain tensors (the safe weights-only load refused it)"
    return first_line(exc)


def safe_load(path: Path, what: str, **options: Any) -> Any:
    """``torch.load(path, weights_only=True, **options)``; a failure is a `ModelFolderError` naming ``path``."""
    try:
        return torch.load(path, weights_only=True, **options)
    except FileNotFoundError as exc:
        raise MissingModelFileError(path, "missing from the model folder") from exc
    except Exception as exc:  # truncated zip, pickle errors, unsafe content: all "cannot be read"
        raise ModelFolderError(
            path, f"cannot be read as {what} (truncated or corrupt?): {load_problem(exc)}"
        ) from exc


def load_state_dict(path: Path, **options: Any) -> dict[str, torch.Tensor]:
    """A state dict (names to tensors) read with `safe_load`; anything else is a `ModelFolderError`."""
    state = safe_load(path, "a PyTorch state dict", **options)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelFolderError(path, "expected a state dict (a mapping of names to tensors)")
    return state
