"""The fork gate: the studio's weights wait until vLLM has forked its engine core from the starting thread."""

from __future__ import annotations

import os
import threading

from studio.tts.device.fork_gate import ForkGate


def _fork_and_reap() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def test_the_gate_opens_when_its_own_thread_forks_and_not_before():
    gate = ForkGate()
    assert not gate.is_open() and not gate.wait(0.05)
    _fork_and_reap()
    assert gate.is_open() and gate.forked and gate.wait(0)


def test_a_fork_on_another_thread_leaves_the_gate_closed_until_it_is_opened():
    gate = ForkGate()
    other = threading.Thread(target=_fork_and_reap)
    other.start()
    other.join()
    assert not gate.is_open()
    gate.open()
    assert gate.is_open() and not gate.forked
    _fork_and_reap()  # an opened gate stays as it was
    assert not gate.forked


def test_an_unarmed_gate_is_open_and_a_waiting_thread_goes_on_at_the_fork():
    assert ForkGate(armed=False).is_open()
    gate = ForkGate()
    waited = []
    waiter = threading.Thread(target=lambda: waited.append(gate.wait(10)))
    waiter.start()
    _fork_and_reap()
    waiter.join(10)
    assert waited == [True]
