"""CosyVoice3's streaming vocoder (studio.tts.cosyvoice3.hift_stream) against upstream's way of streaming:
re-running `CausalHiFTGenerator.inference` over all mel so far and keeping the samples after those returned."""

from __future__ import annotations

import pytest
import torch

from studio.tts.cosyvoice3.hift import CausalConvRNNF0Predictor, CausalHiFTGenerator
from studio.tts.cosyvoice3.hift_stream import CausalHiftStream, vocoder_look_back

SAMPLES_PER_FRAME = 480
FRAMES = 160


@pytest.fixture(scope="module")
def hift() -> CausalHiFTGenerator:
    """cosyvoice3.yaml's HiFT at 16 channels, with weights that reach every path: Snake slopes and biases
    moved, magnitudes well above silence, and F0 spread so that most frames are voiced and some are not."""
    torch.manual_seed(0)
    model = CausalHiFTGenerator(
        base_channels=16, f0_predictor=CausalConvRNNF0Predictor(cond_channels=16), noise_seconds=20
    ).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("alpha"):
                parameter.uniform_(0.5, 1.5, generator=generator)
            elif name.endswith("bias"):
                parameter.normal_(0.0, 0.02, generator=generator)
        model.conv_post.bias[: model.n_fft // 2 + 1] += 2.0
        classifier = model.f0_predictor.classifier
        classifier.bias.zero_()
        f0 = model.predict_f0(_mel(FRAMES))
        classifier.weight.mul_(150.0 / f0.pow(2).mean().sqrt())
    model.fuse_weight_norm()
    return model


def _mel(frames: int) -> torch.Tensor:
    return torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(3))


def _stream_against_rerun(hift: CausalHiFTGenerator, sizes: list[int], mel: torch.Tensor) -> float:
    """Push `sizes` frames at a time (the last push finalizes); after each push the samples returned so far
    must be upstream's re-run over the mel so far. Returns the largest difference."""
    stream = CausalHiftStream(hift)
    pushed, pieces, worst = 0, [], 0.0
    for index, size in enumerate(sizes):
        finalize = index == len(sizes) - 1
        pieces.append(stream.push(mel[:, :, pushed : pushed + size], finalize))
        pushed += size
        assert pieces[-1].dtype == torch.float32 and pieces[-1].dim() == 2
        streamed = torch.cat(pieces, dim=1)
        if pushed < hift.finalize_trim_frames and not finalize:
            assert streamed.shape == (1, 0)
            continue
        rerun, _ = hift.inference(mel[:, :, :pushed], finalize=finalize)
        assert streamed.shape == rerun.shape, f"after {pushed} frames"
        if rerun.numel():
            worst = max(worst, float((streamed - rerun).abs().max()))
    assert pushed == mel.shape[2]
    assert torch.cat(pieces, dim=1).shape == (1, mel.shape[2] * SAMPLES_PER_FRAME)
    assert stream.state_bytes == 0  # the finalizing push lets the take's state go
    return worst


SCHEDULES = {
    "one push": [FRAMES],
    "uneven": [37, 2, 50, 13, 58],
    "one-frame remainders": [1, 1, 1, 1, 1, 1, 1, 1, 1, 50, 1, 99, 1],
    "24 pushes": [3, 7, 5, 9, 4, 8, 6, 2, 10, 5, 7, 3, 9, 6, 8, 4, 5, 7, 6, 9, 8, 5, 7, 17],
    "empty pushes": [20, 0, 30, 0, 100, 10, 0],
    "long pushes": [120, 40],
}


@pytest.mark.parametrize("sizes", SCHEDULES.values(), ids=SCHEDULES.keys())
def test_stream_equals_upstreams_rerun(hift, sizes):
    assert sum(sizes) == FRAMES
    worst = _stream_against_rerun(hift, sizes, _mel(FRAMES))
    assert worst <= 1e-4, worst


def test_the_waveform_is_not_trivial(hift):
    """The comparisons above mean something: the waveform is audible, and F0 voiced in part."""
    mel = _mel(FRAMES)
    speech, _ = hift.inference(mel)
    voiced = float((hift.predict_f0(mel) > 10).float().mean())
    assert 0.5 < voiced < 1.0, voiced
    assert 0.05 < float(speech.abs().max()) < 0.99


