"""The batched, recomputing flow encoder: one batch of many takes' prefixes = each take's encoder alone.

Real (small) flow modules. The reference for one take is upstream's full-prefix encoder call
(`UpsampleConformerEncoder.forward` with the lookahead tokens as context); the streamed reference is
the incremental encoder (itself proven equal to the full-prefix re-run in test_incremental_flow.py).
"""

from __future__ import annotations

import pytest
import torch

from studio.tts.flow.streaming import batched_encode
from studio.tts.flow.streaming.batched_encode import Prefix, encode_prefixes
from studio.tts.flow.streaming.incremental import IncrementalFlow, begin_many
from studio.tts.flow.streaming.prompt_cache import PromptFlowCache
from studio.tts.flow.streaming.solver import solver_for
from tests.tts.test_incremental_flow import modules, prompt, relative_error, speech_tokens  # noqa: F401

TOLERANCE = 1e-5


def alone(flow, prefix: Prefix, start: int) -> torch.Tensor:
    """One take's frames from token `start`, by the full-prefix encoder call (upstream's semantics)."""
    ids = torch.tensor([prefix.ids], dtype=torch.long)
    emb = flow.input_embedding(ids[:, : prefix.end])
    context = flow.input_embedding(ids[:, prefix.end :])
    h, _ = flow.encoder(emb, torch.tensor([prefix.end]), context=context, streaming=True)
    return flow.encoder_proj(h).transpose(1, 2)[:, :, 2 * start :]


@torch.inference_mode()
def test_a_batch_of_prefixes_equals_each_prefix_encoded_alone(modules):  # noqa: F811
    flow, _ = modules
    prefixes = [
        Prefix(speech_tokens(31, seed=1), 28),  # three lookahead tokens
        Prefix(speech_tokens(90, seed=2), 90),  # final: no lookahead
        Prefix(speech_tokens(56, seed=3), 53),
        Prefix(speech_tokens(5, seed=4), 2),  # shorter than a chunk
    ]
    starts = [0, 50, 25, 0]
    got = encode_prefixes(flow, prefixes, starts)
    for prefix, start, mu in zip(prefixes, starts, got, strict=True):
        expected = alone(flow, prefix, start)
        assert mu.shape == expected.shape == (1, 80, 2 * (prefix.end - start))
        assert relative_error(mu, expected) <= TOLERANCE


@torch.inference_mode()
def test_long_prefixes_are_split_into_smaller_batches_with_the_same_result(modules, monkeypatch):  # noqa: F811
    flow, _ = modules
    prefixes = [Prefix(speech_tokens(n + 3, seed=n), n) for n in (40, 120, 60, 100)]
    starts = [0] * len(prefixes)
    whole = encode_prefixes(flow, prefixes, starts)
    assert len(batched_encode._groups(flow, prefixes)) == 1
    heads = flow.encoder.up_encoders[0].self_attn.h
    monkeypatch.setattr(batched_encode, "SCORE_BUDGET", 2 * heads * 240 * 480)  # two prefixes of 120 tokens
    groups = batched_encode._groups(flow, prefixes)
    assert groups == [[0, 2], [3, 1]]  # shortest first, each group within the budget
    for split, one in zip(encode_prefixes(flow, prefixes, starts), whole, strict=True):
        assert relative_error(split, one) <= TOLERANCE


def stream_together(flow, requests, tokens, hop: int = 25):
    """Step several requests chunk by chunk, their `begin`s batched; mel per chunk per request."""
    solver = solver_for(flow.decoder)
    mels = [[] for _ in requests]
    ends = [0] * len(requests)
    while any(end < len(t) for end, t in zip(ends, tokens, strict=True)):
        chunks, owners = [], []
        for i, (request, t) in enumerate(zip(requests, tokens, strict=True)):
            if ends[i] >= len(t):
                continue
            ends[i] = min(len(t), ends[i] + hop)
            final = ends[i] >= len(t) - request.flow.pre_lookahead_len
            if final:
                ends[i] = len(t)
            chunks.append((request, t[: ends[i]], final))
            owners.append(i)
        for i, (request, _, _), step in zip(owners, chunks, begin_many(chunks), strict=True):
            if step.request is not None:
                step.request.result = solver.solve(step.request)
            mels[i].append(request.complete(step)[0])
    return mels


