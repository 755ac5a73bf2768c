"""The flow's chunk scheduler: batched takes equal takes run alone, most urgent first, cancel, failures.

Real flow and HiFT modules (small ones) and real `Token2WavStream`s; `ChunkScheduler.paused()` holds the
scheduler while several takes queue a chunk each, so the test decides what one tick sees.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from studio.tts.device import flow_turn
from studio.tts.device.cuda_graphs import ShapeGraphs
from studio.tts.device.flow_turn import FILE_VARIABLE, TurnWaiter
from studio.tts.flow.cfm import NOISE_FRAMES
from studio.tts.flow.streaming import incremental
from studio.tts.flow.streaming.batched_solve import EstimatorState
from studio.tts.flow.streaming.solver import EstimatorSolver, SolveRequest
from studio.tts.scheduler import (
    IDLE_CAPTURE_SECONDS,
    ChunkCancelled,
    ChunkScheduler,
    close_scheduler,
    scheduler_for,
)
from studio.tts.token2wav import Token2WavStream
from tests.tts.concurrency import queue_while_paused
from tests.tts.test_incremental_flow import modules, prompt, relative_error, speech_tokens  # noqa: F401

TAKES = [(7, 80, 1), (25, 70, 2), (13, 60, 3)]  # prompt tokens, speech tokens, seed


def make_stream(flow, hift, prompt_tokens: int, seed: int, scheduled: bool, **options) -> Token2WavStream:
    return Token2WavStream(
        flow,
        hift,
        **prompt(prompt_tokens, seed),
        streaming=True,
        generator=torch.Generator().manual_seed(seed),
        incremental=True,
        prompt_cache=False,
        scheduled=scheduled,
        **options,
    )


def calls(stream: Token2WavStream, n_tokens: int):
    """The chunk calls a take makes once all its tokens are there: (tokens, finalize) each."""
    while stream.ready(n_tokens):
        yield stream.tokens_needed(), False
    yield n_tokens, True


def run_alone(flow, hift) -> tuple[list[torch.Tensor], list[list[tuple[int, bool]]]]:
    """Each take's whole speech rendered without the scheduler, and the chunk calls it made."""
    speech, made = [], []
    for prompt_tokens, n_tokens, seed in TAKES:
        stream = make_stream(flow, hift, prompt_tokens, seed, scheduled=False)
        tokens, parts = speech_tokens(n_tokens, seed), []
        made.append([])
        for end, final in calls(stream, n_tokens):  # lazily: each call moves the stream on
            made[-1].append((end, final))
            parts.append(stream.finish(tokens)[0] if final else stream.chunk(tokens[:end])[0])
        speech.append(torch.cat(parts, dim=1))
    return speech, made


@pytest.fixture
def scheduler(modules, monkeypatch):  # noqa: F811
    """A fresh scheduler for the test's flow, in place of the flow's own."""
    flow, _ = modules
    made = ChunkScheduler(flow)
    monkeypatch.setattr("studio.tts.token2wav.scheduler_for", lambda _flow: made)
    yield made
    made.close()


def test_takes_batched_by_the_scheduler_equal_takes_run_alone(modules, scheduler, monkeypatch):  # noqa: F811
    flow, hift = modules
    alone, pending = run_alone(flow, hift)
    batches = []  # the takes' encoders: one batch of recomputed prefixes per tick
    encode = incremental.encode_prefixes
    monkeypatch.setattr(incremental, "encode_prefixes", lambda *a: batches.append(len(a[1])) or encode(*a))
    streams = [make_stream(flow, hift, p, seed, scheduled=True) for p, _, seed in TAKES]
    tokens = [speech_tokens(n, seed) for _, n, seed in TAKES]
    parts: list[list[torch.Tensor]] = [[] for _ in TAKES]
    for round_ in range(max(len(p) for p in pending)):

        def work(i: int, round_: int = round_) -> None:
            end, final = pending[i][round_]
            stream = streams[i]
            out = stream.finish(tokens[i]) if final else stream.chunk(tokens[i][:end])
            parts[i].append(out[0])

        running = [i for i in range(len(TAKES)) if round_ < len(pending[i])]
        assert not queue_while_paused(scheduler, [lambda i=i: work(i) for i in running])
    assert scheduler.jobs == sum(len(p) for p in pending) == sum(batches)
    assert scheduler.ticks == len(batches) < scheduler.jobs  # rounds of several takes ran as one tick
    assert scheduler.host_seconds > 0 and scheduler.idle_seconds > 0  # the test's pauses leave it idle
    assert scheduler.gpu_seconds == 0  # no GPU here
    for ours, theirs in zip(parts, alone, strict=True):
        joined = torch.cat(ours, dim=1)
        assert joined.device.type == "cpu" and joined.shape == theirs.shape
        assert relative_error(joined, theirs) < 1e-5


