"""Errors the CosyVoice2 runtime raises on purpose, each with a message meant for the user."""

from __future__ import annotations

from pathlib import Path


class ModelFolderError(Exception):
    """A model folder is missing a file, or a file is truncated or does not match the yaml.

    The message always names the file and says what was expected, so the studio can show it as is.
    """

    def __init__(self, path: str | Path, problem: str):
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class MissingModelFileError(ModelFolderError, FileNotFoundError):
    """A file (or the folder itself) the model folder must contain is absent."""

    def __init__(self, path: str | Path, problem: str):
        ModelFolderError.__init__(self, path, problem)


class ConfigError(ModelFolderError):
    """``cosyvoice2.yaml`` cannot be read or lacks what the runtime needs."""


class SynthesisError(Exception):
    """A synthesis request is invalid (bad mode, missing prompt, unknown voice, prompt too long).

    ``field`` names the request field at fault when there is one (as `studio.request.RequestError` does).
    """

    def __init__(self, message: str, field: str = ""):
        super().__init__(message)
        self.field = field


class BackendUnavailableError(RuntimeError):
    """An optional accelerated backend (vLLM, TensorRT, TorchScript) cannot be used here."""
