"""A take admitted lean keeps no flow state (issue 34: "recompute a long prefix instead of keeping it where
memory is short"): every chunk solves the take's frames again from its prompt's cached state, upstream's way.
Its audio equals a kept take's (the flow is chunk-causal, so what a chunk computes never changes), it holds
nothing between chunks, and with a prompt cache it starts each chunk from the prompt's rows, not frame 0."""

from __future__ import annotations

import pytest
import torch

from studio.tts.flow.streaming.incremental import IncrementalFlow
from studio.tts.flow.streaming.prompt_cache import PromptFlowCache
from tests.tts.test_incremental_flow import (
    TOLERANCE,
    modules,
    prompt,
    relative_error,
    speech_tokens,
    stream_all,
)

__all__ = ["modules"]  # the module-scoped fixture, shared


@pytest.mark.parametrize(("prompt_tokens", "n_tokens", "hop"), [(25, 130, 25), (7, 71, 10), (0, 45, 25)])
def test_a_lean_take_streams_the_same_audio_as_a_kept_one(modules, prompt_tokens, n_tokens, hop):
    flow, hift = modules
    inputs, tokens = prompt(prompt_tokens), speech_tokens(n_tokens)
    kept_mels, kept = stream_all(flow, hift, inputs, tokens, incremental=True, token_hop_len=hop)
    lean_mels, lean = stream_all(
        flow, hift, inputs, tokens, incremental=True, token_hop_len=hop, keep_flow_state=False
    )
    assert len(lean_mels) == len(kept_mels) >= 2
    for ours, theirs in zip(lean_mels, kept_mels, strict=True):
        assert relative_error(ours, theirs) <= TOLERANCE
    assert relative_error(torch.cat(lean, dim=1), torch.cat(kept, dim=1)) <= TOLERANCE


def test_a_lean_take_holds_nothing_between_chunks_and_recomputes_from_the_prompt(modules):
    flow, _ = modules
    inputs, tokens = prompt(53), speech_tokens(103)
    cache = PromptFlowCache(2**30)
    first_take = IncrementalFlow(
        flow, **inputs, cache=cache, recompute_encoder=True
    )  # as the GPU's scheduler
    first_take.mel(tokens[:28], finalize=False)
    lean = IncrementalFlow(flow, **inputs, cache=cache, keep_estimator=False)
    assert lean.recompute_encoder  # its encoder output is needed from the prompt's boundary each call
    boundary_frames = 2 * lean.prompt_boundary()
    kept = IncrementalFlow(flow, **inputs, cache=cache, recompute_encoder=True)
    for end in (28, 53, 78, 103):
        mel, first = lean.mel(tokens[:end], finalize=False)
        want, want_first = kept.mel(tokens[:end], finalize=False)
        state = lean.estimator_state
        assert first == boundary_frames > 0  # solved from the prompt's cached rows, never from frame 0
        assert state.pages == [] and state.base_length == boundary_frames  # nothing of its own kept
        assert relative_error(mel[:, :, want_first - first :], want) <= TOLERANCE
    assert kept.estimator_state.pages  # the kept take holds its frames
    assert cache.hits == 2 and cache.misses == 1


def test_a_lean_take_that_missed_the_prompt_cache_starts_later_chunks_from_what_it_stored(modules):
    flow, _ = modules
    inputs, tokens = prompt(53), speech_tokens(78)
    cache = PromptFlowCache(2**30)
    lean = IncrementalFlow(flow, **inputs, cache=cache, keep_estimator=False)
    firsts = [lean.mel(tokens[:end], finalize=False)[1] for end in (28, 53, 78)]
    assert firsts == [0, 100, 100] and len(cache) == 1


def test_a_take_keeping_its_state_in_float8_streams_close_to_the_exact_one(modules, monkeypatch):
    """STUDIO_FLOW_STATE_FP8: each chunk's mel within a few percent of the fp32-state take's (random weights)."""
    flow, hift = modules
    inputs, tokens = prompt(25), speech_tokens(130)
    exact, _ = stream_all(flow, hift, inputs, tokens, incremental=True)
    monkeypatch.setenv("STUDIO_FLOW_STATE_FP8", "1")
    quantized, _ = stream_all(flow, hift, inputs, tokens, incremental=True)
    errors = [relative_error(ours, theirs) for ours, theirs in zip(quantized, exact, strict=True)]
    assert max(errors) < 0.05 and max(errors[1:]) > 0  # the kept rows are read back rounded, not exactly
