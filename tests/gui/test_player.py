"""Gapless streamed playback through a real output device (PulseAudio null sink in tests)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtMultimedia import QAudioFormat, QMediaDevices

from studio.gui.playback.player import StreamPlayer, encode_pcm

pytestmark = pytest.mark.gui


def test_encode_pcm_converts_rate_channels_and_format():
    fmt = QAudioFormat()
    fmt.setSampleRate(48000)
    fmt.setChannelCount(2)
    fmt.setSampleFormat(QAudioFormat.SampleFormat.Int16)
    data = encode_pcm(np.full(2400, 0.5, dtype=np.float32), 24000, fmt)
    frames = np.frombuffer(data, dtype="<i2").reshape(-1, 2)
    assert frames.shape[0] == 4800
    assert np.all(frames[:, 0] == frames[:, 1])
    assert abs(int(np.median(frames[:, 0])) - 16384) <= 2  # 0.5 * 32767


def test_chunks_fed_one_by_one_all_play_and_the_stream_ends(qtbot):
    if QMediaDevices.defaultAudioOutput().isNull():
        pytest.skip("no audio output device (PulseAudio not available)")
    player = StreamPlayer()
    states = []
    positions = []
    player.sig_state.connect(states.append)
    player.sig_position.connect(positions.append)
    assert player.begin(24000)
    tone = (0.2 * np.sin(np.arange(24000 * 3 // 10) * 0.1)).astype(np.float32)
    for chunk in np.array_split(tone, 3):  # 0.3 s in three chunks
        player.feed(chunk)
    player.end()
    qtbot.waitUntil(lambda: states[-1] == "idle", timeout=10_000)
    assert states[0] == "playing"
    assert positions and max(positions) == pytest.approx(0.3, abs=0.03)
    assert player.pending_bytes == 0 and not player.is_playing
