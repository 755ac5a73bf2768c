"""Denoising: it lowers the noise, reports progress, runs off the caller's thread in a niced child, cancels."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from audio_signals import synthetic_speech

from studio.audio import denoise
from studio.audio.denoise import DenoiseWorker, denoise_samples
from studio.audio.errors import DenoiseCancelled

RATE = 16000


def noisy_speech(seconds: float, seed: int = 0) -> np.ndarray:
    """Syllables from 1 s on, white noise at -40 dBFS rms throughout (the first second is noise only)."""
    syllables = [(1.0 + 0.5 * i, 1.3 + 0.5 * i) for i in range(int((seconds - 1.5) / 0.5))]
    voice = synthetic_speech(RATE, syllables)[: int(seconds * RATE)]
    clean = np.zeros(int(seconds * RATE), dtype=np.float32)
    clean[: len(voice)] = voice
    noise = 0.01 * np.random.default_rng(seed).standard_normal(len(clean))
    return (clean + noise).astype(np.float32)


def level_db(x: np.ndarray) -> float:
    return 10 * np.log10(np.mean(np.square(x, dtype=np.float64)))


def test_denoise_lowers_noise_and_keeps_speech():
    x = noisy_speech(3.2)
    y = denoise_samples(x, RATE)
    assert y.dtype == np.float32 and len(y) == len(x)
    assert level_db(y[: RATE // 2]) < level_db(x[: RATE // 2]) - 10  # the noise-only second
    assert abs(level_db(y[RATE:]) - level_db(x[RATE:])) < 1.5  # the speech stays


def test_denoise_works_chunk_by_chunk_and_reports_progress(monkeypatch):
    monkeypatch.setattr(denoise, "CHUNK_S", 1.0)
    monkeypatch.setattr(denoise, "PAD_S", 0.25)
    x = noisy_speech(3.2)
    seen = []
    y = denoise_samples(x, RATE, progress=seen.append)
    assert seen == pytest.approx([1 / 4, 2 / 4, 3 / 4, 1.0])  # 3.2 s in 1 s chunks
    assert len(y) == len(x) and level_db(y[: RATE // 2]) < level_db(x[: RATE // 2]) - 3


def test_denoise_stops_when_cancelled(monkeypatch):
    monkeypatch.setattr(denoise, "CHUNK_S", 1.0)
    cancel = threading.Event()
    x = noisy_speech(3.2)
    with pytest.raises(DenoiseCancelled):
        denoise_samples(x, RATE, cancel=cancel, progress=lambda fraction: cancel.set())
    with pytest.raises(ValueError, match="strength"):
        denoise_samples(x, RATE, strength=1.5)


def test_importing_noisereduce_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys; from studio.audio.denoise import _import_noisereduce as f; f(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.fixture(scope="module")
def worker():
    w = DenoiseWorker()
    yield w
    w.shutdown()
    assert not w._thread.is_alive()


def test_worker_runs_off_the_calling_thread_in_a_niced_child(worker):
    x = noisy_speech(2.5)
    calls = []
    done = threading.Event()

    def callback(result=None, error=None):
        calls.append((result, error, threading.current_thread().name))
        done.set()

    progress = []
    job = worker.submit(x, RATE, callback, on_progress=progress.append)
    assert not job.done()  # submit returned before any work could finish (the child still starts)
    assert done.wait(60), "the denoise job did not finish"
    result, error, thread_name = calls[0]
    assert error is None and thread_name == "denoise-worker" != threading.current_thread().name
    assert len(result) == len(x) and level_db(result[: RATE // 2]) < level_db(x[: RATE // 2]) - 10
    assert progress[-1] == 1.0 and job.progress == 1.0
    pid = worker.child_pid
    assert pid is not None and pid != os.getpid()
    assert os.getpriority(os.PRIO_PROCESS, pid) > os.getpriority(os.PRIO_PROCESS, 0)


def test_worker_cancels_a_running_job_and_keeps_working(worker):
    started = threading.Event()
    errors = []
    long_take = noisy_speech(40.0, seed=1)
    job = worker.submit(long_take, RATE, lambda result=None, error=None: errors.append(error),
                        on_progress=lambda fraction: started.set())  # fmt: skip
    queued = worker.submit(long_take, RATE, lambda result=None, error=None: errors.append(error))
    assert started.wait(60), "the job never reported progress"
    running_pid = worker.child_pid
    job.cancel()
    queued.cancel()
    assert job.wait(30) and queued.wait(30)
    assert [type(e) for e in errors] == [DenoiseCancelled, DenoiseCancelled]
    assert job.result is None and job.progress < 1.0
    with pytest.raises(ProcessLookupError):  # the busy child was stopped, not left computing
        os.kill(running_pid, 0)

    again = worker.submit(noisy_speech(2.0), RATE, lambda result=None, error=None: None)
    assert again.wait(60) and again.error is None and again.result is not None


def test_worker_reports_bad_input_as_an_error_value(worker):
    got = []
    job = worker.submit(
        np.zeros((10, 2), dtype=np.float32), RATE, lambda result=None, error=None: got.append(error)
    )
    assert job.wait(60)
    assert got and "mono" in str(got[0]) and job.result is None


def test_prestart_brings_the_child_up_before_any_job():
    with DenoiseWorker() as worker:
        _check_prestart(worker)


def _check_prestart(worker: DenoiseWorker) -> None:
    assert worker.child_pid is None
    worker.prestart()
    deadline = time.monotonic() + 60
    while worker.child_pid is None and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = worker.child_pid
    assert pid is not None, "prestart did not start the denoise child"
    done = threading.Event()
    speech = synthetic_speech(16000, [(0.1, 0.6)]).astype(np.float32)
    worker.submit(speech, 16000, lambda result=None, error=None: done.set())
    assert done.wait(60)
    assert worker.child_pid == pid  # the job ran in the child that prestart started
