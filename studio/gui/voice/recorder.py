"""Microphone recording: QAudioSource in pull mode, drained by one QTimer into a preallocated buffer.

No Python runs in the audio callback: Qt fills the source's QIODevice, and a 30 ms QTimer on the GUI
thread reads whatever arrived (Friture's pattern). Any QIODevice can stand in for the microphone
(``start_from_device``), which is how the tests feed known audio.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QIODevice, QObject, QTimer, Signal
from PySide6.QtMultimedia import QAudioDevice, QAudioFormat, QAudioSource, QMediaDevices, QtAudio

from studio.request import MAX_PROMPT_SECONDS

MAX_SECONDS = MAX_PROMPT_SECONDS  # a recording never needs cutting to fit the prompt limit
DRAIN_INTERVAL_MS = 30

_DTYPES = {
    QAudioFormat.SampleFormat.UInt8: (np.uint8, lambda a: (a.astype(np.float32) - 128.0) / 128.0),
    QAudioFormat.SampleFormat.Int16: (np.int16, lambda a: a.astype(np.float32) / 32768.0),
    QAudioFormat.SampleFormat.Int32: (np.int32, lambda a: a.astype(np.float32) / 2147483648.0),
    QAudioFormat.SampleFormat.Float: (np.float32, lambda a: a.astype(np.float32)),
}


def decode_pcm(data: bytes, sample_format: QAudioFormat.SampleFormat, channels: int) -> np.ndarray:
    """Interleaved PCM bytes -> float32 mono in [-1, 1] (channels averaged)."""
    dtype, to_float = _DTYPES[sample_format]
    usable = len(data) - len(data) % (np.dtype(dtype).itemsize * channels)
    frames = to_float(np.frombuffer(data[:usable], dtype=dtype))
    if channels > 1:
        frames = frames.reshape(-1, channels).mean(axis=1)
    return frames


def preferred_input_format(device: QAudioDevice) -> QAudioFormat:
    """Mono Int16 at 48 kHz when the device takes it, else the device's own preferred format."""
    fmt = QAudioFormat()
    fmt.setSampleRate(48000)
    fmt.setChannelCount(1)
    fmt.setSampleFormat(QAudioFormat.SampleFormat.Int16)
    return fmt if device.isFormatSupported(fmt) else device.preferredFormat()


class Recorder(QObject):
    """Records up to ``max_seconds`` of mono audio; emits levels while running and the audio at the end."""

    sig_level = Signal(float)
    """Peak level of the latest audio in dBFS (-inf..0), about every 30 ms while recording."""
    sig_elapsed = Signal(float)
    """Seconds recorded so far."""
    sig_finished = Signal(object, int)
    """The recording: float32 mono samples and their sample rate (emitted once per recording)."""
    sig_error = Signal(str)
    """Recording failed or could not start; a sentence for the user."""

    def __init__(self, parent: QObject | None = None, max_seconds: float = MAX_SECONDS):
        super().__init__(parent)
        self.max_seconds = max_seconds
        self._timer = QTimer(self)
        self._timer.setInterval(DRAIN_INTERVAL_MS)
        self._timer.timeout.connect(self.on_drain)
        self._source: QAudioSource | None = None
        self._device: QIODevice | None = None
        self._buffer = np.zeros(0, dtype=np.float32)
        self._filled = 0
        self._rate = 0
        self._format = QAudioFormat.SampleFormat.Int16
        self._channels = 1
        self._leftover = b""

    @property
    def is_recording(self) -> bool:
        return self._device is not None

    @property
    def sample_rate(self) -> int:
        return self._rate

    def start(self, device: QAudioDevice | None = None) -> bool:
        """Record from an input device (default: the system default). False (and sig_error) on failure."""
        device = device if device is not None and not device.isNull() else QMediaDevices.defaultAudioInput()
        if device.isNull():
            self.sig_error.emit("No microphone found: connect one, or import a recording instead.")
            return False
        fmt = preferred_input_format(device)
        source = QAudioSource(device, fmt, self)
        io = source.start()
        if io is None or source.error() != QtAudio.Error.NoError:
            self.sig_error.emit(
                f"Could not open {device.description()} for recording ({source.error().name})."
            )
            source.deleteLater()
            return False
        self._source = source
        self.start_from_device(io, fmt.sampleRate(), fmt.sampleFormat(), fmt.channelCount())
        return True

    def start_from_device(
        self,
        io: QIODevice,
        sample_rate: int,
        sample_format: QAudioFormat.SampleFormat = QAudioFormat.SampleFormat.Int16,
        channels: int = 1,
    ) -> None:
        """Record from any open QIODevice delivering interleaved PCM (a microphone, or a QBuffer in tests)."""
        if self.is_recording:
            raise RuntimeError("already recording")
        self._device = io
        self._rate = int(sample_rate)
        self._format = sample_format
        self._channels = int(channels)
        self._buffer = np.zeros(int(self.max_seconds * sample_rate), dtype=np.float32)
        self._filled = 0
        self._leftover = b""
        self._timer.start()

    def on_drain(self) -> None:
        """Move what the device holds into the buffer, report the level, stop at the length limit."""
        if self._device is None:
            return
        taken = self._consume(bytes(self._device.readAll().data()))
        if taken.size:
            peak = float(np.max(np.abs(taken)))
            self.sig_level.emit(20.0 * np.log10(peak) if peak > 0 else float("-inf"))
        self.sig_elapsed.emit(self._filled / float(self._rate))
        if self._filled >= self._buffer.size:
            self.stop()

    def _consume(self, data: bytes) -> np.ndarray:
        """Decode whole frames (keeping a partial frame for next time) and store what fits."""
        data = self._leftover + data
        frame_bytes = np.dtype(_DTYPES[self._format][0]).itemsize * self._channels
        cut = len(data) - len(data) % frame_bytes
        self._leftover = data[cut:]
        taken = decode_pcm(data[:cut], self._format, self._channels)[: self._buffer.size - self._filled]
        self._buffer[self._filled : self._filled + taken.size] = taken
        self._filled += taken.size
        return taken

    def stop(self) -> np.ndarray | None:
        """Stop and emit the recording (also returned); None when not recording."""
        if self._device is None:
            return None
        self._timer.stop()
        self._consume(bytes(self._device.readAll().data()))
        self._device = None
        if self._source is not None:
            self._source.stop()
            self._source.deleteLater()
            self._source = None
        audio = self._buffer[: self._filled].copy()
        self.sig_elapsed.emit(self._filled / float(self._rate))
        self.sig_finished.emit(audio, self._rate)
        return audio