def test_recomputing_requests_stream_the_mel_of_incremental_ones(modules):  # noqa: F811
    """Three takes of different voices and lengths, their encoders batched, chunk by chunk."""
    flow, _ = modules
    voices = [prompt(7, seed=1), prompt(25, seed=2), prompt(13, seed=3)]
    tokens = [speech_tokens(n, seed=n) for n in (80, 62, 45)]
    batched = [IncrementalFlow(flow, **v, recompute_encoder=True) for v in voices]
    own = [IncrementalFlow(flow, **v) for v in voices]
    ours = stream_together(flow, batched, tokens)
    theirs = [stream_together(flow, [request], [t])[0] for request, t in zip(own, tokens, strict=True)]
    for mine, reference in zip(ours, theirs, strict=True):
        assert len(mine) == len(reference) >= 2
        for a, b in zip(mine, reference, strict=True):
            assert relative_error(a, b) <= 1e-4
    assert all(not r.token_store and not r.encoder_store for r in batched)  # no encoder state kept


def test_a_recomputing_request_reuses_the_prompt_cache_of_its_own_kind(modules):  # noqa: F811
    flow, _ = modules
    voice, tokens = prompt(60, seed=8), speech_tokens(70, seed=9)
    cache = PromptFlowCache(max_bytes=1 << 30)
    first = stream_together(
        flow, [IncrementalFlow(flow, **voice, cache=cache, recompute_encoder=True)], [tokens]
    )
    assert cache.stats()["entries"] == 1 and cache.stats()["misses"] == 1
    again = IncrementalFlow(flow, **voice, cache=cache, recompute_encoder=True)
    second = stream_together(flow, [again], [tokens])
    assert cache.stats()["hits"] == 1
    assert again.estimator_state.length > 0 and not again.encoder_store
    restored, whole = torch.cat(second[0], dim=2), torch.cat(first[0], dim=2)
    skipped = 2 * again.prompt_boundary()  # a hit starts after the prompt's cached frames
    assert skipped > 0 and restored.shape[2] == whole.shape[2] - skipped
    assert relative_error(restored, whole[:, :, skipped:]) <= 1e-4
    # an incremental request needs the encoder state such a snapshot lacks: it never restores one
    stream_together(flow, [IncrementalFlow(flow, **voice, cache=cache)], [tokens])
    assert cache.stats()["hits"] == 1 and cache.stats()["misses"] == 2


def run(request: IncrementalFlow, tokens: list[int], finalize: bool = False) -> tuple[torch.Tensor, int]:
    step = begin_many([(request, tokens, finalize)])[0]
    step.request.result = solver_for(request.flow.decoder).solve(step.request)
    return request.complete(step)


@pytest.mark.parametrize("recompute", [False, True])
def test_a_failed_begin_leaves_the_request_to_start_over(modules, recompute):  # noqa: F811
    """An encoder that fails mid-batch leaves every request of the batch able to begin again, exactly."""
    flow, _ = modules
    voice, tokens = prompt(9, seed=4), speech_tokens(60, seed=5)
    request = IncrementalFlow(flow, **voice, recompute_encoder=recompute)
    assert run(request, tokens[:28])[1] == 0
    assert request.committed  # whole chunks were kept: the next call would start after them
    bad = tokens[:53]
    bad[40] = 10**6  # no such speech token
    with pytest.raises(IndexError):
        begin_many([(request, bad, False)])
    mel, first = run(request, tokens[:53])
    assert first == 0  # its state was left unsure: it computed again from the first frame
    expected, _ = run(IncrementalFlow(flow, **voice, recompute_encoder=recompute), tokens[:53])
    assert relative_error(mel, expected) <= TOLERANCE
