"""Gapless playback of streamed audio: QAudioSink in push mode, topped up by one QTimer.

``begin()`` opens a stream, ``feed()`` appends chunks as they arrive (playback starts with the first),
``end()`` marks the end; ``play()`` does all three for a whole clip, optionally from an offset (a seek).
``pause()``/``resume()`` suspend the sink without losing what is queued. Without an output device the
player says so (``sig_state`` "no-device") and drops audio instead of failing.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QIODevice, QObject, QTimer, Signal
from PySide6.QtMultimedia import QAudioDevice, QAudioFormat, QAudioSink, QMediaDevices, QtAudio

FEED_INTERVAL_MS = 20
SINK_BUFFER_SECONDS = 0.25


def _output_format(device: QAudioDevice, sample_rate: int) -> QAudioFormat:
    for sample_format in (QAudioFormat.SampleFormat.Float, QAudioFormat.SampleFormat.Int16):
        fmt = QAudioFormat()
        fmt.setSampleRate(sample_rate)
        fmt.setChannelCount(1)
        fmt.setSampleFormat(sample_format)
        if device.isFormatSupported(fmt):
            return fmt
    return device.preferredFormat()


def encode_pcm(samples: np.ndarray, source_rate: int, fmt: QAudioFormat) -> bytes:
    """float32 mono -> the sink's PCM (resampled and duplicated across channels when needed)."""
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    if fmt.sampleRate() != source_rate:
        import soxr

        samples = soxr.resample(samples, source_rate, fmt.sampleRate()).astype(np.float32)
    if fmt.channelCount() > 1:
        samples = np.repeat(samples[:, None], fmt.channelCount(), axis=1).reshape(-1)
    clipped = np.clip(samples, -1.0, 1.0)
    kind = fmt.sampleFormat()
    if kind == QAudioFormat.SampleFormat.Float:
        return clipped.astype("<f4").tobytes()
    if kind == QAudioFormat.SampleFormat.Int32:
        return (clipped * 2147483647.0).astype("<i4").tobytes()
    if kind == QAudioFormat.SampleFormat.UInt8:
        return (clipped * 127.0 + 128.0).astype(np.uint8).tobytes()
    return (clipped * 32767.0).astype("<i2").tobytes()


class StreamPlayer(QObject):
    """Plays one stream at a time; a new ``begin``/``play`` replaces the current one."""

    sig_state = Signal(str)
    """"playing", "paused", "idle" (finished or stopped) or "no-device"."""
    sig_position = Signal(float)
    """Position in the current clip, in seconds (the stream's start offset plus what has played)."""

    def __init__(self, parent: QObject | None = None, device: QAudioDevice | None = None):
        super().__init__(parent)
        self._device = device
        self._timer = QTimer(self)
        self._timer.setInterval(FEED_INTERVAL_MS)
        self._timer.timeout.connect(self.on_feed)
        self._sink: QAudioSink | None = None
        self._io: QIODevice | None = None
        self._format: QAudioFormat | None = None
        self._pending = bytearray()
        self._source_rate: int | None = None
        self._awaiting_stream = False  # begin() without a rate: the first feed() opens the stream
        self._ended = False
        self._offset_s = 0.0  # where in its clip the current stream started (a seek)
        self._paused = False

    def set_device(self, device: QAudioDevice | None) -> None:
        """Use this output device from the next stream on (None: the system default)."""
        self._device = device

    @property
    def is_playing(self) -> bool:
        return self._sink is not None

    @property
    def is_paused(self) -> bool:
        return self._sink is not None and self._paused

    @property
    def pending_bytes(self) -> int:
        return len(self._pending)

    def begin(self, sample_rate: int | None = None) -> bool:
        """Open a stream; False (and "no-device") when there is no output device.

        Without ``sample_rate`` the stream opens at the rate of the first `feed()` (a take's chunks carry it).
        """
        self.stop()
        if sample_rate is None:
            self._awaiting_stream = True
            return True
        device = self._device if self._device is not None else QMediaDevices.defaultAudioOutput()
        if device.isNull():
            self.sig_state.emit("no-device")
            return False
        self._source_rate = int(sample_rate)
        self._format = _output_format(device, self._source_rate)
        self._sink = QAudioSink(device, self._format, self)
        self._sink.setBufferSize(self._format.bytesForDuration(int(SINK_BUFFER_SECONDS * 1e6)))
        self._io = self._sink.start()
        if self._io is None:
            self.stop()
            self.sig_state.emit("no-device")
            return False
        self._ended = False
        self._paused = False
        self._offset_s = 0.0
        self._timer.start()
        self.sig_state.emit("playing")
        return True

    def feed(self, samples: np.ndarray, sample_rate: int | None = None) -> None:
        """Queue samples at ``sample_rate`` (default: the stream's) on the open stream; after a rate-less
        `begin()` the first call opens the stream at its rate."""
        if self._awaiting_stream and sample_rate is not None:
            self._awaiting_stream = False
            if not self.begin(sample_rate):
                return
        if self._sink is None or self._format is None:
            return
        if sample_rate is not None and int(sample_rate) != self._source_rate:
            raise ValueError(f"cannot feed {sample_rate} Hz audio into a {self._source_rate} Hz stream")
        self._pending += encode_pcm(samples, self._source_rate, self._format)
        if not self._paused:
            self.on_feed()

    def end(self) -> None:
        """No more chunks for this stream; it stops once everything queued has played."""
        self._ended = True

    def play(self, samples: np.ndarray, sample_rate: int, start_s: float = 0.0) -> bool:
        """Play a whole clip from ``start_s`` seconds on (positions stay relative to the clip's start)."""
        if not self.begin(sample_rate):
            return False
        first = min(max(0, int(round(start_s * sample_rate))), len(samples))
        self._offset_s = first / float(sample_rate)
        self.feed(np.asarray(samples)[first:], sample_rate)
        self.end()
        return True

    def pause(self) -> None:
        """Suspend the sink; what is queued stays queued (chunks of a streaming take keep arriving)."""
        if self._sink is None or self._paused:
            return
        self._paused = True
        self._sink.suspend()
        self._timer.stop()
        self.sig_state.emit("paused")

    def resume(self) -> None:
        if self._sink is None or not self._paused:
            return
        self._paused = False
        self._sink.resume()
        self._timer.start()
        self.sig_state.emit("playing")

    @property
    def position(self) -> float:
        """Seconds into the current clip (0 when nothing plays)."""
        if self._sink is None:
            return 0.0
        return self._offset_s + self._sink.processedUSecs() / 1e6

    def on_feed(self) -> None:
        """Top the sink up with as much queued audio as it has room for; finish when all has played."""
        if self._sink is None or self._io is None:
            return
        free = self._sink.bytesFree()
        if free > 0 and self._pending:
            written = self._io.write(bytes(self._pending[:free]))
            if written > 0:
                del self._pending[:written]
        self.sig_position.emit(self.position)
        if self._ended and not self._pending and self._sink.state() == QtAudio.State.IdleState:
            self.stop()  # everything queued has played

    def stop(self) -> None:
        self._timer.stop()
        self._pending.clear()
        self._awaiting_stream = False
        self._paused = False
        if self._sink is None:
            return
        sink, self._sink, self._io = self._sink, None, None
        sink.stop()
        sink.deleteLater()
        self.sig_state.emit("idle")
