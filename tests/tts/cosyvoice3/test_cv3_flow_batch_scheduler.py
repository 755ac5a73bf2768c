"""The CosyVoice3 flow scheduler: several take threads' calls run in batches by one worker thread, and each
take gets what its own `DiTFlowStream.mel` gives."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from studio.tts.cosyvoice3.flow_prompt_cache import DiTPromptCache
from studio.tts.cosyvoice3.flow_scheduler import (
    DiTFlowScheduler,
    close_flow_scheduler,
    flow_scheduler_for,
)
from studio.tts.cosyvoice3.flow_stream import DiTFlowStream
from tests.tts.cosyvoice3.test_cv3_flow_stream import small_flow, take_inputs, take_schedule

TOLERANCE = 1e-5
JOIN_SECONDS = 120


@pytest.fixture(scope="module")
def flow():
    return small_flow()


def stream_of(flow, inputs, cache=None) -> DiTFlowStream:
    return DiTFlowStream(
        flow, inputs["prompt_token"], inputs["prompt_feat"], inputs["embedding"], prompt_cache=cache
    )


def run_threads(targets) -> None:
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_SECONDS)
    assert not any(thread.is_alive() for thread in threads), "a take thread did not finish"


def test_take_threads_get_their_own_results_from_shared_batches(flow):
    """Four takes of four calls each (one voice twice: its prompt chunks are computed once, in the first
    batch), started together: every batch holds all four calls."""
    voices = ((60, 200, 1), (9, 200, 2), (33, 200, 3))
    takes = [take_inputs(prompt, tokens, seed) for prompt, tokens, seed in voices]
    takes.append(takes[0])
    cache = DiTPromptCache(2**40)
    scheduler = DiTFlowScheduler(max_takes=4, gather_seconds=5.0)
    started = threading.Barrier(len(takes))
    results: dict[int, list[torch.Tensor]] = {}
    errors: list[BaseException] = []

    def take_thread(index: int) -> None:
        inputs = takes[index]
        counts = take_schedule(inputs["prompt_token"].shape[1], inputs["tokens"].shape[1])
        stream = stream_of(flow, inputs, cache)
        started.wait()
        try:
            results[index] = [
                scheduler.render(stream, inputs["tokens"][:, :count], call == len(counts) - 1)
                for call, count in enumerate(counts)
            ]
        except BaseException as error:  # noqa: BLE001 - reported by the test thread
            errors.append(error)

    run_threads([lambda index=index: take_thread(index) for index in range(len(takes))])
    scheduler.close()
    assert not errors
    stats = scheduler.stats()
    assert stats == {
        "batches": 4,
        "calls": 16,
        "largest_batch": 4,
        "queued": 0,
        "cancelled": 0,
        "turn_batches": 0,
    }
    assert len(cache) == 2  # the 9-token prompt has no chunk to cache
    assert cache.stats()["misses"] == 2 and cache.stats()["hits"] == 1
    for index, inputs in enumerate(takes):
        counts = take_schedule(inputs["prompt_token"].shape[1], inputs["tokens"].shape[1])
        alone = stream_of(flow, inputs)
        for call, (count, mel) in enumerate(zip(counts, results[index], strict=True)):
            expected = alone.mel(inputs["tokens"][:, :count], call == len(counts) - 1)
            assert mel.shape == expected.shape
            if mel.numel():
                assert (mel - expected).abs().max().item() <= TOLERANCE


def test_an_invalid_call_fails_alone_and_its_batch_goes_on(flow):
    good_inputs, bad_inputs = take_inputs(20, 80, seed=4), take_inputs(20, 80, seed=5)
    good, bad = stream_of(flow, good_inputs), stream_of(flow, bad_inputs)
    scheduler = DiTFlowScheduler(max_takes=2, gather_seconds=2.0)
    outcome: dict[str, object] = {}

    def good_take() -> None:
        outcome["good"] = scheduler.render(good, good_inputs["tokens"][:, :40], False)

    def bad_take() -> None:
        try:
            scheduler.render(bad, bad_inputs["tokens"][:, :2], False)
        except ValueError as error:
            outcome["bad"] = error

    run_threads([good_take, bad_take])
    assert scheduler.stats()["largest_batch"] == 2
    assert "at least 3 tokens" in str(outcome["bad"])
    expected = stream_of(flow, good_inputs).mel(good_inputs["tokens"][:, :40], False)
    assert (outcome["good"] - expected).abs().max().item() <= TOLERANCE
    scheduler.close()
    with pytest.raises(RuntimeError, match="scheduler is closed"):
        scheduler.render(good, good_inputs["tokens"][:, :60], False)


def test_the_batch_size_follows_studio_flow_max_batch(monkeypatch):
    monkeypatch.delenv("STUDIO_FLOW_MAX_BATCH", raising=False)
    assert DiTFlowScheduler().max_takes == 32
    monkeypatch.setenv("STUDIO_FLOW_MAX_BATCH", "3")
    assert DiTFlowScheduler().max_takes == 3
    monkeypatch.setenv("STUDIO_FLOW_MAX_BATCH", "0")
    with pytest.raises(ValueError, match="max_takes >= 1 \\(STUDIO_FLOW_MAX_BATCH\\), got 0"):
        DiTFlowScheduler()


def test_each_flow_has_one_scheduler_until_it_is_closed(flow):
    scheduler = flow_scheduler_for(flow)
    assert flow_scheduler_for(flow) is scheduler and flow_scheduler_for(small_flow()) is not scheduler
    inputs = take_inputs(20, 40, seed=7)
    scheduler.render(stream_of(flow, inputs), inputs["tokens"], True)
    close_flow_scheduler(flow)
    with pytest.raises(RuntimeError, match="scheduler is closed"):
        scheduler.render(stream_of(flow, inputs), inputs["tokens"], True)
    assert flow_scheduler_for(flow) is not scheduler
    close_flow_scheduler(flow)


def test_the_worker_runs_a_call_under_its_callers_autocast(flow):
    """Autocast is per thread: the caller's (here CPU bfloat16) must reach the worker's solve."""
    inputs = take_inputs(20, 60, seed=6)
    scheduler = DiTFlowScheduler()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scheduled = scheduler.render(stream_of(flow, inputs), inputs["tokens"], True)
        expected = stream_of(flow, inputs).mel(inputs["tokens"], True)
    scheduler.close()
    full_precision = stream_of(flow, inputs).mel(inputs["tokens"], True)
    assert torch.equal(scheduled, expected)
    assert (scheduled - full_precision).abs().max().item() > 1e-3


class _Take:
    """What the scheduler reads of a take it expects: its first chunk is still to come, and no cancel."""

    first_pending = True
    cancel = None


@pytest.mark.parametrize(("gather_ms", "batches"), [("3000", 1), ("0", 2)])
def test_first_calls_of_takes_started_together_share_a_batch(flow, monkeypatch, gather_ms, batches):
    """The second take's first call comes 0.3 s after the first take's: with a gather window they run as one
    batch (the worker waits for the expected take), without one the first runs alone."""
    monkeypatch.setenv("STUDIO_FLOW_GATHER_MS", gather_ms)
    scheduler = DiTFlowScheduler(max_takes=4)
    inputs = [take_inputs(60, 100, seed) for seed in (1, 2)]
    takes = [_Take(), _Take()]
    for take in takes:
        scheduler.expect(take)
    mels, errors = {}, []

    def first_call(index: int) -> None:
        count = take_schedule(inputs[index]["prompt_token"].shape[1], inputs[index]["tokens"].shape[1])[0]
        try:
            stream = stream_of(flow, inputs[index])
            mels[index] = scheduler.render(
                stream, inputs[index]["tokens"][:, :count], False, first=True, take=takes[index]
            )
        except BaseException as error:  # noqa: BLE001 - reported by the test thread
            errors.append(error)

    first = threading.Thread(target=first_call, args=(0,))
    first.start()
    time.sleep(0.3)
    run_threads([lambda: first_call(1)])
    first.join(JOIN_SECONDS)
    scheduler.close()
    assert not errors and sorted(mels) == [0, 1]
    stats = scheduler.stats()
    assert stats["batches"] == batches and stats["calls"] == 2
    assert (scheduler.gathered_seconds >= 0.25) == (batches == 1)


def test_a_take_that_ended_is_not_waited_for(flow, monkeypatch):
    monkeypatch.setenv("STUDIO_FLOW_GATHER_MS", "3000")
    scheduler = DiTFlowScheduler(max_takes=4)
    inputs = take_inputs(60, 100, 1)
    gone, present = _Take(), _Take()
    scheduler.expect(gone)
    scheduler.expect(present)
    scheduler.forget(gone)
    count = take_schedule(60, 100)[0]
    started = time.monotonic()
    scheduler.render(stream_of(flow, inputs), inputs["tokens"][:, :count], False, first=True, take=present)
    scheduler.close()
    assert time.monotonic() - started < 2.5 and scheduler.gathered_seconds < 0.5
