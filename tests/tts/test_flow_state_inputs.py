"""Takes whose flow state keeps each attention block's input (`STUDIO_FLOW_STATE_INPUTS`, issue 34's "lean per-take
state"): a quarter of the bytes of keys/values, and the solve projects the context's keys/values from them again
for every chunk. Their mel equals that of takes keeping keys/values (the projection is the same GEMM's arithmetic),
alone, batched, replayed through graphs, a step at a time, from a cached prompt and in float8."""

from __future__ import annotations

import math

import pytest
import torch

from studio.tts.flow.streaming.batched_solve import PAGE_FRAMES, EstimatorState, stored_bytes_per_frame
from studio.tts.flow.streaming.incremental import IncrementalFlow
from studio.tts.flow.streaming.prompt_cache import PromptFlowCache
from studio.tts.flow.streaming.solver import EstimatorSolver, SolveRequest
from tests.tts.test_flow_solver import drive_batched, drive_solo, installed
from tests.tts.test_incremental_flow import modules, prompt, relative_error, small_flow, speech_tokens

__all__ = ["modules"]  # the module-scoped fixture, shared


def inputs_solver(flow, **options) -> EstimatorSolver:
    return EstimatorSolver(flow.decoder, keeps_inputs=True, **{"graphs": False, **options})


def assert_equal_takes(ours: list[list[torch.Tensor]], theirs: list[list[torch.Tensor]]) -> None:
    for take_ours, take_theirs in zip(ours, theirs, strict=True):
        assert len(take_ours) == len(take_theirs) >= 2
        for mel, want in zip(take_ours, take_theirs, strict=True):
            assert relative_error(mel, want) < 1e-5


@pytest.mark.parametrize("mode", ["batched", "buckets", "graphs", "stepwise"])
def test_takes_keeping_attention_inputs_stream_the_mel_of_takes_keeping_keys_and_values(
    modules, mode, monkeypatch
):
    from studio.tts.flow.streaming import incremental
    from tests.tts.test_encoder_graphs import replaying_capture, untouched_capture

    flow, _ = modules
    expected = drive_solo(flow)  # keys/values kept, each take alone
    solver = inputs_solver(flow, graphs=mode == "graphs", capture=replaying_capture)
    solver._graphs._capture = untouched_capture(lambda: (solver._arena.kv, solver._arena.tails))
    solver.buckets = mode != "batched"
    if mode == "stepwise":  # one Euler step of three takes' inputs fits, every step of one take's does not
        solver.budget_bytes = 512 * solver.layout.bytes_per_frame(1, 8, torch.float32, inputs=True)
        assert 512 * solver.layout.bytes_per_frame(10, 2, torch.float32, inputs=True) > solver.budget_bytes
    monkeypatch.setattr(incremental, "solver_for", lambda _cfm: solver)
    with installed(flow, solver), torch.inference_mode():
        batched = drive_batched(flow, solver)
    assert solver.batches < solver.requests == sum(len(m) for m in expected)
    if mode == "graphs":
        assert solver.captures >= 1 and solver._graphs.enabled
    assert solver.stepwise_batches == (solver.batches if mode == "stepwise" else 0)
    assert_equal_takes(batched, expected)


def test_half_weights_keeping_inputs_batch_as_takes_keeping_keys_and_values():
    """The fp16 flow (the GPU's): inputs kept in float16 and their keys/values projected in float16 give the mel
    that keys/values kept in float16 give, batched and padded alike (bit-equal on this CPU)."""
    flow = small_flow().half()
    mels = {}
    with torch.inference_mode():
        for keeps_inputs in (False, True):
            solver = EstimatorSolver(flow.decoder, graphs=False, keeps_inputs=keeps_inputs)
            solver.buckets = True
            with installed(flow, solver):
                mels[keeps_inputs] = drive_batched(flow, solver)
            assert solver._arena.kv.dtype == torch.float16 and solver.batches < solver.requests
    for take_ours, take_theirs in zip(mels[True], mels[False], strict=True):
        assert len(take_ours) == len(take_theirs) >= 2
        for mel, want in zip(take_ours, take_theirs, strict=True):
            assert mel.dtype == torch.float16 and relative_error(mel.float(), want.float()) < 1e-3


def test_a_take_keeping_inputs_holds_a_quarter_of_the_bytes_of_one_keeping_keys_and_values(modules):
    flow, _ = modules
    inputs, tokens = prompt(25), speech_tokens(130)
    held = {}
    for keeps_inputs in (False, True):
        with installed(flow, EstimatorSolver(flow.decoder, graphs=False, keeps_inputs=keeps_inputs)):
            take = IncrementalFlow(flow, **inputs)
            take.mel(tokens[:103], finalize=False)
        state = take.estimator_state
        assert state.inputs is keeps_inputs and state.length == 2 * (25 + 100)
        held[keeps_inputs] = sum(page.nbytes for page in state.pages)
    layout = EstimatorSolver(flow.decoder, graphs=False).layout
    per_frame = [
        stored_bytes_per_frame(layout, 10, 2, torch.float32, False, inputs) for inputs in (False, True)
    ]
    assert (
        per_frame[0]
        == 4 * per_frame[1]
        == 2 * layout.heads * layout.head_dim * 10 * 2 * 4 * len(layout.attention)
    )
    assert held[False] == 4 * held[True] > 0


