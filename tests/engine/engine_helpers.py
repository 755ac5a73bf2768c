"""Helpers for engine tests: collect events of given takes from a client, with a deadline."""

from __future__ import annotations

import time
from collections import defaultdict

from studio.engine.protocol import AudioChunk, EngineState, Error, State, TakeFinished


def collect_takes(client, request_ids, timeout=120.0, on_event=None):
    """Events per request id until each has a TakeFinished or Error; also returns the States seen."""
    pending = set(request_ids)
    per_take: dict[str, list] = defaultdict(list)
    states: list[State] = []
    deadline = time.monotonic() + timeout
    while pending:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"takes {sorted(pending)} did not finish within {timeout} s"
        event = client.get_event(timeout=remaining)
        assert event is not None, f"no event within {timeout} s"
        if on_event is not None:
            on_event(event)
        if isinstance(event, State):
            states.append(event)
            assert event.state is not EngineState.CRASHED, event.detail
        request_id = getattr(event, "request_id", None)
        if request_id in pending:
            per_take[request_id].append(event)
            if isinstance(event, (TakeFinished, Error)):
                pending.discard(request_id)
    return per_take, states


def chunks_of(events):
    return [e for e in events if isinstance(e, AudioChunk)]


def finished_of(events) -> TakeFinished:
    last = events[-1]
    assert isinstance(last, TakeFinished), f"take ended with {last!r}"
    return last


def states_until(client, wanted: EngineState, timeout=300.0) -> list[State]:
    """All States up to and including the first ``wanted`` one (fails on CRASHED or timeout)."""
    seen: list[State] = []
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no {wanted.value} state within {timeout} s; saw {[s.state for s in seen]}"
        event = client.get_event(timeout=remaining)
        assert event is not None, f"no {wanted.value} state within {timeout} s; saw {[s.state for s in seen]}"
        if isinstance(event, State):
            seen.append(event)
            if event.state is wanted:
                return seen
            assert event.state is not EngineState.CRASHED, event.detail
