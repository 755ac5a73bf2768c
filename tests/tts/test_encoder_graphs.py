"""CUDA-graph replay of the batched flow encoder, and the graph cache policy behind it (`ShapeGraphs`).

Graphs need CUDA; here a stand-in capture re-runs the function into the captured outputs, which is what a
replay does, so what is tested is ours: the padding a graphed batch runs at (rows and width bucketed) keeps
every valid frame, and the cache captures what recurs, keeps a bounded number, drops graphs of old weights
and falls back to eager calls when a capture fails. benchmarks/probes/encoder_graphs_check.py checks real replays
against eager calls on a GPU.
"""

from __future__ import annotations

import pytest
import torch

from studio.tts.device.cuda_graphs import OOM_RETRY_AFTER, ShapeGraphs, capture_one_pending
from studio.tts.flow.streaming import batched_encode
from studio.tts.flow.streaming.batched_encode import Prefix, attach_encoder_graphs, encode_prefixes
from tests.tts.test_batched_encode import TOLERANCE, alone
from tests.tts.test_incremental_flow import modules, relative_error, speech_tokens  # noqa: F401


class Replay:
    """Stands in for a captured CUDA graph: `replay` runs the function again into the captured outputs."""

    def __init__(self, run, outputs):
        self.run, self.outputs = run, outputs
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1
        for kept, new in zip(self.outputs, self.run(), strict=True):
            kept.copy_(new)


def replaying_capture(run, device, pool, context=None, warmup=1):
    outputs = run()
    return Replay(run, outputs), outputs, pool


def untouched_capture(written):
    """`replaying_capture` that, like a real capture (it records kernels, runs none), leaves what the run
    writes as it was: `written()` gives those tensors (a solver's arena). Captures come without a warm-up
    pass (`EAGER_FIRST`), which would write into the arena between its copy-in and the replay."""

    def capture(run, device, pool, context=None, warmup=1):
        assert warmup == 0
        saved = [tensor.clone() for tensor in written()]
        made = replaying_capture(run, device, pool)
        for tensor, before in zip(written(), saved, strict=True):
            tensor.copy_(before)
        return made

    return capture


@pytest.fixture
def graphed(modules):  # noqa: F811
    flow, _ = modules
    attach_encoder_graphs(flow, capture=replaying_capture)
    yield flow
    attach_encoder_graphs(flow, enabled=False)


@torch.inference_mode()
def test_graphed_batches_pad_rows_and_width_and_keep_every_frame(graphed):
    flow = graphed
    prefixes = [
        Prefix(speech_tokens(31, seed=1), 28),
        Prefix(speech_tokens(56, seed=3), 53),
        Prefix(speech_tokens(5, seed=4), 2),
    ]
    starts = [0, 25, 0]
    rows, width = batched_encode._padded(3, 56, True)
    assert (rows, width) == (4, 64)  # a fourth row (the first repeated) and eight padded tokens
    for call in range(3):  # eager at the padded shape, captured, replayed
        got = encode_prefixes(flow, prefixes, starts)
        for prefix, start, mu in zip(prefixes, starts, got, strict=True):
            expected = alone(flow, prefix, start)
            assert mu.shape == expected.shape
            assert relative_error(mu, expected) <= TOLERANCE, call
    assert flow.encoder_graphs.captures == 1
    # other prefixes of the same bucket replay the same graph
    others = [Prefix(speech_tokens(40, seed=5), 37), Prefix(speech_tokens(60, seed=6), 60)]
    for prefix, mu in zip(others, encode_prefixes(flow, others, [0, 0]), strict=True):
        assert relative_error(mu, alone(flow, prefix, 0)) <= TOLERANCE
    assert flow.encoder_graphs.captures == 1


def doubled(inputs):
    (x,) = inputs
    return (x * 2,)


def test_shapes_seen_once_run_eagerly_and_recurring_ones_are_captured_then_replayed():
    captured = []

    warmups = []

    def capture(run, device, pool, context=None, warmup=1):
        graph, outputs, pool = replaying_capture(run, device, pool)
        captured.append(graph)
        warmups.append(warmup)
        return graph, outputs, pool

    graphs = ShapeGraphs("test", doubled, max_graphs=4, eager_first=1, capture=capture)
    x = torch.arange(3.0)
    assert torch.equal(graphs(("a",), (1,), (x,))[0], x * 2)
    assert not captured  # first sight: eager
    assert torch.equal(graphs(("a",), (1,), (x + 1,))[0], (x + 1) * 2)
    assert len(captured) == 1 and graphs.captures == 1
    assert warmups == [0]  # the eager call made the shape's lazy state: no warm-up pass before capturing
    out = graphs(("a",), (1,), (x + 5,))[0]
    assert torch.equal(out, (x + 5) * 2) and captured[0].replays == 2
    out.zero_()  # a caller's result is its own: the next replay's output is not it
    assert torch.equal(graphs(("a",), (1,), (x,))[0], x * 2)


