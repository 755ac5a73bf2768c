"""The flow's GPU turn: a turn held in this process makes another process's LM step wait, until the flow
gives it back or the turn's time runs out; off, nothing waits. Real files in shared memory, real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from studio.tts.device import flow_turn
from studio.tts.device.flow_turn import FILE_VARIABLE, TurnWaiter


@pytest.fixture
def turn(monkeypatch):
    monkeypatch.delenv(FILE_VARIABLE, raising=False)
    made = flow_turn.share()
    yield made
    if made is not None:
        made.close()


CHILD = (  # what vLLM's engine core does at each LM step, in a process of its own that finds the file by name
    "from studio.tts.device.flow_turn import TurnWaiter; "
    "waiter = TurnWaiter.from_environment(); print(waiter.wait(limit=10.0), flush=True)"
)
ROOT = Path(__file__).resolve().parents[2]


def _waited_in_child(released_after: float | None) -> float:
    """Hold the turn, start a process that waits for it, give it back after `released_after` s (None: never)."""
    flow_turn.hold(1)
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        if released_after is not None:
            time.sleep(released_after)
            flow_turn.release()
        out, _ = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 0
    return float(out)


def test_a_held_turn_makes_another_process_wait_until_it_is_released(turn):
    turn.max_seconds = 20.0  # the release, not the turn's time, ends this wait
    started = time.monotonic()
    waited = _waited_in_child(released_after=3.0)  # the child starts within those seconds
    assert waited > 0.05, "the child did not wait for the flow"
    assert time.monotonic() - started >= 3.0
    assert waited < 10.0, "the release did not end the wait"


def test_a_turn_never_given_back_ends_by_itself(turn):
    turn.max_seconds = 4.0  # longer than the child's start, far shorter than the child's own limit (10 s)
    started = time.monotonic()
    waited = _waited_in_child(released_after=None)
    assert waited < 4.0 and time.monotonic() - started < 9.0  # the studio dying while it holds stalls nothing


def test_the_file_name_goes_once_vllm_started_and_the_turn_still_works(turn):
    waiter = TurnWaiter(os.environ[FILE_VARIABLE])  # what vLLM's processes open while they start
    turn.started()
    assert not turn.path.exists() and FILE_VARIABLE not in os.environ
    assert waiter.until() == 0.0 and waiter.wait() == 0.0
    flow_turn.hold(1)
    assert waiter.until() > time.monotonic()
    flow_turn.release()
    assert waiter.until() == 0.0


def test_closed_turns_are_no_longer_held(turn):
    waiter = TurnWaiter(turn.path)
    turn.close()
    assert flow_turn.hold(1) is False
    assert waiter.until() == 0.0


def test_off_no_file_and_nothing_waits(monkeypatch):
    monkeypatch.setenv("STUDIO_FLOW_TURN_MS", "0")
    monkeypatch.setenv(FILE_VARIABLE, "/nonexistent/turn")
    assert flow_turn.share() is None
    assert FILE_VARIABLE not in os.environ
    assert TurnWaiter.from_environment() is None
    assert flow_turn.hold(1) is False


def test_a_bad_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("STUDIO_FLOW_TURN_MS", "-5")
    with pytest.raises(ValueError, match="STUDIO_FLOW_TURN_MS"):
        flow_turn.share()


def test_the_lm_keeps_the_gpu_while_it_decodes_for_a_take_still_short_of_its_first_chunk(turn):
    waiter = TurnWaiter(turn.path)
    requests = [3]
    turn.lm_requests = lambda: requests[0]
    assert flow_turn.hold(2) is False and waiter.until() == 0.0  # a third take waits for its tokens
    assert (
        flow_turn.hold(3) is True and waiter.until() > time.monotonic()
    )  # all three first chunks: the flow's turn
    flow_turn.release()
    requests[0] = 1
    assert flow_turn.hold(1) is True
