"""``synth --vllm`` stopped by SIGTERM while vLLM starts leaves no process (engine core, worker, resource
tracker) behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from process_tree import kill_all, spawned, tagged_env, wait_for, wait_until_none_left

pytestmark = pytest.mark.vllm

LEFTOVER_S = 15.0


def test_sigterm_while_vllm_starts_leaves_nothing(tiny_model_dir, tmp_path):
    pytest.importorskip("vllm")
    import soundfile as sf

    rate = 16000
    t = np.arange(2 * rate) / rate
    sf.write(tmp_path / "voice.wav", (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), rate)
    env, tag = tagged_env(VLLM_CPU_KVCACHE_SPACE="1")
    command = [
        sys.executable,
        "-m",
        "studio",
        "synth",
        "--model",
        str(tiny_model_dir),
        "--text",
        "Hello there.",
        "--prompt-wav",
        str(tmp_path / "voice.wav"),
        "--prompt-text",
        "A voice for the test.",
        "--vllm",
        "--out",
        str(tmp_path / "take.wav"),
    ]
    synth = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: spawned(tag) >= 1, 300, "vLLM's engine core starting")
        time.sleep(2.0)
        synth.send_signal(signal.SIGTERM)
        synth.wait(60)
        wait_until_none_left(tag, LEFTOVER_S)
        assert not (tmp_path / "take.wav").exists()
    finally:
        if synth.poll() is None:
            synth.kill()
            synth.wait(30)
        kill_all(tag)