def test_the_most_urgent_chunk_goes_first_and_ties_go_in_arrival_order(modules, scheduler):  # noqa: F811
    """A new take's first chunk is due now; a later chunk is due when its take's audio would run out."""
    flow, hift = modules
    scheduler.max_jobs = 1  # one chunk per tick: the order is the scheduler's choice alone
    now = time.monotonic()
    playing_long = make_stream(flow, hift, 7, 1, scheduled=True)  # 10 s of audio still to play
    playing_long._first_out, playing_long._audio_out = now, 10.0
    running_dry = make_stream(flow, hift, 13, 2, scheduled=True)  # 0.5 s left
    running_dry._first_out, running_dry._audio_out = now - 5.0, 5.5
    new_a, new_b = (make_stream(flow, hift, 25, seed, scheduled=True) for seed in (3, 4))
    tokens = speech_tokens(40, 9)
    order = [playing_long, running_dry, new_a, new_b]  # the order they ask
    seq0 = next(scheduler._seq) + 1
    started = []

    def ask(stream: Token2WavStream) -> None:
        stream.chunk(tokens[: stream.tokens_needed()])

    errors: list[BaseException] = []
    threads = []
    with scheduler.paused():
        for stream in order:  # one at a time, so arrival order is known
            thread = threading.Thread(target=lambda s=stream: errors.extend(_catch(ask, s)))
            thread.start()
            threads.append(thread)
            started.append(stream)
            while scheduler.queued() < len(started):
                time.sleep(0.002)
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    taken = [seq - seq0 for seq in list(scheduler.order)[-4:]]
    # new_a and new_b are due when they asked (now + a little), running_dry at now + 0.5 s, playing_long at
    # now + 10 s; new_a asked before new_b
    assert taken == [2, 3, 1, 0]


def _catch(fn, *args) -> list[BaseException]:
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - returned to the test
        return [exc]
    return []


def test_a_cancelled_take_leaves_the_queue_and_the_others_are_served(modules, scheduler):  # noqa: F811
    flow, hift = modules
    cancel = threading.Event()
    leaving = make_stream(flow, hift, 7, 1, scheduled=True, cancel=cancel)
    staying = make_stream(flow, hift, 13, 2, scheduled=True)
    tokens = speech_tokens(40, 9)
    outcome: dict[str, object] = {}

    def ask(name: str, stream: Token2WavStream) -> None:
        try:
            outcome[name] = stream.chunk(tokens[: stream.tokens_needed()])[0]
        except ChunkCancelled as exc:
            outcome[name] = exc

    with scheduler.paused():
        threads = [
            threading.Thread(target=ask, args=item) for item in (("leaving", leaving), ("staying", staying))
        ]
        for thread in threads:
            thread.start()
        while scheduler.queued() < 2:
            time.sleep(0.002)
        cancel.set()
        threads[0].join(timeout=5)  # it returns while the scheduler is still paused
        assert isinstance(outcome.get("leaving"), ChunkCancelled)
        assert scheduler.queued() == 1
    threads[1].join(timeout=120)
    assert isinstance(outcome["staying"], torch.Tensor) and outcome["staying"].shape[1] > 0
    assert scheduler.jobs == 1  # the cancelled chunk never ran
    assert leaving.token_offset == 0  # and its take is where it was