def test_a_shape_that_ran_eagerly_is_captured_while_idle_and_its_next_call_replays():
    """`capture_one_pending` (the flow scheduler's idle work) captures from a copy of the eager call's inputs,
    without a warm-up pass; the shape's next call replays, and new weights forget what was pending."""
    warmups: list[int] = []

    def capture(run, device, pool, context=None, warmup=1):
        warmups.append(warmup)
        return replaying_capture(run, device, pool)

    graphs = ShapeGraphs("test", doubled, max_graphs=4, eager_first=1, capture=capture)
    x = torch.arange(3.0)
    graphs(("a",), (1,), (x,))
    x += 100  # the caller's tensor changes after the call: the capture must not read it
    assert graphs.pending() == 1 and not warmups
    while capture_one_pending():  # every ShapeGraphs of the process (this one among them)
        pass
    assert graphs.pending() == 0 and graphs.captures == 1 and warmups == [0]
    graph = graphs._graphs[("a",)]
    assert torch.equal(graphs(("a",), (1,), (x,))[0], x * 2) and graph.graph.replays == 1
    assert graphs.captures == 1 and not graphs.capture_pending()
    graphs(("b",), (1,), (x,))
    assert graphs.pending() == 1
    graphs(("a",), (2,), (x,))  # moved or cast weights: nothing captured or pending survives ("b" is gone)
    assert list(graphs._pending) == [("a",)] and len(graphs) == 0


def test_at_most_max_graphs_are_kept_and_new_weights_drop_them_all():
    graphs = ShapeGraphs("test", doubled, max_graphs=2, capture=replaying_capture)
    x = torch.ones(2)
    for key in ("a", "b", "c"):
        graphs((key,), (1,), (x,))
    assert list(graphs._graphs) == [("b",), ("c",)]  # the least recently used went
    graphs(("b",), (1,), (x,))
    graphs(("d",), (1,), (x,))
    assert list(graphs._graphs) == [("b",), ("d",)]
    graphs(("b",), (2,), (x,))  # moved or cast weights
    assert list(graphs._graphs) == [("b",)] and graphs.captures == 5


def test_a_steady_shape_outlives_one_off_shapes_and_a_shape_no_longer_called_goes_in_time():
    """The graph replayed least lately goes, not the least recently used: a shape replayed often stays while
    shapes seen once (a take's last chunk) come and go; counts halve at each eviction, so it goes once unused."""
    graphs = ShapeGraphs("test", doubled, max_graphs=2, capture=replaying_capture)
    x = torch.ones(2)
    for _ in range(4):  # captured, then replayed three times
        graphs(("steady",), (1,), (x,))
    graphs(("last chunk 1",), (1,), (x,))  # the steady shape is now the least recently used
    graphs(("last chunk 2",), (1,), (x,))
    assert list(graphs._graphs) == [("steady",), ("last chunk 2",)]
    graphs(("last chunk 3",), (1,), (x,))
    assert list(graphs._graphs) == [("steady",), ("last chunk 3",)]  # its 3 replays halved to 1: still kept
    graphs(("new steady",), (1,), (x,))  # the old steady shape, not called since, has its count halved to 0
    assert list(graphs._graphs) == [("last chunk 3",), ("new steady",)]
    graphs(("new steady",), (1,), (x,))
    graphs(("another",), (1,), (x,))
    assert list(graphs._graphs) == [("new steady",), ("another",)]
    assert torch.equal(graphs(("new steady",), (1,), (x + 1,))[0], (x + 1) * 2)


def test_a_failed_capture_switches_graphs_off_and_calls_still_get_their_result():
    def failing(run, device, pool, context=None, warmup=1):
        raise RuntimeError("operation not permitted when stream is capturing")

    graphs = ShapeGraphs("test", doubled, capture=failing)
    x = torch.arange(4.0)
    assert torch.equal(graphs(("a",), (1,), (x,))[0], x * 2)
    assert not graphs.enabled
    assert torch.equal(graphs(("b",), (1,), (x,))[0], x * 2)


