"""The recorder drains any QIODevice through its QTimer into the expected float32 mono audio."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QBuffer, QByteArray, QIODevice
from PySide6.QtMultimedia import QAudioFormat, QMediaDevices

from studio.gui.voice.recorder import Recorder, decode_pcm

pytestmark = pytest.mark.gui


def sine(seconds: float, rate: int, freq: float = 440.0, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def open_buffer(payload: bytes) -> QBuffer:
    buffer = QBuffer()
    buffer.setData(QByteArray(payload))
    assert buffer.open(QIODevice.OpenModeFlag.ReadOnly)
    return buffer


def test_recording_from_an_int16_device_returns_the_samples(qtbot):
    expected = sine(0.8, 16000)
    pcm = np.round(expected * 32767).astype("<i2")
    buffer = open_buffer(pcm.tobytes())
    recorder = Recorder()
    levels = []
    recorder.sig_level.connect(levels.append)
    recorder.start_from_device(buffer, 16000, QAudioFormat.SampleFormat.Int16, 1)
    qtbot.waitUntil(lambda: buffer.atEnd(), timeout=2000)
    with qtbot.waitSignal(recorder.sig_finished, timeout=2000) as finished:
        recorder.stop()
    audio, rate = finished.args
    assert rate == 16000
    assert audio.dtype == np.float32 and audio.shape == expected.shape
    np.testing.assert_allclose(audio, pcm.astype(np.float32) / 32768.0, atol=1e-7)
    assert levels and max(levels) == pytest.approx(20 * np.log10(np.abs(pcm).max() / 32768.0), abs=0.01)
    assert not recorder.is_recording


def test_stereo_float_is_mixed_to_mono_and_partial_frames_are_kept_for_later(qtbot):
    left, right = sine(0.3, 48000, 300.0, 0.4), sine(0.3, 48000, 500.0, 0.2)
    interleaved = np.stack([left, right], axis=1).astype("<f4").tobytes()
    buffer = QBuffer()
    assert buffer.open(QIODevice.OpenModeFlag.ReadWrite)
    recorder = Recorder()
    recorder.start_from_device(buffer, 48000, QAudioFormat.SampleFormat.Float, 2)
    # deliver the bytes in two pieces that split a frame in the middle
    split = len(interleaved) // 2 + 3
    for piece in (interleaved[:split], interleaved[split:]):
        position = buffer.pos()
        buffer.seek(buffer.size())
        buffer.write(piece)
        buffer.seek(position)
        recorder.on_drain()
    audio = recorder.stop()
    np.testing.assert_allclose(audio, (left + right) / 2, atol=1e-6)


def test_recording_stops_by_itself_at_the_length_limit(qtbot):
    recorder = Recorder(max_seconds=0.25)
    buffer = open_buffer((np.ones(16000, dtype="<i2") * 1000).tobytes())  # 1 s available
    with qtbot.waitSignal(recorder.sig_finished, timeout=3000) as finished:
        recorder.start_from_device(buffer, 16000)
    audio, _rate = finished.args
    assert audio.size == 4000  # exactly 0.25 s
    assert not recorder.is_recording


def test_decode_pcm_handles_unsigned_8_bit():
    data = np.array([0, 128, 255], dtype=np.uint8).tobytes()
    np.testing.assert_allclose(decode_pcm(data, QAudioFormat.SampleFormat.UInt8, 1), [-1.0, 0.0, 127 / 128])


def test_recording_from_the_real_default_microphone(qtbot):
    if QMediaDevices.defaultAudioInput().isNull():
        pytest.skip("no audio input device (PulseAudio not available)")
    recorder = Recorder()
    errors = []
    recorder.sig_error.connect(errors.append)
    assert recorder.start(), errors
    qtbot.waitUntil(lambda: recorder._filled > 0, timeout=5000)  # the null source delivers silence
    audio = recorder.stop()
    assert audio.size > 0 and recorder.sample_rate > 0