def test_a_failing_chunk_fails_its_take_only(modules, scheduler, caplog):  # noqa: F811
    flow, hift = modules
    alone, _ = run_alone(flow, hift)
    streams = [make_stream(flow, hift, p, seed, scheduled=True) for p, _, seed in TAKES]
    tokens = [speech_tokens(n, seed) for _, n, seed in TAKES]
    bad = make_stream(flow, hift, 9, 7, scheduled=True)
    bad_tokens = speech_tokens(40, 7)
    bad_tokens[5] = 10**6  # no such speech token: its encoder fails
    results: dict[int, torch.Tensor] = {}

    def whole_take(i: int) -> None:
        stream, parts = streams[i], []
        for end, final in calls(stream, len(tokens[i])):
            parts.append((stream.finish(tokens[i]) if final else stream.chunk(tokens[i][:end]))[0])
        results[i] = torch.cat(parts, dim=1)

    def failing_take() -> None:
        bad.chunk(bad_tokens[: bad.tokens_needed()])

    work = [lambda i=i: whole_take(i) for i in range(len(TAKES))] + [failing_take]
    errors = queue_while_paused(scheduler, work)
    assert len(errors) == 1 and isinstance(errors[0], IndexError)
    assert "encoders failed (IndexError); one by one" in caplog.text  # in a batch with the others first
    for i, theirs in enumerate(alone):
        assert relative_error(results[i], theirs) < 1e-5


def test_a_failed_batch_is_solved_again_one_by_one(modules):  # noqa: F811
    """One request in a batch that cannot run gets the error; the others in the batch get their result."""
    flow, _ = modules
    solver = EstimatorSolver(flow.decoder, graphs=False)
    beyond = NOISE_FRAMES - 10  # its 40 frames run past the fixed noise buffer
    g = torch.Generator().manual_seed(4)

    def request(frame0: int) -> SolveRequest:
        mu = torch.randn(1, 80, 40, generator=g)
        return SolveRequest(
            EstimatorState(length=frame0), mu, torch.randn(1, 80, generator=g), torch.zeros(1, 80, 40),
            frame0=frame0, commit=frame0, mark=None, steps=10,
        )  # fmt: skip

    good, bad, other = request(0), request(beyond), request(0)
    solver.solve_many([good, bad, other])
    assert all(r.done for r in (good, bad, other))
    assert isinstance(bad.error, ValueError) and "noise buffer" in str(bad.error)
    for ok in (good, other):
        assert ok.error is None
        alone = solver.solve(SolveRequest(EstimatorState(), ok.mu, ok.spks, ok.cond, 0, 0, None, 10))
        assert relative_error(ok.result, alone) < 1e-5


# -- through CosyVoice2.synthesize (the tiny model folder) ------------------------------------------------
def _take(cosyvoice, prompt_wav, **extra) -> list[dict]:
    from studio.tts.synthesis import SynthesisSpec

    spec = SynthesisSpec(text="Scheduled.", prompt_wav=prompt_wav, prompt_text="A prompt.", stream=True,
                         exact_speech_tokens=80, text_frontend=False, seed=3, **extra)  # fmt: skip
    return list(cosyvoice.synthesize(spec))


def test_a_streamed_take_through_the_scheduler_equals_one_without(tiny_cosyvoice, prompt_wav16k, monkeypatch):
    from studio.tts.scheduler import scheduler_stats

    flow = tiny_cosyvoice.model.flow
    monkeypatch.setenv("STUDIO_FLOW_SCHEDULER", "0")
    before = scheduler_stats(flow)["jobs"]
    own = _take(tiny_cosyvoice, prompt_wav16k)
    assert scheduler_stats(flow)["jobs"] == before
    monkeypatch.setenv("STUDIO_FLOW_SCHEDULER", "1")
    scheduled = _take(tiny_cosyvoice, prompt_wav16k)
    assert scheduler_stats(flow)["jobs"] == before + len(scheduled) >= before + 3
    assert [c["tts_speech"].shape for c in scheduled] == [c["tts_speech"].shape for c in own]
    joined = torch.cat([c["tts_speech"] for c in scheduled], dim=1)
    # on CUDA another thread's cuBLAS handle may pick other kernels: the H200 measured 1.4e-5
    tolerance = 1e-4 if next(flow.parameters()).is_cuda else 1e-5
    assert relative_error(joined, torch.cat([c["tts_speech"] for c in own], dim=1)) < tolerance


