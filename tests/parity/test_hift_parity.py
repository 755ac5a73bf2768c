"""Parity of the HiFT vocoder with the reference on the same random weights and the same random draws."""

from __future__ import annotations

import pytest
import torch

from studio.tts.hift.model import ConvRNNF0Predictor, HiFTGenerator, load_hift_state_dict
from tests.parity.conftest import relative_error
from tests.tts.small_modules import F0_KWARGS, HIFT_KWARGS

pytestmark = pytest.mark.parity

TOLERANCE = 1e-4
FRAMES = 40


@pytest.fixture(scope="module")
def vocoders(reference):
    """Reference HiFT (seeded random weights, voiced F0 in part of the frames) and ours loaded from it."""
    from cosyvoice.hifigan.f0_predictor import ConvRNNF0Predictor as RefF0
    from cosyvoice.hifigan.generator import HiFTGenerator as RefHiFT

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(21)
        theirs = RefHiFT(**HIFT_KWARGS, f0_predictor=RefF0(**F0_KWARGS)).eval()
        with torch.no_grad():
            theirs.f0_predictor.classifier.bias.fill_(120.0)  # F0 around 120 Hz: mostly voiced
            for alpha in (p for n, p in theirs.named_parameters() if n.endswith("alpha")):
                alpha.uniform_(0.5, 1.5)
    ours = HiFTGenerator(**HIFT_KWARGS, f0_predictor=ConvRNNF0Predictor(**F0_KWARGS))
    ours.load_state_dict(theirs.state_dict(), strict=True)
    return theirs, ours.eval()


@pytest.fixture(scope="module")
def mel():
    mel = torch.randn(1, 80, FRAMES, generator=torch.Generator().manual_seed(3))
    mel[:, :, FRAMES // 2 :] *= 3.0  # louder second half: different F0, some frames unvoiced
    return mel


def _reference(theirs, mel, seed, cache_source=None):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if cache_source is None:
            return theirs.inference(mel)
        return theirs.inference(mel, cache_source=cache_source)


def test_waveform_and_source_match_reference_for_the_same_seed(vocoders, mel):
    theirs, ours = vocoders
    expected, expected_source = _reference(theirs, mel, seed=7)
    got, got_source = ours.inference(mel, generator=torch.Generator().manual_seed(7))
    assert got.shape == (1, 480 * FRAMES) and got_source.shape == (1, 1, 480 * FRAMES)
    assert relative_error(got_source, expected_source) <= TOLERANCE
    assert relative_error(got, expected) <= TOLERANCE
    f0 = ours.f0_predictor(mel)
    assert bool((f0 > 10).any()), "the test must exercise voiced frames"


def test_waveform_with_cache_source_matches_reference(vocoders, mel):
    theirs, ours = vocoders
    _, first_source = _reference(theirs, mel, seed=7)
    cache = first_source[:, :, -480 * 8 :]
    expected, expected_source = _reference(theirs, mel[:, :, 12:], seed=8, cache_source=cache)
    got, got_source = ours.inference(mel[:, :, 12:], cache, generator=torch.Generator().manual_seed(8))
    assert torch.equal(got_source[:, :, : cache.shape[2]], cache)
    assert relative_error(got_source, expected_source) <= TOLERANCE
    assert relative_error(got, expected) <= TOLERANCE


def test_fused_weights_from_prefixed_old_style_keys_match_reference(vocoders, mel):
    """An official-style hift.pt (`generator.` prefix, weight_g/weight_v) loads strictly and fuses exactly."""
    theirs, _ = vocoders
    old_style = {}
    for key, value in theirs.state_dict().items():
        key = key.replace(".parametrizations.weight.original0", ".weight_g")
        key = key.replace(".parametrizations.weight.original1", ".weight_v")
        old_style[f"generator.{key}"] = value
    fused = HiFTGenerator(**HIFT_KWARGS, f0_predictor=ConvRNNF0Predictor(**F0_KWARGS)).eval()
    load_hift_state_dict(fused, old_style)
    assert not any("parametrizations" in key for key in fused.state_dict())
    expected, _ = _reference(theirs, mel, seed=7)
    got, _ = fused.inference(mel, generator=torch.Generator().manual_seed(7))
    assert relative_error(got, expected) <= TOLERANCE
