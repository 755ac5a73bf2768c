"""The CosyVoice3 flow scheduler serves takes as CosyVoice2's chunk scheduler does: a cancelled take's queued
call leaves unrun (and the take ends quietly), the most urgent calls go first, and a batch of first chunks
holds the LM's GPU turn while it runs."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from studio.tts.cosyvoice3 import flow_scheduler as flow_scheduler_module
from studio.tts.cosyvoice3.flow_jobs import FlowCallCancelled
from studio.tts.cosyvoice3.flow_scheduler import DiTFlowScheduler
from studio.tts.cosyvoice3.flow_stream import DiTFlowStream
from studio.tts.device import flow_turn
from studio.tts.device.flow_turn import FILE_VARIABLE, TurnWaiter
from studio.tts.synthesis import SynthesisSpec
from tests.tts.cosyvoice3.test_cv3_flow_stream import small_flow, take_inputs
from tests.tts.cosyvoice3.test_cv3_takes import FixedTokens, voice

__all__ = ["voice"]  # the module-scoped tiny CosyVoice3 fixture, shared

TOLERANCE = 1e-5
SR = 16000
WAIT_SECONDS = 60


@pytest.fixture(scope="module")
def flow():
    return small_flow()


@pytest.fixture
def solved(monkeypatch) -> list[int]:
    """The calls in each batched solve the scheduler runs (a call that never runs is in none)."""
    sizes: list[int] = []
    render_calls = flow_scheduler_module.render_calls
    monkeypatch.setattr(
        flow_scheduler_module, "render_calls", lambda calls: sizes.append(len(calls)) or render_calls(calls)
    )
    return sizes


def stream_of(flow, inputs) -> DiTFlowStream:
    return DiTFlowStream(flow, inputs["prompt_token"], inputs["prompt_feat"], inputs["embedding"])


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


def start(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_a_call_cancelled_while_queued_never_runs_and_the_others_are_unchanged(flow, solved):
    leaving_inputs, staying_inputs = take_inputs(20, 80, seed=11), take_inputs(33, 80, seed=12)
    leaving, staying = stream_of(flow, leaving_inputs), stream_of(flow, staying_inputs)
    cancel = threading.Event()
    scheduler = DiTFlowScheduler(max_takes=4)
    outcome: dict[str, object] = {}

    def leave() -> None:
        try:
            outcome["leaving"] = scheduler.render(
                leaving, leaving_inputs["tokens"][:, :40], False, cancel=cancel
            )
        except FlowCallCancelled as error:
            outcome["leaving"] = error

    def stay() -> None:
        outcome["staying"] = scheduler.render(staying, staying_inputs["tokens"][:, :40], False)

    with scheduler.paused():
        threads = [start(leave), start(stay)]
        wait_until(lambda: scheduler.queued() == 2, "both calls to queue")
        cancel.set()
        threads[0].join(WAIT_SECONDS)  # it leaves while the worker is still paused
        assert not threads[0].is_alive()
        assert isinstance(outcome["leaving"], FlowCallCancelled)
        assert scheduler.queued() == 1
    threads[1].join(WAIT_SECONDS)
    scheduler.close()
    assert solved == [1]
    stats = scheduler.stats()
    assert stats["cancelled"] == 1 and stats["calls"] == 1
    expected = stream_of(flow, staying_inputs).mel(staying_inputs["tokens"][:, :40], False)
    assert (outcome["staying"] - expected).abs().max().item() <= TOLERANCE


def test_the_worker_drops_a_cancelled_call_it_finds_in_the_queue(flow, solved):
    """The worker, not only the waiting take, checks the cancel: a call already cancelled when its batch is
    formed is answered with FlowCallCancelled and left out of the solve."""
    inputs = take_inputs(20, 80, seed=13)
    cancel = threading.Event()
    scheduler = DiTFlowScheduler(max_takes=4)
    stream = stream_of(flow, inputs)
    raised: list[BaseException] = []

    def call() -> None:
        try:
            scheduler.render(stream, inputs["tokens"][:, :40], False)
        except FlowCallCancelled as error:
            raised.append(error)

    with scheduler.paused():
        thread = start(call)
        wait_until(lambda: scheduler.queued() == 1, "the call to queue")
        job = scheduler._queue[0]
        job.cancel = cancel  # cancelled, though its take's thread does not poll for it
        cancel.set()
    thread.join(WAIT_SECONDS)
    scheduler.close()
    assert solved == [] and len(raised) == 1
    with pytest.raises(FlowCallCancelled, match="before its flow call was queued"):
        DiTFlowScheduler().render(stream, inputs["tokens"][:, :40], False, cancel=cancel)


def test_a_take_cancelled_while_its_chunk_waits_ends_quietly(voice, monkeypatch, solved):
    """Through the pipeline: the take's first chunk waits in the (paused) scheduler, the take is cancelled,
    its generator ends with no chunk and no error, and the flow never runs for it."""
    scheduler = DiTFlowScheduler()
    monkeypatch.setattr("studio.tts.cosyvoice3.token2wav.scheduled_default", lambda device: True)
    monkeypatch.setattr("studio.tts.cosyvoice3.token2wav.flow_scheduler_for", lambda flow: scheduler)
    t = np.arange(2 * SR) / SR
    prompt_wav = (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32)
    tokens = torch.randint(0, 6561, (120,), generator=torch.Generator().manual_seed(5)).tolist()
    cancel = threading.Event()
    spec = SynthesisSpec(
        text="One line.",
        mode="cross_lingual",
        prompt_wav=prompt_wav,
        prompt_sr=SR,
        stream=True,
        token_backend=FixedTokens(tokens),
        cancel=cancel,
    )
    outcome: dict[str, object] = {}

    def take() -> None:
        try:
            outcome["chunks"] = list(voice.synthesize(spec))
        except BaseException as error:  # noqa: BLE001 - the test reads it
            outcome["error"] = error

    with scheduler.paused():
        thread = start(take)
        wait_until(lambda: scheduler.queued() == 1 or not thread.is_alive(), "the first chunk to queue")
        cancel.set()
        thread.join(WAIT_SECONDS)
        assert not thread.is_alive()
    scheduler.close()
    assert "error" not in outcome, outcome.get("error")
    assert outcome["chunks"] == []
    assert solved == [] and scheduler.stats()["cancelled"] == 1


def test_most_urgent_first_first_chunks_then_the_earliest_deadline(flow):
    """With one call per batch, five queued calls run first chunks first (in arrival order), then by deadline."""
    takes = [take_inputs(20, 60, seed=20 + index) for index in range(5)]
    streams = [stream_of(flow, inputs) for inputs in takes]
    scheduler = DiTFlowScheduler(max_takes=1)
    now = time.monotonic()
    # (first, deadline): arrival order 0..4
    urgency = [(False, now + 3.0), (True, None), (False, now + 1.0), (True, None), (False, now + 2.0)]
    ran: list[int] = []  # the calls' arrival numbers (`seq`), in the order their batches ran
    run_group = scheduler._run_group

    def recording(jobs):
        ran.extend(job.seq for job in jobs)
        run_group(jobs)

    scheduler._run_group = recording
    threads = []
    with scheduler.paused():
        for index, ((first, deadline), inputs) in enumerate(zip(urgency, takes, strict=True)):

            def call(index=index, first=first, deadline=deadline, inputs=inputs):
                scheduler.render(
                    streams[index], inputs["tokens"][:, :40], False, first=first, deadline=deadline
                )

            threads.append(start(call))
            wait_until(lambda index=index: scheduler.queued() == index + 1, "the call to queue")
    for thread in threads:
        thread.join(WAIT_SECONDS)
    scheduler.close()
    assert ran == [1, 3, 2, 4, 0]
    assert list(scheduler.order) == [1, 3, 2, 4, 0]
    assert scheduler.stats()["batches"] == 5


def test_a_wav_stream_is_first_pending_until_its_first_chunk_then_due_when_its_audio_has_played(voice):
    from studio.tts.cosyvoice3.token2wav import DiTWavStream

    prompt_wav = np.zeros(2 * SR, dtype=np.float32)
    prompt_token, feat, embedding = voice._prompt_features(prompt_wav, SR)
    stream = DiTWavStream(
        flow=voice.model.flow,
        hift=voice.model.hift,
        prompt_token=torch.tensor([prompt_token], dtype=torch.int32),
        prompt_feat=feat,
        embedding=embedding,
        streaming=True,
        scheduled=False,
    )
    tokens = torch.randint(0, 6561, (80,), generator=torch.Generator().manual_seed(2)).tolist()
    assert stream.first_pending and stream.deadline(12.5) == 12.5
    before = time.monotonic()
    speech, _ = stream.chunk(tokens)
    after = time.monotonic()
    assert not stream.first_pending and speech.shape[1] > 0
    played = speech.shape[1] / 24000
    assert before + played <= stream.deadline(0.0) <= after + played
    stream.close()


def test_a_batch_of_first_chunks_holds_the_lms_turn_and_gives_it_back(flow, monkeypatch):
    monkeypatch.delenv(FILE_VARIABLE, raising=False)
    turn = flow_turn.share()
    waiter = TurnWaiter(turn.path)  # what vLLM's engine core reads before each LM step
    scheduler = DiTFlowScheduler()
    held: list[bool] = []  # per batch: the LM waits during its solve
    render_calls = flow_scheduler_module.render_calls

    def solve(calls):
        held.append(waiter.until() > time.monotonic())
        return render_calls(calls)

    monkeypatch.setattr(flow_scheduler_module, "render_calls", solve)
    inputs = take_inputs(20, 80, seed=30)
    try:
        stream = stream_of(flow, inputs)
        scheduler.render(stream, inputs["tokens"][:, :40], False, first=True)
        assert waiter.until() == 0.0  # given back once the batch is done
        scheduler.render(stream, inputs["tokens"][:, :60], False, first=False)
        turn.lm_requests = lambda: 2  # the LM decodes for another take too: it goes on
        scheduler.render(stream_of(flow, inputs), inputs["tokens"][:, :40], False, first=True)
    finally:
        scheduler.close()
        turn.close()
    assert held == [True, False, False]
    assert scheduler.stats()["turn_batches"] == 1
