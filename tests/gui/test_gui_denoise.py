"""Denoising a take runs off the GUI thread: a 10 ms GUI QTimer never stalls over 50 ms meanwhile, and
the result arrives on the GUI thread, is stored beside the original and then used for playback."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from PySide6.QtCore import QTimer

from studio.gui.voice.denoise import TakeDenoiser
from studio.takes import TakeStore

pytestmark = pytest.mark.gui


def test_denoise_keeps_the_gui_timer_running_and_delivers_on_the_gui_thread(qtbot, tmp_path):
    rng = np.random.default_rng(0)
    seconds, rate = 12.0, 24000
    t = np.arange(int(seconds * rate)) / rate
    noisy = 0.3 * np.sin(2 * np.pi * 220 * t) * (t % 1.0 < 0.6) + 0.05 * rng.standard_normal(t.size)
    samples = noisy.astype(np.float32)  # made before the timer runs: test data, not the GUI's work
    store = TakeStore(tmp_path / "takes")
    take = store.add(noisy.astype(np.float32), rate, text="noisy")

    gaps: list[float] = []
    last = [time.perf_counter()]

    def tick() -> None:
        now = time.perf_counter()
        gaps.append(now - last[0])
        last[0] = now

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(tick)
    delivered_on: list[threading.Thread] = []
    denoiser = TakeDenoiser()
    denoiser.sig_done.connect(lambda *_: delivered_on.append(threading.current_thread()))
    try:
        # as in the window: switching denoising on starts the worker's child before any take is denoised
        denoiser.prestart()
        qtbot.waitUntil(lambda: denoiser.worker_ready, timeout=60_000)
        timer.start()
        last[0] = time.perf_counter()
        # control: the same timer with nothing else running, to know what this (shared) machine does alone
        qtbot.waitUntil(lambda: len(gaps) >= 60, timeout=10_000)
        baseline = max(gaps)
        gaps.clear()
        with qtbot.waitSignal(denoiser.sig_done, timeout=120_000) as done:
            denoiser.submit(take.id, samples, rate)
            assert denoiser.pending == {take.id}
        timer.stop()
    finally:
        timer.stop()
        denoiser.shutdown()
    take_id, cleaned = done.args
    assert take_id == take.id and cleaned.shape == noisy.shape
    assert delivered_on == [threading.main_thread()]
    assert denoiser.pending == set()
    assert len(gaps) > 20
    # 50 ms is the target; on a machine already stalling that long with nothing running, denoising must
    # at least add no stall of its own
    limit = max(0.050, 1.5 * baseline)
    assert max(gaps) < limit, (
        f"the GUI timer stalled for {max(gaps) * 1000:.0f} ms (alone: {baseline * 1000:.0f} ms)"
    )
    # quieter where there was only noise (the second half of each second)
    quiet = (t % 1.0) > 0.7
    assert np.std(cleaned[quiet]) < 0.5 * np.std(noisy[quiet])

    store.save_denoised(take.id, cleaned)
    played, _ = store.load_audio(take.id)
    np.testing.assert_array_equal(played, cleaned)