def test_cancelling_a_take_whose_chunk_waits_ends_it_without_an_error(
    tiny_cosyvoice, prompt_wav16k, monkeypatch
):
    from studio.tts.scheduler import scheduler_for

    monkeypatch.setenv("STUDIO_FLOW_SCHEDULER", "1")
    scheduler = scheduler_for(tiny_cosyvoice.model.flow)
    cancel = threading.Event()
    outcome: dict[str, object] = {}

    def take() -> None:
        try:
            outcome["chunks"] = _take(tiny_cosyvoice, prompt_wav16k, cancel=cancel)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            outcome["error"] = exc

    thread = threading.Thread(target=take)
    with scheduler.paused():
        thread.start()
        deadline = time.monotonic() + 60
        while scheduler.queued() < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert scheduler.queued() == 1
        cancel.set()
        thread.join(timeout=30)
        assert not thread.is_alive()  # it ended while the scheduler was still held
    assert "error" not in outcome and outcome["chunks"] == []
    assert scheduler.queued() == 0


def test_a_batch_failing_while_it_writes_back_keeps_the_results_already_written(modules, monkeypatch):  # noqa: F811
    """A failure after the first request's state and result were copied back: that one keeps its result,
    the others are solved again alone."""
    flow, _ = modules
    solver = EstimatorSolver(flow.decoder, graphs=False)
    real_copy_out = EstimatorSolver._copy_out
    failed = []

    def copy_out_failing_after_the_first(self, batch, arena, output):
        if len(batch.requests) > 1 and not failed:
            failed.append(1)
            real_copy_out(
                self, type(batch)(**{**batch.__dict__, "requests": batch.requests[:1]}), arena, output
            )
            raise RuntimeError("write-back failed")
        return real_copy_out(self, batch, arena, output)

    monkeypatch.setattr(EstimatorSolver, "_copy_out", copy_out_failing_after_the_first)
    g = torch.Generator().manual_seed(8)
    requests = [
        SolveRequest(
            EstimatorState(),
            torch.randn(1, 80, 40, generator=g),
            torch.randn(1, 80, generator=g),
            torch.zeros(1, 80, 40),
            frame0=0,
            commit=32,
            mark=None,
            steps=10,
        )
        for _ in range(3)
    ]
    solver.solve_many(requests)
    assert failed and all(r.done and r.error is None for r in requests)
    assert all(r.state.length == 32 for r in requests)  # each state written back once
    for request in requests:
        alone = solver.solve(
            SolveRequest(EstimatorState(), request.mu, request.spks, request.cond, 0, 0, None, 10)
        )
        assert relative_error(request.result, alone) < 1e-5


def test_a_tick_with_a_first_chunk_holds_the_gpu_turn_until_its_audio_is_out(modules, scheduler, monkeypatch):  # noqa: F811
    flow, hift = modules
    monkeypatch.delenv(FILE_VARIABLE, raising=False)
    turn = flow_turn.share()
    waiter = TurnWaiter(turn.path)  # what vLLM's engine core reads before each LM step
    ticks = []  # per tick: (it holds a first chunk, the LM would wait while its chunks are launched)
    launch = ChunkScheduler._launch

    def launched(self, jobs):
        ticks.append((any(job.first for job in jobs), waiter.until() > time.monotonic()))
        return launch(self, jobs)

    monkeypatch.setattr(ChunkScheduler, "_launch", launched)
    prompt_tokens, n_tokens, seed = TAKES[0]
    try:
        for _ in range(2):  # a second take of the same voice starts over with a first chunk
            stream = make_stream(flow, hift, prompt_tokens, seed, scheduled=True)
            tokens = speech_tokens(n_tokens, seed)
            for end, final in calls(stream, n_tokens):
                stream.finish(tokens) if final else stream.chunk(tokens[:end])
            assert waiter.until() == 0.0  # given back: the LM steps freely between takes
    finally:
        turn.close()
    per_take = len(ticks) // 2
    assert per_take >= 2 and ticks[:per_take] == ticks[per_take:]
    assert ticks[0] == (True, True)
    assert set(ticks[1:per_take]) == {(False, False)}
    assert scheduler.turn_ticks == 2