def test_a_capture_that_runs_out_of_memory_leaves_graphs_on_and_is_tried_again_later():
    """A full budget (every byte held by takes) makes a capture fail for memory: that call runs eagerly and the
    key is captured once OOM_RETRY_AFTER more eager calls have run; graphs stay on for every other key."""
    attempts: list[tuple] = []
    full = [True]

    def capture(run, device, pool, context=None, warmup=1):
        attempts.append(warmup)
        if full[0]:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 314.00 MiB.")
        return replaying_capture(run, device, pool)

    graphs = ShapeGraphs("test", doubled, eager_first=1, capture=capture)
    x = torch.arange(4.0)
    graphs(("a",), (1,), (x,))  # first sight: eager
    assert torch.equal(graphs(("a",), (1,), (x + 1,))[0], (x + 1) * 2)  # its capture fails: eager
    assert graphs.enabled and graphs.out_of_memory == 1 and len(attempts) == 1
    full[0] = False
    for step in range(OOM_RETRY_AFTER):
        assert torch.equal(graphs(("a",), (1,), (x + step,))[0], (x + step) * 2)
    assert len(attempts) == 1 and graphs.captures == 0  # not tried again yet
    assert torch.equal(graphs(("a",), (1,), (x,))[0], x * 2)
    assert len(attempts) == 2 and graphs.captures == 1 and len(graphs) == 1
    graphs(("b",), (1,), (x,))
    graphs(("b",), (1,), (x,))
    assert graphs.captures == 2  # other keys were never held back


def test_a_bug_in_the_function_is_raised_not_hidden():
    def broken(inputs):
        raise ValueError("shapes do not match")

    graphs = ShapeGraphs("test", broken, capture=replaying_capture)
    with pytest.raises(ValueError, match="shapes do not match"):
        graphs(("a",), (1,), (torch.ones(1),))


def test_a_solve_replays_a_captured_larger_context_rather_than_make_a_new_shape():
    """(rows, frames, context, dtype, steps, precision) keys: a batch needing 512 frames of context runs at
    768 when a graph of its shape at 768 is captured (not at 1536: more than twice), unless that view does
    not fit; a key differing anywhere else does not count."""
    from studio.tts.device.cuda_graphs import replayable_context

    graphs = ShapeGraphs("solve", doubled, capture=replaying_capture)
    x = torch.ones(2)
    for key in [(2, 64, 768, torch.float16, 10, None), (2, 64, 1536, torch.float16, 10, None),
                (2, 64, 640, torch.float16, 1, None), (4, 64, 600, torch.float16, 10, None)]:  # fmt: skip
        graphs(key, ("w",), (x,))
    key = (2, 64, 512, torch.float16, 10, None)
    assert replayable_context(graphs, key, lambda context: True) == 768
    assert replayable_context(graphs, key, lambda context: context < 768) == 512
    assert replayable_context(graphs, (2, 64, 1024, torch.float16, 10, None), lambda c: True) == 1536
    assert replayable_context(graphs, (2, 64, 512, torch.float32, 10, None), lambda c: True) == 512


def test_with_capture_when_paid_a_shape_is_captured_once_its_eager_calls_cost_a_capture():
    """`capture_when_paid` (HiFT's and the encoder's graphs): after a first capture measures what one costs, a
    new shape runs eagerly until its eager calls have cost that much host time, then is captured; its result
    is the function's throughout. A shape that stops recurring before (a take's last chunk) is never captured."""
    now = [0.0]

    def costly(inputs):  # an eager call: 10 ms of host time on the test's clock
        now[0] += 0.010
        return (inputs[0] * 2,)

    def capture(run, device, pool, context=None, warmup=1):
        now[0] += 0.035  # recording and instantiating, beside the run replaying_capture makes
        return replaying_capture(run, device, pool)

    graphs = ShapeGraphs(
        "test", costly, eager_first=1, capture=capture, capture_when_paid=True, clock=lambda: now[0]
    )
    x = torch.arange(3.0)
    graphs(("a",), (1,), (x,))
    graphs(("a",), (1,), (x,))  # no capture measured yet: a recurring shape is captured at once
    assert graphs.captures == 1
    for call in range(5):  # 45 ms a capture: 5 eager calls of 10 ms pay it
        assert torch.equal(graphs(("b",), (1,), (x + call,))[0], (x + call) * 2)
        if call < 2:  # recurs twice more, then stops: never paid
            graphs(("c",), (1,), (x,))
    assert graphs.captures == 1 and graphs.pending() == 2
    assert torch.equal(graphs(("b",), (1,), (x + 9,))[0], (x + 9) * 2)
    assert graphs.captures == 2 and graphs.keys() == [("a",), ("b",)]
