"""The take gate's safety rule (the banker's algorithm), pure Python: takes hold what they need now, grow before
each chunk, and a grant that could leave the running takes unable to finish is refused."""

from __future__ import annotations

import threading
import time

from studio.tts.take_gate import TakeGate


def later(function, *args):
    """Run `function(*args)` on a thread; the thread and a list that receives its result."""
    out = []
    thread = threading.Thread(target=lambda: out.append(function(*args)), daemon=True)
    thread.start()
    return thread, out


def test_a_grant_that_would_make_the_state_unsafe_is_refused_and_the_oldest_can_always_grow():
    gate = TakeGate(100)
    old = gate.admit(10, bound=60)
    young = gate.admit(10, bound=60)  # safe: young 60 alone; old 60 beside young's 10
    assert young is not None and gate.running == 2 and gate.used == 20
    assert not young.try_grow(50)  # old could no longer reach its bound (60 + 50 > 100)
    assert young.deferred and young.blocked() and gate.deferred == 1 and gate.deferred_total == 1
    assert young.held == 10 and gate.used == 20  # a refusal holds nothing more
    assert young.try_grow(40)  # 60 + 40 fits: granted
    assert not young.deferred and gate.used == 50
    assert old.try_grow(60)  # the oldest always can: its bound beside what the younger ones hold fits
    assert gate.used == 100
    gate.release(old)
    gate.release(young)
    assert gate.used == 0 and gate.running == 0


def test_an_admission_that_would_make_the_state_unsafe_waits_and_a_release_wakes_it():
    gate = TakeGate(100)
    first = gate.admit(30, bound=70)
    thread, out = later(gate.admit, 40, 70)  # first's 70 + 40 > 100: unsafe, it waits
    time.sleep(0.2)
    assert out == [] and gate.waiting == 1 and gate.running == 1
    gate.release(first)
    thread.join(2)
    assert out and out[0] is not None and out[0].held == 40 and gate.waiting == 0 and gate.queued_total == 1
    gate.release(out[0])


def test_release_wakes_a_take_waiting_to_grow():
    gate = TakeGate(100)
    old, young = gate.admit(10, bound=60), gate.admit(10, bound=60)
    thread, out = later(young.grow, 60)
    time.sleep(0.2)
    assert out == [] and gate.deferred == 1
    gate.release(old)  # now the oldest: it may grow to its bound
    thread.join(2)
    assert out == [True] and young.held == 60 and gate.deferred == 0
    gate.release(young)


def test_release_bumps_the_generation_and_calls_listeners_outside_the_lock():
    gate = TakeGate(100)
    old, young = gate.admit(10, bound=60), gate.admit(10, bound=60)
    heard = []
    gate.listen(lambda: heard.append(gate.waiting))  # reads the gate: would deadlock inside its lock
    assert not young.try_grow(60) and young.blocked()
    gate.release(old)
    assert heard == [0] and not young.blocked() and young.deferred  # worth retrying, not yet granted
    assert young.try_grow(60)
    gate.release(young)


def test_new_takes_wait_while_a_running_take_is_deferred():
    gate = TakeGate(100)
    old, young = gate.admit(10, bound=60), gate.admit(10, bound=60)
    assert not young.try_grow(50)
    thread, out = later(gate.admit, 1, 1)  # safe by itself, but running takes come first
    time.sleep(0.2)
    assert out == [] and gate.waiting == 1
    assert young.try_grow(30)  # the deferred take got its memory: old's 60 + 30 + 1 fits the newcomer too
    thread.join(2)
    assert out and out[0] is not None
    for holding in (old, young, out[0]):
        gate.release(holding)


def test_cancel_while_waiting_for_admission_or_growth():
    gate = TakeGate(100)
    old, young = gate.admit(10, bound=60), gate.admit(10, bound=60)
    cancel = threading.Event()
    grower, grown = later(young.grow, 60, cancel)
    admit, admitted = later(gate.admit, 50, 50, cancel)
    time.sleep(0.2)
    assert grown == [] and admitted == [] and gate.waiting == 1
    cancel.set()
    grower.join(2)
    admit.join(2)
    assert grown == [False] and admitted == [None] and gate.waiting == 0
    assert young.held == 10 and gate.running == 2
    with gate.admitted(50, cancel) as holding:  # cancelled before it could enter: never admitted
        assert holding is False
    for holding in (old, young):
        gate.release(holding)
    assert gate.used == 0


def test_a_take_larger_than_the_capacity_runs_alone():
    gate = TakeGate(100)
    with gate.admitted(10, bound=500) as huge:
        assert huge and huge.try_grow(400)  # alone: every growth is granted
        thread, out = later(gate.admit, 1, 1)
        time.sleep(0.2)
        assert out == [] and gate.waiting == 1  # nobody beside it
    thread.join(2)
    assert out and out[0] is not None
    gate.release(out[0])
    assert gate.used == 0 and gate.peak_running == 1


def test_need_for_follows_the_state_and_stops_at_the_bound():
    gate = TakeGate(100)
    holding = gate.admit(10, bound=60)
    assert holding.need_for(1000) == 10  # no cost function: what it holds
    holding.need_at = lambda frames: frames // 10
    assert holding.need_for(300) == 30 and holding.need_for(10_000) == 60
    gate.release(holding)