def test_work_per_push_does_not_grow_with_the_take(hift, monkeypatch):
    """Over 60 pushes of 10 frames the generator and the F0 predictor run on the same number of frames at
    every push once the take is longer than the left context, the state stays the same size, and the source
    draws at most one new second of its fixed noise per push (never the table from its start again)."""
    chunk, pushes = 10, 60
    mel = torch.randn(1, 80, chunk * pushes, generator=torch.Generator().manual_seed(5))
    rand = torch.rand
    drawn: list[int] = []

    def counting_rand(*args, **kwargs):
        values = rand(*args, **kwargs)
        drawn.append(values.numel())
        return values

    monkeypatch.setattr(torch, "rand", counting_rand)
    stream = CausalHiftStream(hift)
    network, f0, state, noise = [], [], [], []
    for index in range(pushes):
        drawn.clear()
        stream.push(mel[:, :, index * chunk : (index + 1) * chunk], index == pushes - 1)
        network.append(stream.last_network_frames)
        f0.append(stream.last_f0_frames)
        state.append(stream.state_bytes)
        noise.append(sum(drawn))
    assert max(noise) <= hift.sampling_rate * hift.m_source.harmonics
    assert (
        sum(noise) >= (chunk * pushes * SAMPLES_PER_FRAME - 4 * hift.sampling_rate) * 9
    )  # drawn, not reused
    warm = (stream.look_back + hift.finalize_trim_frames) // chunk + 2
    steady = slice(warm, pushes - 1)  # the finalizing push runs the 3 look-right frames more
    # new frames, the left context, and the 5 frames of look-right conv_pre and the iSTFT leave open
    assert set(network[steady]) == {chunk + stream.look_back + hift.conv_pre_look_right + 1}
    assert set(f0[steady]) == {chunk + hift.f0_predictor.look_back + hift.f0_predictor.look_right}
    assert len(set(state[steady])) == 1
    assert max(network) <= chunk + stream.look_back + hift.finalize_trim_frames


def test_left_context_covers_the_receptive_field(hift, monkeypatch):
    """cosyvoice3.yaml's generator reaches 29 mel frames back (its widest path: level 0's source branch);
    a stream given much less context no longer matches the re-run."""
    assert vocoder_look_back(hift) == 29
    monkeypatch.setattr("studio.tts.cosyvoice3.hift_stream.vocoder_look_back", lambda _: 5)
    sizes = [20] * (FRAMES // 20)
    assert _stream_against_rerun(hift, sizes, _mel(FRAMES)) > 1e-3


def test_f0_is_predicted_in_float64_whatever_the_model_was_cast_to():
    """The sine source sums F0 over the take, so F0 is predicted in float64 (as upstream) even after the
    model was cast: chunk and take then round it to the same float32 values."""
    model = CausalHiFTGenerator(base_channels=16, f0_predictor=CausalConvRNNF0Predictor(cond_channels=16))
    assert model.f0_predictor.classifier.weight.dtype == torch.float64
    model.float()
    mel = _mel(20)
    with torch.inference_mode():
        f0 = model.predict_f0(mel)
    assert model.f0_predictor.classifier.weight.dtype == torch.float64
    assert f0.dtype == torch.float32
    assert torch.equal(f0, model.f0_predictor(mel.double()).float())


def test_an_empty_take_and_misuse(hift):
    stream = CausalHiftStream(hift)
    assert stream.push(torch.zeros(1, 80, 0), finalize=True).shape == (1, 0)
    with pytest.raises(RuntimeError, match="finalized"):
        stream.push(torch.zeros(1, 80, 5), finalize=True)
    stream = CausalHiftStream(hift)
    with pytest.raises(ValueError, match=r"mel must be \[1, 80, frames\]"):
        stream.push(torch.zeros(2, 80, 5), finalize=False)
    stream.push(_mel(30), finalize=False)
    assert stream.state_bytes > 0
    stream.close()
    assert stream.state_bytes == 0
    with pytest.raises(RuntimeError, match="closed"):
        stream.push(_mel(5), finalize=True)


def test_the_source_stays_float32_when_the_model_is_cast_to_half():
    """Upstream keeps its noise table a plain float32 tensor; a half-precision model reads the same noise."""
    model = CausalHiFTGenerator(
        base_channels=16, f0_predictor=CausalConvRNNF0Predictor(cond_channels=16), noise_seconds=2
    )
    f0 = torch.full((1, 3), 120.0)
    with torch.inference_mode():
        before = model.m_source(f0)
        noise = model.m_source.noise.clone()
        model.half()
        after = model.m_source(f0)
    assert model.m_source.noise.dtype == torch.float32 and torch.equal(model.m_source.noise, noise)
    assert after.dtype == torch.float32
    assert float((after - before).abs().max()) < 1e-2  # only l_linear's weights were rounded to half


def test_noise_drawn_later_follows_the_table_to_the_models_device():
    """A stream on a GPU draws its noise a second at a time: the seconds drawn after the table moved to the device
    join it there (meta stands in for CUDA: torch.cat refuses to mix it with the CPU, as it refuses cuda with cpu)."""
    from studio.tts.cosyvoice3.hift import CausalSineSource

    source = CausalSineSource(24000, 480, 8, 0.1, 0.003, 10.0, noise_samples=24000 * 5, noise_seed=1)
    meta = torch.device("meta")
    assert source._noise_at(0, 24000, meta).device == meta
    later = source._noise_at(12000, 36000, meta)
    assert later.device == meta and later.shape == (1, 36000, 9)
