"""CosyVoice3's per-voice prompt cache (`DiTPromptCache`) for the streamed flow (`DiTFlowStream`).

A take that starts from a voice's cached prompt chunks must return what a take without the cache returns,
compute only the frames after those chunks, and never share an entry across voices, flows, dtypes or
Euler schedules; the cache stays within its bytes, least recently used out first.
"""

from __future__ import annotations

import pytest
import torch

from studio.tts.cosyvoice3 import flow_prompt_cache
from studio.tts.cosyvoice3.flow_prompt_cache import (
    DiTPromptCache,
    cached_prompt_frames,
    default_prompt_cache,
)
from studio.tts.cosyvoice3.flow_stream import DiTFlowStream, warm_prompt_cache
from studio.tts.device.prompt_caches import budget_bytes
from tests.tts.cosyvoice3.test_cv3_flow_stream import LOOKAHEAD, small_flow, take_inputs, take_schedule

UNLIMITED = 2**40
PROMPT_TOKENS = 60  # 120 prompt frames: chunks 0 and 1 (tokens 0..49, lookahead to 52) are cacheable
CACHED = 100


@pytest.fixture(scope="module")
def flow():
    return small_flow()


def stream_of(flow, inputs, cache, n_timesteps: int = 10) -> DiTFlowStream:
    return DiTFlowStream(
        flow, inputs["prompt_token"], inputs["prompt_feat"], inputs["embedding"], n_timesteps, cache
    )


def run_take(stream: DiTFlowStream, inputs: dict, counts: list[int]) -> list[torch.Tensor]:
    return [
        stream.mel(inputs["tokens"][:, :count], index == len(counts) - 1)
        for index, count in enumerate(counts)
    ]


def test_the_cacheable_prompt_frames():
    assert cached_prompt_frames(PROMPT_TOKENS, LOOKAHEAD, 2, 50) == CACHED
    assert cached_prompt_frames(28, LOOKAHEAD, 2, 50) == 50  # chunk 0's lookahead ends at token 28
    assert cached_prompt_frames(27, LOOKAHEAD, 2, 50) == 0
    assert cached_prompt_frames(2, LOOKAHEAD, 2, 50) == 0
    assert cached_prompt_frames(60, LOOKAHEAD, 2, 25) == 0  # a chunk of half tokens: not cached


def test_a_take_from_a_warm_cache_equals_one_without_the_cache(flow):
    inputs = take_inputs(PROMPT_TOKENS, tokens=260, seed=5)
    counts = take_schedule(PROMPT_TOKENS, 260)
    cache = DiTPromptCache(UNLIMITED)
    plain = run_take(stream_of(flow, inputs, None), inputs, counts)
    cold = run_take(stream_of(flow, inputs, cache), inputs, counts)
    assert cache.stats()["misses"] == 1 and len(cache) == 1
    warm = run_take(stream_of(flow, inputs, cache), inputs, counts)
    assert cache.stats()["hits"] == 1
    for plain_mel, cold_mel, warm_mel in zip(plain, cold, warm, strict=True):
        assert plain_mel.shape == warm_mel.shape
        # a cold take computes the prompt chunks apart, as the cache then hands them out: the same numbers
        assert torch.equal(cold_mel, warm_mel)
        if plain_mel.numel():
            assert (plain_mel - warm_mel).abs().max().item() <= 1e-6


def test_the_first_call_computes_only_the_frames_after_the_cached_chunks(flow):
    inputs = take_inputs(PROMPT_TOKENS, tokens=80, seed=6)
    first = take_schedule(PROMPT_TOKENS, 80)[0]
    frames = 2 * (PROMPT_TOKENS + first - LOOKAHEAD)
    cache = DiTPromptCache(UNLIMITED)
    computed = {}
    for name, take_cache in (("plain", None), ("cold", cache), ("warm", cache)):
        stream = stream_of(flow, inputs, take_cache)
        stream.mel(inputs["tokens"][:, :first], finalize=False)
        computed[name] = stream.computed_frames
    assert computed == {"plain": frames, "cold": frames, "warm": frames - CACHED}


