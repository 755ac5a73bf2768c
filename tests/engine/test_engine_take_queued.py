"""A take the take gate holds back for GPU memory tells the studio so (TakeQueued) before its first chunk, and
again each time it starts to wait between chunks.

The engine's own take path (``Engine.synthesize`` -> ``runner.run_take`` -> the runtime's take gate) runs here
in this process on the tiny model, its events crossing a real pipe. On the CPU no gate is made from a memory
budget, so the test gives the model one and fills it, as a take already running would."""

from __future__ import annotations

import threading

import pytest

from studio.engine.protocol import (
    AudioChunk,
    Synthesize,
    TakeFinished,
    TakeQueued,
)
from studio.runtime import runner
from studio.runtime.warmup import WARMUP_PROMPT_TEXT, synthetic_voice
from studio.tts.take_gate import TakeGate

PROMPT = synthetic_voice(16000, 2.0)


def take(seed: int) -> Synthesize:
    return Synthesize(
        "Hello there, studio.",
        prompt_wav=PROMPT,
        prompt_sr=16000,
        prompt_text=WARMUP_PROMPT_TEXT,
        seed=seed,
        exact_speech_tokens=30,
    )


@pytest.fixture
def engine(engine_in_process):
    return engine_in_process


def test_a_take_held_for_memory_sends_take_queued_before_its_first_chunk(engine):
    gate = engine.engine.loaded.model.take_gate = TakeGate(1 << 30)
    request = take(seed=1)
    with gate.admitted(gate.capacity):  # a running take holds all of the budget
        engine.engine.synthesize(request)
        held = engine.until(lambda e: isinstance(e, TakeQueued), timeout=30.0)
        assert gate.waiting == 1
    rest = engine.until(lambda e: isinstance(e, TakeFinished) and e.request_id == request.request_id)

    ours = [e for e in held + rest if getattr(e, "request_id", None) == request.request_id]
    kinds = [type(e) for e in ours]
    assert kinds.count(TakeQueued) == 1
    assert kinds.index(TakeQueued) < kinds.index(AudioChunk)
    assert ours[-1].stats.chunks == kinds.count(AudioChunk) > 0 and not ours[-1].stats.cancelled
    assert gate.queued_total == 1 and gate.used == 0


def test_a_take_the_gate_admits_at_once_sends_no_take_queued(engine):
    engine.engine.loaded.model.take_gate = TakeGate(1 << 30)
    request = take(seed=2)
    engine.engine.synthesize(request)
    events = engine.until(lambda e: isinstance(e, TakeFinished) and e.request_id == request.request_id)
    assert not any(isinstance(e, TakeQueued) for e in events)
    assert any(isinstance(e, AudioChunk) for e in events)


def test_a_queued_take_cancelled_while_it_waits_ends_cancelled_without_audio(engine):
    gate = engine.engine.loaded.model.take_gate = TakeGate(1 << 30)
    request = take(seed=3)
    with gate.admitted(gate.capacity):
        engine.engine.synthesize(request)
        engine.until(lambda e: isinstance(e, TakeQueued))
        engine.engine.cancel(request.request_id)
        events = engine.until(lambda e: isinstance(e, TakeFinished) and e.request_id == request.request_id)
    assert events[-1].stats.cancelled and events[-1].stats.chunks == 0
    assert not any(isinstance(e, AudioChunk) for e in events)


def test_the_queue_watch_tells_each_time_a_take_starts_to_wait(monkeypatch):
    """`run_take`'s watch on the gate: a take that waits to start, runs, then waits to grow its state mid-take
    is told of twice (once a wait), not once per poll and not only the first time."""
    monkeypatch.setattr(runner, "QUEUE_POLL_S", 0.005)
    looks = iter([False, True, True, False, False, True, True, False])
    done, told = threading.Event(), []

    class Gate:
        def queues(self, thread_id: int) -> bool:
            waiting = next(looks, None)
            if waiting is None:
                done.set()
            return bool(waiting)

    finished = threading.Event()
    watch = threading.Thread(target=runner._watch_queue, args=(Gate(), 1, finished, lambda: told.append(1)))
    watch.start()
    assert done.wait(10)
    finished.set()
    watch.join(10)
    assert told == [1, 1] and not watch.is_alive()
