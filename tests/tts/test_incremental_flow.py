"""The incremental streaming flow renders the same mel and audio as upstream's full-prefix re-run.

Each stream is driven twice with the same tokens, seed and schedule: once with `incremental=False` (the flow
re-run over the whole token prefix per chunk, upstream's semantics) and once with the cached path.
"""

from __future__ import annotations

import pytest
import torch

from studio.tts.flow import (
    CausalConditionalCFM,
    CausalConditionalDecoder,
    CausalMaskedDiffWithXvec,
    UpsampleConformerEncoder,
)
from studio.tts.flow.streaming.incremental import IncrementalFlow
from studio.tts.token2wav import Token2WavStream
from tests.tts.test_flow_hift import CFM_PARAMS, ENCODER_KWARGS, ESTIMATOR_KWARGS, make_hift

TOLERANCE = 1e-4


def relative_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    assert ours.shape == theirs.shape
    return float((ours.double() - theirs.double()).norm() / theirs.double().norm().clamp_min(1e-30))


@pytest.fixture(scope="module")
def modules() -> tuple[CausalMaskedDiffWithXvec, torch.nn.Module]:
    """A small flow with two layers per stack and several estimator blocks (every cache path is used)."""
    return small_flow(), make_hift()


def small_flow() -> CausalMaskedDiffWithXvec:
    torch.manual_seed(3)
    estimator = CausalConditionalDecoder(**{**ESTIMATOR_KWARGS, "n_blocks": 2, "num_mid_blocks": 2})
    decoder = CausalConditionalCFM(240, CFM_PARAMS, n_spks=1, spk_emb_dim=80, estimator=estimator)
    encoder = UpsampleConformerEncoder(**{**ENCODER_KWARGS, "num_blocks": 2})
    return CausalMaskedDiffWithXvec(
        input_size=512, output_size=80, spk_embed_dim=192, vocab_size=6561, encoder=encoder, decoder=decoder
    ).eval()


def prompt(prompt_tokens: int, seed: int = 5) -> dict:
    g = torch.Generator().manual_seed(seed)
    return dict(
        prompt_token=torch.randint(0, 6561, (1, prompt_tokens), generator=g, dtype=torch.int32),
        prompt_feat=torch.randn(1, 2 * prompt_tokens, 80, generator=g) - 5,
        embedding=torch.randn(1, 192, generator=g),
    )


def speech_tokens(count: int, seed: int = 6) -> list[int]:
    return torch.randint(0, 6561, (count,), generator=torch.Generator().manual_seed(seed)).tolist()


def stream_all(flow, hift, inputs: dict, tokens: list[int], incremental: bool, **options):
    """Drive a stream as CosyVoice2.synthesize does; return (mel per chunk, speech per chunk)."""
    stream = Token2WavStream(
        flow,
        hift,
        **inputs,
        streaming=True,
        generator=torch.Generator().manual_seed(9),
        incremental=incremental,
        **options,
    )
    assert stream.incremental is incremental
    mels = []
    vocode = stream.vocode

    def recording(mel, finalize):
        mels.append(mel)
        return vocode(mel, finalize)

    stream.vocode = recording
    speech = []
    for available in range(len(tokens) + 1):  # tokens arrive one at a time
        while stream.ready(available):
            speech.append(stream.chunk(tokens[:available])[0])
    speech.append(stream.finish(tokens)[0])
    return mels, speech


@pytest.mark.parametrize(
    ("prompt_tokens", "n_tokens", "hop"),
    [
        (7, 52, 25),  # first hop padded to align the prompt; short text
        (25, 83, 25),  # prompt already aligned; several chunks
        (13, 130, 25),  # longer text
        (7, 71, 10),  # hop not a multiple of the attention chunk: partial chunks are recomputed
        (30, 64, 40),  # hop larger than a chunk, unaligned
        (0, 45, 25),  # no prompt at all
    ],
)
def test_incremental_stream_equals_full_prefix_rerun(modules, prompt_tokens, n_tokens, hop):
    flow, hift = modules
    inputs, tokens = prompt(prompt_tokens), speech_tokens(n_tokens)
    full_mels, full_speech = stream_all(flow, hift, inputs, tokens, incremental=False, token_hop_len=hop)
    mels, speech = stream_all(flow, hift, inputs, tokens, incremental=True, token_hop_len=hop)
    assert len(mels) == len(full_mels) >= 2
    for ours, theirs in zip(mels, full_mels, strict=True):
        assert relative_error(ours, theirs) <= TOLERANCE
    joined, expected = torch.cat(speech, dim=1), torch.cat(full_speech, dim=1)
    assert joined.shape == (1, n_tokens * 2 * 480)  # every frame once: no gap, no overlap
    assert relative_error(joined, expected) <= TOLERANCE
    assert sum(mel.shape[2] for mel in mels) == 2 * n_tokens


