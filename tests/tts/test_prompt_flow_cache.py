"""The per-voice prompt cache of the streaming flow changes nothing but the work done.

Streams run with and without a `PromptFlowCache` must give the same mel per chunk and the same waveform;
a second take with the same prompt must hit the cache, another prompt must miss, the LRU is bounded by
bytes, and requests sharing a cached prompt in parallel must not write into each other's state.
"""

from __future__ import annotations

import math
import threading

import pytest
import torch

from studio.tts.device.prompt_caches import budget_bytes
from studio.tts.flow.streaming.batched_solve import PAGE_FRAMES
from studio.tts.flow.streaming.incremental import IncrementalFlow
from studio.tts.flow.streaming.prompt_cache import PromptFlowCache, prompt_key
from studio.tts.token2wav import Token2WavStream, warm_prompt_cache
from tests.tts.test_incremental_flow import (
    TOLERANCE,
    modules,  # noqa: F401  (fixture)
    prompt,
    relative_error,
    speech_tokens,
)

LOTS = 1 << 40  # a budget nothing here reaches


def run(flow, hift, inputs: dict, tokens: list[int], cache, **options):
    """One streamed take (tokens arriving one at a time): (mel per chunk, joined waveform)."""
    stream = Token2WavStream(
        flow,
        hift,
        **inputs,
        streaming=True,
        generator=torch.Generator().manual_seed(9),
        incremental=True,
        prompt_cache=cache,
        **options,
    )
    mels = []
    vocode = stream.vocode

    def recording(mel, finalize):
        mels.append(mel.clone())
        return vocode(mel, finalize)

    stream.vocode = recording
    speech = []
    for available in range(len(tokens) + 1):
        while stream.ready(available):
            speech.append(stream.chunk(tokens[:available])[0])
    speech.append(stream.finish(tokens)[0])
    return mels, torch.cat(speech, dim=1)


def assert_same(ours, theirs, tolerance: float = TOLERANCE) -> None:
    (mels, speech), (ref_mels, ref_speech) = ours, theirs
    assert len(mels) == len(ref_mels) >= 2
    for mel, ref in zip(mels, ref_mels, strict=True):
        assert relative_error(mel, ref) <= tolerance
    assert relative_error(speech, ref_speech) <= tolerance


@pytest.mark.parametrize(
    ("prompt_tokens", "n_tokens", "hop"),
    [
        (28, 60, 25),  # prompt - lookahead ends exactly on the chunk grid: one whole chunk cached
        (50, 60, 25),  # on the grid, but the last chunk's lookahead reaches the target: one chunk cached
        (53, 70, 25),  # two chunks cached
        (61, 55, 25),  # prompt ends inside a chunk: the partial chunk is recomputed with the target
        (40, 64, 10),  # hops smaller than a chunk
        (12, 45, 25),  # shorter than a chunk: nothing to cache
    ],
)
def test_cached_prompt_streams_equal_uncached(modules, prompt_tokens, n_tokens, hop):  # noqa: F811
    flow, hift = modules
    inputs, cache = prompt(prompt_tokens), PromptFlowCache(LOTS)
    for seed in (6, 7):  # the second take says something else with the same voice
        tokens = speech_tokens(n_tokens, seed=seed)
        plain = run(flow, hift, inputs, tokens, cache=False, token_hop_len=hop)
        assert_same(run(flow, hift, inputs, tokens, cache=cache, token_hop_len=hop), plain)
    cached = prompt_tokens >= 28
    assert cache.stats()["hits"] == (1 if cached else 0)
    assert len(cache) == (1 if cached else 0)


