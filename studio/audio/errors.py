"""Errors of the audio core: one class per thing that can go wrong, all under AudioError.

Each message is written for the user (what is wrong with which file and what to do), so the GUI and the
command line can show ``str(error)`` as it is.
"""

from __future__ import annotations


class AudioError(Exception):
    """Base of every error the audio core raises on purpose."""


class AudioFileNotFoundError(AudioError, FileNotFoundError):
    """The input path does not exist or is not a file."""


class UnreadableAudioError(AudioError):
    """The file exists but cannot be opened or read (permissions, truncated or corrupt data)."""


class NotAudioError(AudioError):
    """The file is not in an audio format that can be read."""


class UnsupportedAudioError(AudioError):
    """The audio is readable but outside what the studio handles (e.g. a sample rate below 8 kHz)."""


class EmptyAudioError(AudioError):
    """The file holds no samples at all."""


class SilentAudioError(AudioError):
    """The recording is digital silence or so quiet that nothing can be heard."""


class NoSpeechError(AudioError):
    """The recording has sound but the voice activity detector finds no speech in it."""


class InvalidSamplesError(AudioError):
    """The samples contain NaN or infinite values."""


class AudioTooLongError(AudioError):
    """The recording is longer than the caller allowed to load; read a part of it instead."""

    def __init__(self, message: str, duration_s: float, limit_s: float):
        super().__init__(message)
        self.duration_s = duration_s
        self.limit_s = limit_s


class PromptTooLongError(AudioError):
    """The cleaned speech is longer than a prompt may be (`studio.request.MAX_PROMPT_SECONDS`); cut it."""


class ExportError(AudioError):
    """Writing an audio file failed (disk full, no permission, bad folder); no partial file is left."""


class OutputExistsError(ExportError, FileExistsError):
    """The target file exists and the caller did not ask to overwrite it."""


class UnsafeFileNameError(ExportError):
    """A file name would escape the chosen folder or cannot be made into a valid name."""


class DenoiseCancelled(AudioError):
    """A denoise job was cancelled before it finished."""
