"""Several CosyVoice3 takes' streamed flow calls run together (`mel_many`) against each take's own calls.

Each take in a batch must get what its own `DiTFlowStream.mel` gives (fp32, 1e-5) wherever it stands: a
first hop that computes its prompt chunks and caches them, a first hop from a warm prompt cache, later
hops, a call that reaches no new frame, a finalizing call; and its state must go on as if it had run
alone.
"""

from __future__ import annotations

import pytest
import torch

from studio.tts.cosyvoice3.flow_batch import mel_many
from studio.tts.cosyvoice3.flow_prompt_cache import DiTPromptCache
from studio.tts.cosyvoice3.flow_stream import DiTFlowStream
from tests.tts.cosyvoice3.test_cv3_flow_stream import small_flow, take_inputs, take_schedule

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def flow():
    return small_flow()


class Take:
    """A take driven twice: batched (`stream`) and alone (`alone`), on the same inputs and schedule."""

    def __init__(self, flow, prompt_tokens: int, tokens: int, seed: int, cache=None, alone_cache=None):
        self.inputs = take_inputs(prompt_tokens, tokens, seed)
        self.counts = take_schedule(prompt_tokens, tokens)
        self.stream = self._stream(flow, cache)
        self.alone = self._stream(flow, alone_cache)
        self.calls = 0

    def _stream(self, flow, cache) -> DiTFlowStream:
        inputs = self.inputs
        return DiTFlowStream(
            flow, inputs["prompt_token"], inputs["prompt_feat"], inputs["embedding"], prompt_cache=cache
        )

    def next_call(self, repeat: bool = False) -> tuple[torch.Tensor, bool]:
        """The take's next call on its schedule (the last finalizes); `repeat`: the previous count again."""
        index = self.calls - 1 if repeat else self.calls
        self.calls += 0 if repeat else 1
        return self.inputs["tokens"][:, : self.counts[index]], index == len(self.counts) - 1

    def advance_alone(self, calls: int) -> None:
        for _ in range(calls):
            tokens, finalize = self.next_call()
            self.stream.mel(tokens, finalize)
            self.alone.mel(tokens, finalize)


def assert_batch_matches_alone(takes: list[Take], calls: list[tuple[torch.Tensor, bool]]) -> None:
    batched = mel_many(
        [(take.stream, tokens, finalize) for take, (tokens, finalize) in zip(takes, calls, strict=True)]
    )
    for take, (tokens, finalize), mel in zip(takes, calls, batched, strict=True):
        expected = take.alone.mel(tokens, finalize)
        assert mel.dtype == torch.float32 and mel.shape == expected.shape
        if mel.numel():
            assert (mel - expected).abs().max().item() <= TOLERANCE
        assert take.stream.state_bytes == take.alone.state_bytes
        if not finalize:
            assert take.stream._state.kept == take.alone._state.kept


def test_takes_at_different_points_equal_their_own_calls(flow):
    cache, alone_cache = DiTPromptCache(2**40), DiTPromptCache(2**40)
    warm_voice = Take(flow, 60, 200, seed=20, cache=cache, alone_cache=alone_cache)
    warm_voice.advance_alone(1)  # both caches now hold this voice
    cold_first = Take(flow, 57, 200, seed=21, cache=cache, alone_cache=alone_cache)
    warm_first = Take(flow, 60, 200, seed=20, cache=cache, alone_cache=alone_cache)
    uncached_first = Take(flow, 9, 200, seed=22)
    later = Take(flow, 31, 330, seed=23)
    later.advance_alone(2)
    finishing = Take(flow, 12, 60, seed=24)
    finishing.advance_alone(len(finishing.counts) - 1)
    takes = [cold_first, warm_first, uncached_first, later, finishing, warm_voice]
    assert_batch_matches_alone(takes, [take.next_call() for take in takes])
    assert finishing.stream.state_bytes == 0  # finalized
    assert cold_first.stream.computed_frames == cold_first.alone.computed_frames
    assert warm_first.stream.computed_frames < cold_first.stream.computed_frames
    # the next round: each where its schedule goes, one repeating its call (no new frame)
    takes = [cold_first, warm_first, uncached_first, later]
    calls = [take.next_call() for take in takes[:3]] + [later.next_call(repeat=True)]
    assert_batch_matches_alone(takes, calls)
    # and on to each take's end, batched at every call
    while any(take.calls < len(take.counts) for take in takes):
        takes = [take for take in takes if take.calls < len(take.counts)]
        assert_batch_matches_alone(takes, [take.next_call() for take in takes])


def test_takes_of_one_voice_in_one_batch_compute_its_prompt_chunks_once(flow):
    cache = DiTPromptCache(2**40)
    takes = [Take(flow, 60, 120, seed=26, cache=cache) for _ in range(3)]
    assert_batch_matches_alone(takes, [take.next_call() for take in takes])
    assert cache.stats()["misses"] == 1 and cache.stats()["hits"] == 2
    computed = [take.stream.computed_frames for take in takes]
    assert computed == [takes[0].alone.computed_frames] + [takes[0].alone.computed_frames - 100] * 2
    while any(take.calls < len(take.counts) for take in takes):
        assert_batch_matches_alone(takes, [take.next_call() for take in takes])


def test_a_batch_of_one_equals_the_stream_alone(flow):
    take = Take(flow, 30, 120, seed=25)
    while take.calls < len(take.counts):
        assert_batch_matches_alone([take], [take.next_call()])


def test_takes_batch_at_a_wider_dit(flow):
    """More heads and width than the small flow: two first hops and a later one."""
    wide = small_flow({"dim": 256, "depth": 3, "heads": 8, "dim_head": 32, "ff_mult": 2}, 128, seed=3)
    takes = [Take(wide, prompt, 150, seed) for prompt, seed in ((40, 30), (5, 31), (26, 32))]
    takes[2].advance_alone(1)
    assert_batch_matches_alone(takes, [take.next_call() for take in takes])


def test_bad_batches_are_refused_before_any_call_runs(flow):
    first, second = Take(flow, 10, 60, seed=40), Take(flow, 10, 60, seed=41)
    tokens, finalize = first.next_call()
    with pytest.raises(ValueError, match="a stream appears twice"):
        mel_many([(first.stream, tokens, finalize), (first.stream, tokens, finalize)])
    inputs = first.inputs
    other_steps = DiTFlowStream(flow, inputs["prompt_token"], inputs["prompt_feat"], inputs["embedding"], 4)
    with pytest.raises(ValueError, match="one Euler schedule together; got 10 and 4 steps"):
        mel_many([(first.stream, tokens, finalize), (other_steps, tokens, finalize)])
    other_flow = DiTFlowStream(
        small_flow(), inputs["prompt_token"], inputs["prompt_feat"], inputs["embedding"]
    )
    with pytest.raises(ValueError, match="of different flows"):
        mel_many([(first.stream, tokens, finalize), (other_flow, tokens, finalize)])
    with pytest.raises(ValueError, match="at least 3 tokens"):
        mel_many([(first.stream, tokens, finalize), (second.stream, tokens[:, :2], False)])
    assert first.stream.computed_frames == 0 and second.stream.computed_frames == 0
    assert mel_many([]) == []
    assert_batch_matches_alone([first, second], [(tokens, finalize), second.next_call()])