@pytest.mark.parametrize("fp8", [False, True])
def test_cached_prompt_takes_solved_a_step_at_a_time(modules, monkeypatch, fp8):  # noqa: F811
    """A solver whose budget holds one Euler step of a take's arena but not every step runs each chunk a step
    at a time: the take that fills the prompt cache (its rows and tails at the mark kept), the one that starts
    from it (shared rows read a step at a time) and a plain one equal the same takes on the default solver."""
    from studio.tts.flow.streaming.solver import EstimatorSolver

    if fp8:
        monkeypatch.setenv("STUDIO_FLOW_STATE_FP8", "1")
    flow, hift = modules
    inputs, tokens = prompt(53), speech_tokens(70, seed=6)

    def three_takes():  # filling the cache, from the cache, without it
        cache = PromptFlowCache(LOTS)
        return [run(flow, hift, inputs, tokens, cache=use) for use in (cache, cache, False)], cache

    expected, _ = three_takes()
    solver = EstimatorSolver(flow.decoder, graphs=False)
    solver.budget_bytes = 250 * solver.layout.bytes_per_frame(2, 2, torch.float32)  # 500 frames of one step
    assert 60 * solver.layout.bytes_per_frame(10, 2, torch.float32) > solver.budget_bytes  # every step: 50
    flow.decoder._solver = solver
    try:
        takes, cache = three_takes()
    finally:
        flow.decoder._solver = None
    assert solver.stepwise_batches == solver.batches > 0 and cache.stats()["hits"] == 1
    for take, same in zip(takes, expected, strict=True):
        assert_same(take, same)  # float8 pages hold the same values a step at a time


def test_second_take_hits_and_skips_the_prompt_frames(modules):  # noqa: F811
    flow, _ = modules
    inputs, tokens = prompt(53), speech_tokens(40)
    cache = PromptFlowCache(LOTS)
    first = IncrementalFlow(flow, **inputs, cache=cache)
    mel_a, frame_a = first.mel(tokens[:25], finalize=False)
    assert cache.stats()["misses"] == 1 and cache.stats()["hits"] == 0
    second = IncrementalFlow(flow, **inputs, cache=cache)
    computed = []
    original = second._plan
    second._plan = lambda ids, finalize, steps: (
        computed.append(len(second.committed)) or original(ids, finalize, steps)
    )
    mel_b, frame_b = second.mel(tokens[:25], finalize=False)
    assert cache.stats()["hits"] == 1
    assert computed == [50]  # started after the two cached chunks, computed nothing before them
    assert (frame_a, frame_b) == (
        0,
        100,
    )  # the miss computes everything in one call, keeping the prompt state
    assert relative_error(mel_b, mel_a[:, :, 100:]) <= TOLERANCE
    other = IncrementalFlow(flow, **prompt(53, seed=11), cache=cache)
    other.mel(tokens[:25], finalize=False)
    assert cache.stats()["misses"] == 2 and len(cache) == 2


def test_key_covers_the_whole_prompt_and_the_step_count(modules):  # noqa: F811
    flow, _ = modules
    inputs = prompt(30)
    base = prompt_key(IncrementalFlow(flow, **inputs), 10)
    assert prompt_key(IncrementalFlow(flow, **prompt(30)), 10) == base  # equal content, other tensors
    assert prompt_key(IncrementalFlow(flow, **inputs), 5) != base
    for name in inputs:
        changed = dict(inputs)
        changed[name] = inputs[name].clone()
        changed[name].view(-1)[3] += 1
        assert prompt_key(IncrementalFlow(flow, **changed), 10) != base


def test_a_hit_never_writes_into_the_cached_tensors(modules):  # noqa: F811
    flow, _ = modules
    inputs, tokens = prompt(53), speech_tokens(60)
    cache = PromptFlowCache(LOTS)
    IncrementalFlow(flow, **inputs, cache=cache).mel(tokens[:10], finalize=False)
    (snap,) = cache._entries.values()
    before = [t.clone() for t in _snapshot_tensors(snap)]
    user = IncrementalFlow(flow, **inputs, cache=cache)
    for end in (28, 53, 60):
        user.mel(tokens[:end], finalize=end == 60)
    after = list(_snapshot_tensors(snap))
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    # the take reads the voice's rows in place and holds only its own frames (not a copy of the prompt's)
    state, shared = user.estimator_state, snap.estimator.length
    assert state.base is snap.estimator.base and state.base_length == shared > 0
    per_frame = state.pages[0][:, :, :, :, :, :1].nbytes
    pages = math.ceil((state.length - shared) / PAGE_FRAMES)
    assert len(state.pages) == pages and sum(p.nbytes for p in state.pages) == per_frame * PAGE_FRAMES * pages


def _snapshot_tensors(snap):
    for store in (snap.token_store, snap.encoder_store):
        for value in store.values():
            yield from (value.k, value.v) if hasattr(value, "k") else (value,)
    yield from (snap.estimator.base, snap.estimator.tails)


