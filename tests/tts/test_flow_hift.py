"""Behaviour of our flow and HiFT: frame rates, determinism, per-request randomness, loading, low precision."""

from __future__ import annotations

import pytest
import torch

from studio.tts.flow import (
    CausalConditionalCFM,
    CausalConditionalDecoder,
    CausalMaskedDiffWithXvec,
    UpsampleConformerEncoder,
)
from studio.tts.hift.model import ConvRNNF0Predictor, HiFTGenerator, load_hift_state_dict
from tests.tts import small_modules
from tests.tts.small_modules import CFM_PARAMS, ENCODER_KWARGS, FLOW_KWARGS, flow_inputs

# narrower than the shared small modules: these tests only check behaviour, so they build faster
HIFT_KWARGS = {**small_modules.HIFT_KWARGS, "base_channels": 32}
ESTIMATOR_KWARGS = {**small_modules.ESTIMATOR_KWARGS, "channels": [32]}


def make_hift(**overrides) -> HiFTGenerator:
    f0 = ConvRNNF0Predictor(num_class=1, in_channels=80, cond_channels=32)
    with torch.no_grad():
        f0.classifier.bias.fill_(150.0)  # voiced: the sine source is active
    return HiFTGenerator(**{**HIFT_KWARGS, **overrides}, f0_predictor=f0).eval()


@pytest.fixture(scope="module")
def hift() -> HiFTGenerator:
    torch.manual_seed(0)
    return make_hift()


@pytest.fixture(scope="module")
def flow() -> CausalMaskedDiffWithXvec:
    torch.manual_seed(0)
    decoder = CausalConditionalCFM(
        in_channels=240,
        n_spks=1,
        spk_emb_dim=80,
        cfm_params=CFM_PARAMS,
        estimator=CausalConditionalDecoder(**ESTIMATOR_KWARGS),
    )
    return CausalMaskedDiffWithXvec(
        **FLOW_KWARGS, encoder=UpsampleConformerEncoder(**ENCODER_KWARGS), decoder=decoder
    ).eval()


def mel(frames: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(seed))


def test_hift_yields_480_samples_per_mel_frame_clamped_to_audio_limit():
    torch.manual_seed(0)
    loud = make_hift(audio_limit=0.01)
    speech, source = loud.inference(mel(7), generator=torch.Generator().manual_seed(0))
    assert speech.shape == (1, 7 * 480) and speech.dtype == torch.float32
    assert source.shape == (1, 1, 7 * 480)
    assert speech.abs().max().item() == pytest.approx(0.01)  # saturates, never exceeds


def test_hift_randomness_comes_only_from_the_request_generator(hift):
    state = torch.get_rng_state()
    first, _ = hift.inference(mel(6), generator=torch.Generator().manual_seed(3))
    again, _ = hift.inference(mel(6), generator=torch.Generator().manual_seed(3))
    other, _ = hift.inference(mel(6), generator=torch.Generator().manual_seed(4))
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(first, again)
    assert not torch.allclose(first, other)


def test_hift_cache_source_replaces_the_head_of_the_source(hift):
    _, previous = hift.inference(mel(10), generator=torch.Generator().manual_seed(5))
    cache = previous[:, :, -8 * 480 :]
    _, source = hift.inference(mel(12, seed=2), cache, generator=torch.Generator().manual_seed(6))
    assert torch.equal(source[:, :, : cache.shape[2]], cache)
    assert not torch.equal(source[:, :, cache.shape[2] : 2 * cache.shape[2]], cache)


def test_old_style_prefixed_weight_norm_keys_load_and_foreign_keys_are_named(hift):
    state = {}
    for key, value in hift.state_dict().items():
        key = key.replace("parametrizations.weight.original0", "weight_g")
        state["generator." + key.replace("parametrizations.weight.original1", "weight_v")] = value
    loaded = make_hift()
    load_hift_state_dict(loaded, state)
    expected, _ = hift.inference(mel(5), generator=torch.Generator().manual_seed(1))
    got, _ = loaded.inference(mel(5), generator=torch.Generator().manual_seed(1))
    assert torch.allclose(got, expected, atol=1e-6)
    # fused weights (plain `weight` keys) load too, into a fresh weight-norm module
    again = make_hift()
    load_hift_state_dict(again, loaded.state_dict(), fuse=False)
    got_again, _ = again.inference(mel(5), generator=torch.Generator().manual_seed(1))
    assert torch.allclose(got_again, expected, atol=1e-5)
    # and weight-norm keys load into an already fused module (reloading weights after fusing)
    load_hift_state_dict(loaded, state)
    reloaded, _ = loaded.inference(mel(5), generator=torch.Generator().manual_seed(1))
    assert torch.allclose(reloaded, expected, atol=1e-6)
    with pytest.raises(ValueError, match="conv_post.extra"):
        load_hift_state_dict(make_hift(), {**state, "generator.conv_post.extra": torch.zeros(1)})
    del state["generator.conv_pre.bias"]
    with pytest.raises(ValueError, match="conv_pre.bias"):
        load_hift_state_dict(make_hift(), state)