def test_a_call_that_reaches_no_new_frame_leaves_the_cache_alone(flow):
    inputs = take_inputs(PROMPT_TOKENS, tokens=40, seed=15)
    cache = DiTPromptCache(UNLIMITED)
    stream = stream_of(flow, inputs, cache)
    assert stream.mel(inputs["tokens"][:, :LOOKAHEAD], finalize=False).shape == (1, 80, 0)
    assert stream.computed_frames == 0 and cache.stats()["misses"] == 0 and len(cache) == 0
    stream.mel(inputs["tokens"][:, :30], finalize=False)
    assert stream.computed_frames == 2 * (PROMPT_TOKENS + 27) and len(cache) == 1


def test_warming_a_voice_caches_its_prompt_chunks_before_its_first_take(flow):
    inputs = take_inputs(PROMPT_TOKENS, tokens=80, seed=16)
    voice = (inputs["prompt_token"], inputs["prompt_feat"], inputs["embedding"])
    cache = DiTPromptCache(UNLIMITED)
    assert warm_prompt_cache(flow, *voice, cache) and len(cache) == 1
    assert warm_prompt_cache(flow, *voice, cache) and len(cache) == 1  # already there: nothing computed
    counts = take_schedule(PROMPT_TOKENS, 80)
    warmed = stream_of(flow, inputs, cache)
    first = warmed.mel(inputs["tokens"][:, : counts[0]], finalize=False)
    assert warmed.computed_frames == 2 * (PROMPT_TOKENS + counts[0] - LOOKAHEAD) - CACHED
    expected = stream_of(flow, inputs, None).mel(inputs["tokens"][:, : counts[0]], finalize=False)
    assert (first - expected).abs().max().item() <= 1e-6
    short = take_inputs(prompt_tokens=20, tokens=10, seed=17)
    assert not warm_prompt_cache(flow, short["prompt_token"], short["prompt_feat"], short["embedding"], cache)
    assert not warm_prompt_cache(flow, *voice, DiTPromptCache(1024))  # refused: larger than the budget


def test_a_cached_entry_is_never_written_by_the_takes_that_use_it(flow):
    inputs = take_inputs(PROMPT_TOKENS, tokens=200, seed=7)
    counts = take_schedule(PROMPT_TOKENS, 200)
    cache = DiTPromptCache(UNLIMITED)
    run_take(stream_of(flow, inputs, cache), inputs, counts)
    (entry,) = cache._entries.values()
    before = [tensor.clone() for tensor in (entry.keys, entry.values, entry.position_left)]
    assert entry.frames == CACHED and entry.keys.shape[4] == CACHED
    run_take(stream_of(flow, inputs, cache), inputs, counts)
    after = (entry.keys, entry.values, entry.position_left)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_voices_flows_dtypes_and_schedules_never_share_an_entry(flow):
    cache = DiTPromptCache(UNLIMITED)
    inputs = take_inputs(PROMPT_TOKENS, tokens=40, seed=8)
    other_speaker = dict(inputs, embedding=inputs["embedding"] + 1e-3)
    other_mel = dict(inputs, prompt_feat=inputs["prompt_feat"].clone())
    other_mel["prompt_feat"][0, 3, 7] += 1e-3
    other_tokens = dict(inputs, prompt_token=inputs["prompt_token"].clone())
    other_tokens["prompt_token"][0, 0] += 1
    takes = [
        (flow, inputs, 10),
        (flow, other_speaker, 10),
        (flow, other_mel, 10),
        (flow, other_tokens, 10),
        (flow, inputs, 4),  # another Euler schedule
        (small_flow(), inputs, 10),  # the same weights, another module
    ]
    for take_flow, take, steps in takes:
        stream_of(take_flow, take, cache, steps).mel(take["tokens"], finalize=False)
    assert cache.stats()["hits"] == 0 and len(cache) == len(takes)
    stream_of(flow, inputs, cache).mel(inputs["tokens"], finalize=False)
    assert cache.stats()["hits"] == 1
    # the same module, converted to another dtype: its fp32 entry is not used
    converted = small_flow()
    stream_of(converted, inputs, cache).mel(inputs["tokens"], finalize=False)
    converted.double()  # the same inputs (the stream casts the prompt mel to the flow's dtype)
    cached = stream_of(converted, inputs, cache).mel(inputs["tokens"], finalize=False)
    assert cache.stats()["hits"] == 1 and len(cache) == len(takes) + 2
    plain = stream_of(converted, inputs, None).mel(inputs["tokens"], finalize=False)
    assert (cached - plain).abs().max().item() <= 1e-6