def _first_chunks_of(streams: list[Token2WavStream], delays: list[float]) -> list[BaseException]:
    """Each stream asks for its first chunk on a thread of its own, `delays[i]` seconds after the start."""
    tokens = speech_tokens(40, 9)
    errors: list[BaseException] = []

    def ask(stream: Token2WavStream, delay: float) -> None:
        time.sleep(delay)
        errors.extend(_catch(lambda: stream.chunk(tokens[: stream.tokens_needed()])))

    threads = [threading.Thread(target=ask, args=pair) for pair in zip(streams, delays, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return errors


@pytest.fixture
def ticks(scheduler, monkeypatch):
    """Per tick the scheduler launches: how many of its chunks are first chunks, and how many chunks it has."""
    seen: list[tuple[int, int]] = []
    launch = ChunkScheduler._launch

    def launched(self, jobs):
        seen.append((sum(job.first for job in jobs), len(jobs)))
        return launch(self, jobs)

    monkeypatch.setattr(ChunkScheduler, "_launch", launched)
    return seen


def test_takes_started_together_share_the_tick_of_their_first_chunks(modules, scheduler, ticks):  # noqa: F811
    """The second take's first chunk comes 0.15 s after the first's: the first waits for it (one tick)."""
    flow, hift = modules
    scheduler.gather_window = 2.0  # long, so that a slow machine still shows the behaviour
    streams = [make_stream(flow, hift, 25, seed, scheduled=True) for seed in (1, 2)]
    assert not _first_chunks_of(streams, [0.0, 0.15])
    assert ticks == [(2, 2)]
    assert 0.1 < scheduler.gather_seconds < 2.0  # it waited for the sibling, not for the whole window


@pytest.mark.parametrize("other", ["started later", "ended", "cancelled"])
def test_a_first_chunk_does_not_wait_for_a_take_that_will_not_come_with_it(modules, scheduler, ticks, other):  # noqa: F811
    flow, hift = modules
    scheduler.gather_window = 2.0
    first = make_stream(flow, hift, 25, 1, scheduled=True)
    if other == "started later":
        time.sleep(0.2)  # beyond SIBLING_SECONDS: not one of the takes started together
    second = make_stream(flow, hift, 25, 2, scheduled=True, cancel=threading.Event())
    if other == "ended":
        second.close()  # its take failed or finished without a first chunk
    elif other == "cancelled":
        second.cancel.set()
    assert not _first_chunks_of([first], [0.0])
    assert ticks == [(1, 1)]
    assert scheduler.gather_seconds < 0.5


def test_no_gathering_beyond_the_most_first_chunks_a_tick_gathers(modules, scheduler, ticks, monkeypatch):  # noqa: F811
    """Three takes started together, at most two gathered: the first chunk that is there goes alone."""
    flow, hift = modules
    monkeypatch.setattr("studio.tts.scheduler.gather.GATHER_MAX_TAKES", 2)
    scheduler.gather_window = 2.0
    streams = [make_stream(flow, hift, 25, seed, scheduled=True) for seed in (1, 2, 3)]
    assert not _first_chunks_of(streams, [0.0, 0.6, 0.6])
    assert ticks[0] == (1, 1) and scheduler.gather_seconds < 0.5


def test_no_gathering_when_switched_off(modules, scheduler, ticks):  # noqa: F811
    flow, hift = modules
    scheduler.gather_window = 0.0  # STUDIO_FLOW_GATHER_MS=0
    streams = [make_stream(flow, hift, 25, seed, scheduled=True) for seed in (1, 2)]
    assert not _first_chunks_of(streams, [0.0, 0.6])
    assert ticks == [(1, 1), (1, 1)] and scheduler.gather_seconds == 0.0


def test_takes_started_together_get_the_gpu_turn_for_their_shared_first_tick(modules, scheduler, monkeypatch):  # noqa: F811
    """Two takes' first chunks 0.1 s apart share a tick; the LM, decoding only for them, waits during it."""
    flow, hift = modules
    monkeypatch.delenv(FILE_VARIABLE, raising=False)
    scheduler.gather_window = 2.0
    turn = flow_turn.share()
    waiter = TurnWaiter(turn.path)
    held = []
    launch = ChunkScheduler._launch
    monkeypatch.setattr(
        ChunkScheduler,
        "_launch",
        lambda self, jobs: held.append((len(jobs), waiter.until() > 0)) or launch(self, jobs),
    )
    try:
        for decoding, expected in ((2, True), (3, False)):  # with 3, a third take decodes too
            held.clear()
            turn.lm_requests = lambda n=decoding: n
            streams = [make_stream(flow, hift, 25, seed, scheduled=True) for seed in (1, 2)]
            assert not _first_chunks_of(streams, [0.0, 0.1])
            assert held == [(2, expected)]
    finally:
        turn.close()


def _counting_capture(captured: list[int]):
    """A capture that runs the function once and replays nothing, recording each capture's warm-up passes."""

    def capture(run, device, pool, context=None, warmup=1):
        captured.append(warmup)
        outputs = run()
        return type("Graph", (), {"replay": lambda self: None})(), outputs, pool

    return capture


def test_idle_it_captures_pending_graphs_unless_a_first_chunk_is_awaited(modules, scheduler):  # noqa: F811
    """A shape that ran eagerly is captured by the idle scheduler (not by the next take that meets it), but
    never while a started take waits for its first chunk: that chunk would wait behind the capture."""
    flow, hift = modules
    captured = []
    graphs = ShapeGraphs(
        "test", lambda inputs: (inputs[0] * 2,), eager_first=1, capture=_counting_capture(captured)
    )
    done = make_stream(flow, hift, 25, 1, scheduled=True)
    done.chunk(speech_tokens(40, 9)[: done.tokens_needed()])  # the scheduler's thread runs, then idles
    graphs(("a",), (1,), (torch.ones(2),))  # ran eagerly: pending
    waiting = make_stream(flow, hift, 25, 2, scheduled=True)  # started; its first chunk has not come
    time.sleep(4 * IDLE_CAPTURE_SECONDS)
    assert graphs.pending() == 1 and not captured
    waiting.close()  # the take ended: nothing is awaited any more
    deadline = time.monotonic() + 10
    while graphs.pending() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert graphs.pending() == 0 and captured == [0] and scheduler.idle_captures >= 1


def test_the_models_close_stops_the_flows_scheduler_which_then_captures_nothing(tiny_cosyvoice, modules):  # noqa: F811
    """A capture while idle still running when the interpreter exits aborts the process (a bench on a GPU
    ended in "terminate called without an active exception"): the model's close ends the thread first."""
    flow, hift = modules
    own = scheduler_for(flow)
    stream = make_stream(flow, hift, 25, 1, scheduled=True)
    stream.chunk(speech_tokens(40, 9)[: stream.tokens_needed()])
    assert own._thread.is_alive()
    close_scheduler(flow)
    assert not own._thread.is_alive()
    captured = []
    graphs = ShapeGraphs(
        "test", lambda inputs: (inputs[0] * 2,), eager_first=1, capture=_counting_capture(captured)
    )
    graphs(("a",), (1,), (torch.ones(2),))  # ran eagerly: pending, and no thread left to capture it
    time.sleep(4 * IDLE_CAPTURE_SECONDS)
    assert graphs.pending() == 1 and not captured
    model_flow = tiny_cosyvoice.model.flow
    model_scheduler = scheduler_for(model_flow)
    model_scheduler._start()
    tiny_cosyvoice.close()
    assert not model_scheduler._thread.is_alive() and model_scheduler._closed


def test_an_encoder_out_of_memory_begins_again_and_its_take_is_whole(modules, scheduler, monkeypatch):  # noqa: F811
    flow, hift = modules
    alone, _ = run_alone(flow, hift)
    prompt_tokens, n_tokens, seed = TAKES[0]
    stream = make_stream(flow, hift, prompt_tokens, seed, scheduled=True)
    real_begin_many = Token2WavStream.flow_begin_many
    refused = []

    def begin_many_out_of_memory_once(self, chunks):
        if not refused:
            refused.append(len(chunks))  # the GPU's allocator refusing a block, as a CUDA OOM does
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 546.00 MiB")
        return real_begin_many(chunks)

    monkeypatch.setattr(Token2WavStream, "flow_begin_many", begin_many_out_of_memory_once)
    tokens, parts = speech_tokens(n_tokens, seed), []
    for end, final in calls(stream, n_tokens):
        parts.append((stream.finish(tokens) if final else stream.chunk(tokens[:end]))[0])
    assert refused == [1]
    assert relative_error(torch.cat(parts, dim=1), alone[0]) < 1e-5
