"""Failures of the real engine process: bad requests, a load error, SIGKILL or SIGSEGV mid-take, then a
restart; the crash report (log lines, the fault handler's dump) and the kept output of the crashed run."""

from __future__ import annotations

import os
import signal
import time

import pytest
from engine_helpers import collect_takes, finished_of, states_until

from studio.engine.client import EngineClient, EngineError
from studio.engine.protocol import AudioChunk, EngineState, Error, LoadModel, State, Synthesize, TakeFinished
from studio.engine.raw_output import REPORT_WIDTH, output_pid
from studio.runtime.warmup import WARMUP_PROMPT_TEXT, synthetic_voice

PROMPT = synthetic_voice(16000, 2.0)


def take(tokens: int, stream: bool = True) -> Synthesize:
    return Synthesize(
        "Hello there, studio.",
        prompt_wav=PROMPT,
        prompt_sr=16000,
        prompt_text=WARMUP_PROMPT_TEXT,
        stream=stream,
        seed=5,
        exact_speech_tokens=tokens,
    )


def next_of(client: EngineClient, kind: type, timeout: float = 60.0):
    while True:
        event = client.get_event(timeout=timeout)
        assert event is not None, f"no {kind.__name__} within {timeout} s"
        if isinstance(event, kind):
            return event


def test_sigkill_mid_take_is_a_crash_with_log_lines_and_restart_works(tmp_path, tiny_model_dir):
    client = EngineClient(log_path=tmp_path / "engine.log")
    first_hello = client.start()
    try:
        # before any model: a take is refused, the process stays up
        early = client.synthesize(take(10))
        refused = next_of(client, Error)
        assert refused.request_id == early and "no model is loaded" in refused.message

        # a bad folder: an Error and the ERROR state, then a good folder loads
        client.load_model(LoadModel(str(tmp_path / "missing"), backend="pytorch", warmup=False))
        failure = next_of(client, Error)
        assert failure.request_id is None and "missing" in failure.message and failure.traceback
        assert states_until(client, EngineState.ERROR)[-1].detail.startswith("load failed")
        client.load_model(LoadModel(str(tiny_model_dir), backend="pytorch", warmup=False))
        states_until(client, EngineState.READY)

        # SIGKILL while a long take streams
        request = take(3000)
        client.synthesize(request)
        while not isinstance(event := client.get_event(timeout=60), AudioChunk):
            assert event is not None, "no audio chunk within 60 s"
        os.kill(client.pid, signal.SIGKILL)
        lost = next_of(client, Error, timeout=30)
        assert lost.request_id == request.request_id and "SIGKILL" in lost.message
        engine_error = next_of(client, Error, timeout=30)
        assert engine_error.request_id is None and "SIGKILL" in engine_error.message
        assert f"take {request.request_id}" in engine_error.traceback  # the engine's own last log lines
        crashed = next_of(client, State, timeout=30)
        assert crashed.state is EngineState.CRASHED and client.last_state.state is EngineState.CRASHED
        with pytest.raises(EngineError, match="not running"):
            client.synthesize(take(10))

        # restart: a new process, the last model reloaded, and takes work again
        hello = client.restart()
        assert hello.pid != first_hello.pid and client.is_alive()
        states_until(client, EngineState.READY)
        again = take(30, stream=False)
        per_take, _ = collect_takes(client, [client.synthesize(again)])
        assert isinstance(per_take[again.request_id][-1], TakeFinished)
        assert finished_of(per_take[again.request_id]).stats.speech_tokens == 30
    finally:
        client.shutdown()
    assert not client.is_alive()


def test_a_clean_shutdown_is_never_reported_as_a_crash(tmp_path):
    client = EngineClient(log_path=tmp_path / "engine.log")
    for _ in range(4):  # several cycles: the exit status must be read reliably every time
        client.start()
        client.shutdown(timeout=30)
        assert client.last_exitcode == 0 and not client.is_alive()
        seen = []
        while (event := client.get_event(timeout=0)) is not None:
            seen.append(event)
        assert not [e for e in seen if isinstance(e, Error)], seen
        assert [e.state for e in seen if isinstance(e, State)][-1] is EngineState.STOPPED


def test_a_native_crash_report_shows_the_fault_dump_and_survives_a_restart(tmp_path, tiny_model_dir):
    log_path = tmp_path / "engine.log"
    client = EngineClient(log_path=log_path)
    crashed_pid = client.start().pid
    try:
        client.load_model(LoadModel(str(tiny_model_dir), backend="pytorch", warmup=False))
        states_until(client, EngineState.READY)
        # Killed between takes: faulthandler reads other threads' frames unlocked, so a dump taken while
        # a take's threads run Python code may itself crash halfway (a signal from outside lands in the
        # idle main thread; a real fault in a take's thread, holding the GIL, does not race like that).
        request = take(40)
        per_take, _ = collect_takes(client, [client.synthesize(request)])
        finished_of(per_take[request.request_id])
        states_until(client, EngineState.READY)
        time.sleep(0.3)  # the take's thread ends
        os.kill(crashed_pid, signal.SIGSEGV)  # faulthandler dumps the threads' stacks to engine.out
        engine_error = next_of(client, Error, timeout=30)
        assert engine_error.request_id is None and "SIGSEGV" in engine_error.message
        report = engine_error.traceback
        assert "Fatal Python error: Segmentation fault" in report
        assert "Current thread 0x" in report and "in engine_main" in report  # the crashing thread's stack
        assert f"take {request.request_id} done" in report  # the engine's own last log lines
        assert "Extension modules:" in report and "cut: the line has" in report
        assert max(len(line) for line in report.splitlines()) <= REPORT_WIDTH
        assert not [line for line in report.splitlines() if not line.strip()]
        assert next_of(client, State, timeout=30).state is EngineState.CRASHED

        hello = client.restart()
        states_until(client, EngineState.READY)
        kept = (tmp_path / "engine.out.1").read_text(errors="replace")
        assert output_pid(kept.splitlines()[0]) == crashed_pid and "Fatal Python error" in kept
        current = (tmp_path / "engine.out").read_text(errors="replace")
        assert output_pid(current.splitlines()[0]) == hello.pid and "Fatal Python error" not in current
        later = client.crash_report(crashed_pid)  # asked again after the restart: the crashed run's dump
        assert "Fatal Python error: Segmentation fault" in later and "engine.out.1" in later
    finally:
        client.shutdown()
