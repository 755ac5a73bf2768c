"""Play a take on this machine's speakers through ``sounddevice`` when it is importable (it needs PortAudio)
and an output device exists; otherwise say why, so the caller can suggest writing a file instead."""

from __future__ import annotations

import numpy as np


class NoSpeakers(Exception):
    """No audio output here: the library or the device is missing; the message says which."""


def output_device():
    """The ``sounddevice`` module once it imports and sees an output device; `NoSpeakers` otherwise."""
    try:
        import sounddevice
    except (ImportError, OSError) as exc:  # OSError: the module is there, PortAudio (libportaudio2) is not
        raise NoSpeakers(f"no audio library to play with ({type(exc).__name__}: {exc})") from None
    try:
        sounddevice.query_devices(kind="output")
    except Exception as exc:  # noqa: BLE001 - PortAudio's own error type: no device, no server, no permission
        raise NoSpeakers(f"no audio output device ({exc})") from None
    return sounddevice


def play(samples: np.ndarray, sample_rate: int) -> None:
    """Play ``samples`` (float32 mono) and return when they are done."""
    sounddevice = output_device()
    try:
        sounddevice.play(np.asarray(samples, dtype=np.float32), sample_rate, blocking=True)
    except Exception as exc:  # noqa: BLE001 - a device that vanished or refuses the rate
        raise NoSpeakers(f"playback failed ({exc})") from None