def test_the_cache_evicts_the_least_recently_used_voice_by_bytes(flow):
    voices = [take_inputs(PROMPT_TOKENS, tokens=30, seed=seed) for seed in (10, 11, 12)]
    probe = DiTPromptCache(UNLIMITED)
    stream_of(flow, voices[0], probe).mel(voices[0]["tokens"], finalize=False)
    entry_bytes = probe.nbytes
    per_frame = 10 * 2 * 2 * 2 * 64 * 4  # steps x blocks x CFG rows x (keys, values) x width x fp32
    assert entry_bytes >= CACHED * per_frame

    cache = DiTPromptCache(2 * entry_bytes + entry_bytes // 2)  # room for two voices
    for voice in voices[:2]:
        stream_of(flow, voice, cache).mel(voice["tokens"], finalize=False)
    stream_of(flow, voices[0], cache).mel(voices[0]["tokens"], finalize=False)  # voice 0: most recent
    stream_of(flow, voices[2], cache).mel(voices[2]["tokens"], finalize=False)  # evicts voice 1
    stats = cache.stats()
    assert stats["evictions"] == 1 and stats["entries"] == 2 and stats["bytes"] == 2 * entry_bytes
    cache.misses = cache.hits = 0
    for voice in (voices[2], voices[0], voices[1]):  # the kept ones first: voice 1's miss then evicts one
        stream_of(flow, voice, cache).mel(voice["tokens"], finalize=False)
    assert cache.hits == 2 and cache.misses == 1  # voices 0 and 2 were kept, voice 1 was computed again


def test_an_entry_larger_than_the_budget_is_refused_and_the_take_is_unchanged(flow):
    inputs = take_inputs(PROMPT_TOKENS, tokens=90, seed=13)
    counts = take_schedule(PROMPT_TOKENS, 90)
    small = DiTPromptCache(1024)
    refused = run_take(stream_of(flow, inputs, small), inputs, counts)
    plain = run_take(stream_of(flow, inputs, None), inputs, counts)
    assert len(small) == 0 and small.stats()["rejected"] == 1
    for a, b in zip(refused, plain, strict=True):
        assert a.shape == b.shape and (a.numel() == 0 or (a - b).abs().max().item() <= 1e-6)


def test_a_short_prompt_has_nothing_to_cache(flow):
    inputs = take_inputs(prompt_tokens=20, tokens=40, seed=14)
    cache = DiTPromptCache(UNLIMITED)
    stream = stream_of(flow, inputs, cache)
    stream.mel(inputs["tokens"], finalize=True)
    assert len(cache) == 0 and cache.stats()["misses"] == 0
    assert stream.computed_frames == 2 * 60


def test_the_budget_follows_studio_prompt_cache_mb(monkeypatch):
    monkeypatch.setenv("STUDIO_PROMPT_CACHE_MB", "3")
    assert budget_bytes("cuda") == 3 * 2**20
    monkeypatch.delenv("STUDIO_PROMPT_CACHE_MB")
    assert budget_bytes("cuda") == 2048 * 2**20 and budget_bytes("cpu") == 256 * 2**20
    monkeypatch.setenv("STUDIO_PROMPT_CACHE_MB", "0")
    monkeypatch.setattr(flow_prompt_cache, "_defaults", flow_prompt_cache.CachePerDevice(DiTPromptCache))
    assert default_prompt_cache("cpu") is None
    monkeypatch.setenv("STUDIO_PROMPT_CACHE_MB", "many")
    with pytest.raises(ValueError, match="STUDIO_PROMPT_CACHE_MB must be a number"):
        budget_bytes("cpu")
