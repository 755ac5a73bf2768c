"""HiFT's random draws made ahead (for CUDA-graph replay) give exactly the eager vocoder's waveform."""

from __future__ import annotations

import pytest
import torch

from studio.tts.hift.graphs import HiftGraphs
from studio.tts.hift.source import draw_source_noise
from tests.tts.test_flow_hift import make_hift


@pytest.fixture(scope="module")
def hift():
    torch.manual_seed(0)
    return make_hift()


@pytest.mark.parametrize("batch", [1, 2])
def test_noise_drawn_ahead_equals_drawing_inline(hift, batch):
    mel = torch.randn(batch, 80, 23, generator=torch.Generator().manual_seed(1))
    cache = torch.randn(batch, 1, 480, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        speech, source = hift.inference(mel, cache, torch.Generator().manual_seed(7))
        harmonics = hift.m_source.l_linear.in_features
        noise = draw_source_noise(batch, 23 * 480, harmonics, mel.device, torch.Generator().manual_seed(7))
        again, again_source = hift.vocode_eager(mel, cache, None, noise)
        unseeded = draw_source_noise(batch, 23 * 480, harmonics, mel.device, None)
        other, _ = hift.vocode_eager(mel, cache, None, unseeded)
    assert torch.equal(source, again_source)  # the same draws
    # the capturable inverse STFT (no host read-back) equals torch.istft up to float rounding
    assert float((again - speech).abs().max()) < 1e-5 * float(speech.abs().max())
    assert not torch.allclose(speech, other)  # the draws matter: a different stream changes the waveform


def test_graph_runner_without_a_gpu_vocodes_eagerly_with_the_same_stream(hift):
    mel = torch.randn(1, 80, 17, generator=torch.Generator().manual_seed(3))
    runner = HiftGraphs(hift)
    with torch.inference_mode():
        expected, _ = hift.inference(mel, None, torch.Generator().manual_seed(5))
        runner.enabled = False  # what a CPU tensor or a failed capture gets
        speech, source = runner.inference(mel, None, torch.Generator().manual_seed(5))
    assert torch.allclose(speech, expected, atol=1e-6) and source.shape == (1, 1, 17 * 480)
    assert runner.captures == 0