def test_lru_evicts_by_bytes(modules):  # noqa: F811
    flow, _ = modules
    prompts = [prompt(30, seed=20 + i) for i in range(3)]
    probe = PromptFlowCache(LOTS)
    probe.warm(IncrementalFlow(flow, **prompts[0]))
    size = probe.nbytes
    assert size > 0
    cache = PromptFlowCache(2 * size + size // 2)  # room for two snapshots, not three

    def take(i):
        IncrementalFlow(flow, **prompts[i], cache=cache).mel(speech_tokens(5), finalize=False)

    take(0)
    take(1)
    take(0)  # 0 is now the most recently used
    assert cache.stats()["evictions"] == 0 and cache.nbytes == 2 * size
    take(2)  # evicts 1, the least recently used
    assert cache.stats()["evictions"] == 1 and len(cache) == 2 and cache.nbytes <= cache.max_bytes
    hits = cache.stats()["hits"]
    take(0)
    assert cache.stats()["hits"] == hits + 1
    take(1)
    assert cache.stats()["hits"] == hits + 1  # 1 was evicted: a miss, stored again
    small = PromptFlowCache(size - 1)
    IncrementalFlow(flow, **prompts[0], cache=small).mel(speech_tokens(5), finalize=False)
    assert len(small) == 0 and small.stats()["rejected"] == 1
    exact = PromptFlowCache(size)  # the size checked before copying is the size kept
    IncrementalFlow(flow, **prompts[0], cache=exact).mel(speech_tokens(5), finalize=False)
    assert len(exact) == 1 and exact.nbytes == size


def test_concurrent_requests_sharing_a_cached_prompt(modules):  # noqa: F811
    flow, hift = modules
    inputs = prompt(53)
    texts = [speech_tokens(70, seed=31), speech_tokens(64, seed=32)]
    cache = PromptFlowCache(LOTS)
    run(flow, hift, inputs, speech_tokens(30, seed=30), cache=cache)  # fills the cache
    solo = [run(flow, hift, inputs, tokens, cache=cache) for tokens in texts]
    results: list = [None, None]
    errors: list = []
    barrier = threading.Barrier(2)

    def worker(i):
        try:
            torch.set_num_threads(1)
            barrier.wait(timeout=30)
            results[i] = run(flow, hift, inputs, texts[i], cache=cache)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors and all(not thread.is_alive() for thread in threads)
    for ours, theirs in zip(results, solo, strict=True):
        assert_same(ours, theirs, tolerance=1e-6)
    assert cache.stats()["hits"] == 4


def test_tiny_model_folder_same_voice_twice(tiny_cosyvoice):
    """The real tiny configuration: a second take with the voice equals the uncached take."""
    flow, hift = tiny_cosyvoice.model.flow, tiny_cosyvoice.model.hift
    inputs, tokens = prompt(61), speech_tokens(60)
    cache = PromptFlowCache(LOTS)
    plain = run(flow, hift, inputs, tokens, cache=False, speed=1.5)
    run(flow, hift, inputs, speech_tokens(40, seed=41), cache=cache, speed=1.5)
    # On CUDA the two takes solve different padded shapes and cuDNN's convolutions run in TF32 by default:
    # the H200 measured 2.7e-4 between them, so the GPU gets the fp16-level tolerance.
    on_gpu = next(flow.parameters()).is_cuda
    assert_same(run(flow, hift, inputs, tokens, cache=cache, speed=1.5), plain, 1e-3 if on_gpu else TOLERANCE)
    assert cache.stats()["hits"] == 1


def test_budget_from_the_environment(monkeypatch):
    monkeypatch.delenv("STUDIO_PROMPT_CACHE_MB", raising=False)
    assert budget_bytes("cuda") == 2048 * 2**20 and budget_bytes("cpu") == 256 * 2**20
    monkeypatch.setenv("STUDIO_PROMPT_CACHE_MB", "0")
    assert budget_bytes("cpu") == 0
    monkeypatch.setenv("STUDIO_PROMPT_CACHE_MB", "lots")
    with pytest.raises(ValueError, match="STUDIO_PROMPT_CACHE_MB"):
        budget_bytes("cpu")


def test_a_take_shorter_than_one_chunk_fills_the_cache_too(modules):  # noqa: F811
    """A first call that finalizes (no streamed chunk) commits nothing, yet still leaves the prompt's state."""
    flow, hift = modules
    inputs, short, tokens = prompt(53), speech_tokens(12, seed=40), speech_tokens(60)
    cache = PromptFlowCache(LOTS)
    stream = Token2WavStream(flow, hift, **inputs, streaming=True, incremental=True, prompt_cache=cache)
    assert not stream.ready(len(short))
    assert stream.finish(short)[0].shape[1] == 12 * 2 * 480
    assert len(cache) == 1
    assert_same(run(flow, hift, inputs, tokens, cache=cache), run(flow, hift, inputs, tokens, cache=False))
    assert cache.stats()["hits"] == 1
    other = speech_tokens(15, seed=42)  # and a short take that starts from the cached state
    plain, cached = (
        Token2WavStream(
            flow,
            hift,
            **inputs,
            streaming=True,
            incremental=True,
            prompt_cache=choice,
            generator=torch.Generator().manual_seed(9),
        )
        for choice in (False, cache)
    )
    assert relative_error(cached.finish(other)[0], plain.finish(other)[0]) <= TOLERANCE
    assert cache.stats()["hits"] == 2


def test_warming_a_voice_makes_its_first_take_a_hit(modules):  # noqa: F811
    flow, hift = modules
    inputs, tokens = prompt(61), speech_tokens(50)
    cache = PromptFlowCache(LOTS)
    assert warm_prompt_cache(flow, **inputs, cache=cache) is True
    assert warm_prompt_cache(flow, **inputs, cache=cache) is False  # already there
    assert (
        warm_prompt_cache(flow, **prompt(20), cache=cache) is False
    )  # nothing reusable in so short a prompt
    assert_same(run(flow, hift, inputs, tokens, cache=cache), run(flow, hift, inputs, tokens, cache=False))
    assert cache.stats()["hits"] == 2 and len(cache) == 1


def test_saving_a_voice_warms_the_cache_for_its_first_streamed_take(
    tiny_model_dir, prompt_wav16k, monkeypatch, tmp_path
):
    from studio.tts.cosyvoice2 import CosyVoice2, SynthesisSpec
    from studio.tts.flow.streaming.prompt_cache import default_cache

    monkeypatch.setenv("STUDIO_DATA_DIR", str(tmp_path))
    model = CosyVoice2(tiny_model_dir)
    cache = default_cache(model.model.device)
    before = cache.stats()
    model.add_zero_shot_spk("A short prompt for the voice.", prompt_wav16k, "warm-voice", prompt_sr=16000)
    assert cache.stats()["misses"] == before["misses"] + 1  # computed once, when the voice was saved
    spec = SynthesisSpec(
        text="Hello there.",
        mode="zero_shot",
        spk_id="warm-voice",
        stream=True,
        seed=0,
        exact_speech_tokens=60,
    )
    try:
        chunks = list(model.synthesize(spec))
    finally:
        model.close()
    assert len(chunks) >= 2
    assert cache.stats()["hits"] == before["hits"] + 1
    assert cache.stats()["misses"] == before["misses"] + 1


def test_prompt_digests_are_remembered_per_tensor_and_notice_in_place_writes(monkeypatch):
    """Hashing a GPU prompt reads it back (a device sync): the same tensors are hashed once per voice."""
    from studio.tts.device import prompt_caches

    hashed = []
    real = prompt_caches.tensor_digest
    monkeypatch.setattr(prompt_caches, "tensor_digest", lambda t: hashed.append(t) or real(t))
    feat = torch.randn(1, 40, 80)
    first = prompt_caches.remembered_digest(feat)
    assert prompt_caches.remembered_digest(feat) == first and len(hashed) == 1  # remembered
    assert (
        prompt_caches.remembered_digest(feat.clone()) == first and len(hashed) == 2
    )  # other memory, same content
    feat[0, 0, 0] += 1  # an in-place write bumps the version: hashed again, and the digest changes
    assert prompt_caches.remembered_digest(feat) != first and len(hashed) == 3