def test_admission_counts_a_take_keeping_inputs_at_a_quarter(tiny_cosyvoice):
    """What the take gate reserves (`take_state_bytes`) follows the flow's solver: its pages shrink by the
    ratio of a block's keys/values to its input (4 in CosyVoice2's estimator), its conv tails do not."""
    from studio.tts.memory import take_state_bytes

    parts = tiny_cosyvoice.model
    cfm = parts.flow.decoder
    held = {}
    for keeps_inputs in (False, True):
        with installed(parts.flow, EstimatorSolver(cfm, graphs=False, keeps_inputs=keeps_inputs)) as solver:
            held[keeps_inputs] = take_state_bytes(parts, 100, 500)
    # the prompt's and 500 tokens' frames, paged
    frames = PAGE_FRAMES * math.ceil((100 + 2 * 500) / PAGE_FRAMES)
    dtype = torch.float16 if parts.fp16 else torch.float32
    per_frame = [
        stored_bytes_per_frame(solver.layout, 10, 2, dtype, False, inputs) for inputs in (False, True)
    ]
    assert per_frame[0] > per_frame[1] and held[False] - held[True] == frames * (per_frame[0] - per_frame[1])


@pytest.mark.parametrize("fp8", [False, True])
def test_cached_prompt_takes_keeping_inputs_equal_uncached_ones(modules, monkeypatch, fp8):
    """The prompt cache keeps a voice's inputs (its snapshot a quarter of the bytes too); takes started from it
    equal takes that computed their prompt themselves, a step at a time as well; in float8 they stay close."""
    if fp8:
        monkeypatch.setenv("STUDIO_FLOW_STATE_FP8", "1")
    flow, _ = modules
    inputs, tokens = prompt(53), speech_tokens(70, seed=6)
    ends = (28, 53, 70)

    def take(cache) -> torch.Tensor:
        """The take's mel from the first frame it computed to its end (a cache hit starts past the prompt)."""
        incremental = IncrementalFlow(flow, **inputs, cache=cache)
        chunks = [incremental.mel(tokens[:end], finalize=end == ends[-1]) for end in ends]
        return torch.cat([mel for mel, _ in chunks], dim=2), chunks[0][1]

    with installed(flow, EstimatorSolver(flow.decoder, graphs=False, keeps_inputs=False)):
        exact = take(None)
    solver = inputs_solver(flow)
    with installed(flow, solver):
        cache = PromptFlowCache(2**30)
        takes = [take(cache), take(cache), take(None)]
    (snapshot,) = cache._entries.values()
    assert cache.stats()["hits"] == 1
    assert snapshot.estimator.inputs and snapshot.estimator.base.shape[2] == 1  # [steps, blocks, 1, ...]
    (whole, start), hit = exact, takes[1][1]
    # the hit computed none of the prompt's cached frames
    assert start == takes[0][1] == takes[2][1] == 0 < hit
    for mel, first in takes:
        assert relative_error(mel, whole[:, :, first:]) < (0.05 if fp8 else 1e-5)


def test_a_state_of_the_other_kind_is_refused_with_a_clear_error(modules):
    flow, _ = modules
    solver = inputs_solver(flow)
    request = SolveRequest(
        EstimatorState(),  # keeps keys/values
        torch.zeros(1, 80, 4),
        torch.zeros(1, 80),
        torch.zeros(1, 80, 4),
        0,
        0,
        None,
        2,
    )
    with pytest.raises(RuntimeError, match="keeps keys/values"):
        solver.solve(request)


def test_a_take_through_the_scheduler_keeping_inputs_sounds_as_one_keeping_keys_and_values(
    tiny_cosyvoice, prompt_wav16k, monkeypatch
):
    """The whole streamed take (frontend, LM, the chunk scheduler's batched encoder, solve and HiFT) on the tiny
    model folder: its audio with the states kept as inputs equals its audio with keys/values kept."""
    from tests.tts.test_scheduler import _take

    monkeypatch.setenv("STUDIO_FLOW_SCHEDULER", "1")
    flow = tiny_cosyvoice.model.flow
    with installed(flow, EstimatorSolver(flow.decoder, graphs=False, keeps_inputs=False)):
        kept = _take(tiny_cosyvoice, prompt_wav16k)
    with installed(flow, inputs_solver(flow)) as solver:
        lean = _take(tiny_cosyvoice, prompt_wav16k)
    assert solver.requests >= len(lean) - 1 >= 2  # every chunk but a last one without new frames was solved
    assert [c["tts_speech"].shape for c in lean] == [c["tts_speech"].shape for c in kept]
    joined = torch.cat([c["tts_speech"] for c in lean], dim=1)
    assert relative_error(joined, torch.cat([c["tts_speech"] for c in kept], dim=1)) < 1e-5