def test_flow_yields_two_frames_per_token_and_drops_lookahead_frames_until_final(flow):
    inputs = flow_inputs(tokens=20)
    final, _ = flow.inference(**inputs, streaming=False, finalize=True)
    again, _ = flow.inference(**inputs, streaming=False, finalize=True)
    partial, _ = flow.inference(**inputs, streaming=True, finalize=False)
    assert final.shape == (1, 80, 40) and final.dtype == torch.float32
    assert partial.shape == (1, 80, 34)  # the last 3 tokens are lookahead only
    assert torch.equal(final, again)  # fixed noise: deterministic
    assert torch.isfinite(final).all()


def test_building_the_sampler_leaves_the_global_random_state_alone():
    state = torch.get_rng_state()
    cfm = CausalConditionalCFM(240, CFM_PARAMS, 1, 80, estimator=torch.nn.Identity())
    assert torch.equal(torch.get_rng_state(), state)
    expected = torch.randn(1, 80, 15000, generator=torch.Generator().manual_seed(0))
    assert torch.equal(cfm.rand_noise, expected)  # upstream's noise: randn after seeding 0


def test_bfloat16_weights_and_autocast_run_close_to_float32(flow, hift):
    inputs = flow_inputs(tokens=8)
    reference, _ = flow.inference(**inputs, streaming=False, finalize=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast, _ = flow.inference(**inputs, streaming=False, finalize=True)
    assert autocast.dtype == torch.float32
    assert (autocast - reference).norm() / reference.norm() < 0.1
    torch.manual_seed(0)
    low = make_hift().to(torch.bfloat16)
    low.load_state_dict(hift.state_dict())
    speech, _ = low.inference(mel(4), generator=torch.Generator().manual_seed(2))
    expected, _ = hift.inference(mel(4), generator=torch.Generator().manual_seed(2))
    assert speech.dtype == torch.float32 and torch.isfinite(speech).all()
    assert (speech - expected).norm() / expected.norm() < 0.2


@pytest.mark.parametrize(
    ("override", "name"),
    [({"use_cnn_module": True}, "use_cnn_module"), ({"input_layer": "conv2d"}, "input_layer")],
)
def test_unsupported_encoder_options_are_named(override, name):
    with pytest.raises(ValueError, match=name):
        UpsampleConformerEncoder(**{**ENCODER_KWARGS, **override})


def test_flow_rejects_a_batch(flow):
    inputs = flow_inputs(tokens=4)
    inputs["token"] = inputs["token"].repeat(2, 1)
    with pytest.raises(ValueError, match="one utterance"):
        flow.inference(**inputs, streaming=False, finalize=True)


@pytest.mark.parametrize("streaming", [False, True])
def test_masked_padding_leaves_valid_estimator_frames_unchanged(flow, streaming):
    """What CUDA-graph replay relies on: frames padded (and masked) at the end change no valid frame."""
    from studio.tts.flow.graphs import EstimatorGraphs, pad_frames

    g = torch.Generator().manual_seed(4)
    frames, padded = 70, 128
    x, mu, cond = (torch.randn(2, 80, frames, generator=g) for _ in range(3))
    mask, t, spks = torch.ones(2, 1, frames), torch.rand(2, generator=g), torch.randn(2, 80, generator=g)
    estimator = flow.decoder.estimator
    with torch.inference_mode():
        expected = estimator(x, mask, mu, t, spks, cond, streaming=streaming)
        padded_out = estimator(
            pad_frames(x + 0, padded) + 5.0 * (torch.arange(padded) >= frames),  # junk in the padding
            pad_frames(mask, padded),
            pad_frames(mu, padded),
            t,
            spks,
            pad_frames(cond, padded),
            streaming=streaming,
        )
        on_cpu = EstimatorGraphs(estimator)(x, mask, mu, t, spks, cond, streaming=streaming)  # eager fallback
    assert torch.allclose(padded_out[:, :, :frames], expected, atol=1e-5)
    assert torch.equal(on_cpu, expected)