def test_incremental_stream_matches_on_the_tiny_model_folder(tiny_cosyvoice):
    """The real tiny configuration (all encoder and estimator blocks), with speed applied when streaming."""
    flow, hift = tiny_cosyvoice.model.flow, tiny_cosyvoice.model.hift
    inputs, tokens = prompt(18), speech_tokens(90)
    full_mels, full_speech = stream_all(flow, hift, inputs, tokens, incremental=False, speed=1.5)
    mels, speech = stream_all(flow, hift, inputs, tokens, incremental=True, speed=1.5)
    for ours, theirs in zip(mels, full_mels, strict=True):
        assert relative_error(ours, theirs) <= TOLERANCE
    assert relative_error(torch.cat(speech, dim=1), torch.cat(full_speech, dim=1)) <= TOLERANCE


def test_streamed_frames_after_the_first_chunk_are_not_recomputed(modules):
    """Each aligned chunk runs the flow on its new frames only: the work per chunk stays flat."""
    flow, _ = modules
    inputs, tokens = prompt(25), speech_tokens(103)
    incremental = IncrementalFlow(flow, **inputs)
    sizes = []
    for end in (28, 53, 78, 103):  # hops of 25 tokens plus 3 lookahead tokens
        mel, first = incremental.mel(tokens[:end], finalize=False)
        sizes.append((first, mel.shape[2]))
    assert sizes == [(0, 100), (100, 50), (150, 50), (200, 50)]
    mel, first = incremental.mel(tokens, finalize=True)
    assert (first, mel.shape[2]) == (250, 6)  # the held-back lookahead frames, once the text is final


def test_a_token_list_that_is_not_a_continuation_starts_over(modules):
    flow, _ = modules
    inputs = prompt(7)
    a, b = speech_tokens(60, seed=1), speech_tokens(60, seed=2)
    reused = IncrementalFlow(flow, **inputs)
    reused.mel(a[:46], finalize=False)
    mel, first = reused.mel(b, finalize=True)
    fresh, fresh_first = IncrementalFlow(flow, **inputs).mel(b, finalize=True)
    assert first == fresh_first == 0
    assert relative_error(mel, fresh) <= TOLERANCE
    again, _ = IncrementalFlow(flow, **inputs).mel(b, finalize=True)
    assert torch.equal(fresh, again)


def test_unsupported_prompt_alignment_falls_back_to_the_full_prefix_path(modules):
    flow, hift = modules
    inputs = prompt(10)
    inputs["prompt_feat"] = inputs["prompt_feat"][:, :19]  # not 2 frames per prompt token
    stream = Token2WavStream(flow, hift, **inputs, streaming=True, incremental=True)
    assert stream.incremental is False
    tokens = speech_tokens(50)
    while stream.ready(len(tokens)):
        stream.chunk(tokens)
    assert stream.finish(tokens)[0].shape[1] > 0


def test_streaming_defaults_to_the_incremental_flow_unless_overridden(modules, monkeypatch):
    flow, hift = modules
    inputs = prompt(7)

    def chosen(**options) -> bool:
        return Token2WavStream(flow, hift, **inputs, streaming=True, **options).incremental

    monkeypatch.delenv("STUDIO_INCREMENTAL_FLOW", raising=False)
    assert chosen() is True
    assert chosen(incremental=False) is False
    assert Token2WavStream(flow, hift, **inputs, streaming=False)._incremental is None  # offline: one pass
    monkeypatch.setenv("STUDIO_INCREMENTAL_FLOW", "0")
    assert chosen() is False
    assert chosen(incremental=True) is True


@pytest.mark.parametrize("recompute_encoder", [True, False])
def test_half_weights_without_autocast_stream_close_to_float32(recompute_encoder):
    """The studio's fp16 flow runs its halved weights without autocast (token2wav.flow_precision): every chunk
    of the streaming path (prompt inputs in float32, as the frontend makes them) stays close to float32."""
    from studio.tts.flow.streaming.incremental import begin_many
    from studio.tts.flow.streaming.solver import EstimatorSolver

    tokens = speech_tokens(60, 8)
    mels = {}
    for dtype in (torch.float32, torch.float16):
        module = small_flow().to(dtype)  # the same weights each time (seeded)
        module.decoder._solver = EstimatorSolver(module.decoder, graphs=False)
        take = IncrementalFlow(module, **prompt(13, 4), recompute_encoder=recompute_encoder)
        mels[dtype] = []
        with torch.inference_mode():
            for end, final in ((28, False), (53, False), (60, True)):
                step = begin_many([(take, tokens[:end], final)])[0]
                module.decoder._solver.solve_many([step.request])
                mel, _ = take.complete(step)
                assert mel.dtype == dtype
                mels[dtype].append(mel.float())
    for half, full in zip(mels[torch.float16], mels[torch.float32], strict=True):
        assert relative_error(half, full) < 0.05
