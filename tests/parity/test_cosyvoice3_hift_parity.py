"""Our CosyVoice3 vocoder (studio.tts.cosyvoice3.hift) against the reference's CausalHiFTGenerator.

Both take the same random weights (the reference's state dict, upstream's `hift.pt` layout, loaded into ours
strictly), the same fixed source noise (the reference draws its noise table at construction; ours is given
it) and the same mel; the waveforms must agree to 1e-4 in fp32, with and without `finalize`, whole and
streamed. The reference's F0 predictor runs in float64 here, as upstream's does (vllm-omni's port runs it in
float32 on the CPU). The reference's extra streaming arguments of `inference` (`phase_acc`, `uv_offset`,
`next_overlap`, `trim`, `f0_margin`) stay at their defaults, where its call is upstream's: the random initial
phases are added (phase_acc None), the noise is read from the take's first sample, `next_overlap` and `trim`
shape only the phase it returns, and an `f0_margin` of 0 drops nothing.
"""

from __future__ import annotations

import time

import pytest
import torch

from studio.tts.cosyvoice3.hift import CausalConvRNNF0Predictor, CausalHiFTGenerator
from studio.tts.cosyvoice3.hift_stream import CausalHiftStream
from studio.tts.hift.model import load_hift_state_dict

pytestmark = pytest.mark.parity

SAMPLES_PER_MEL_FRAME = 480
FRAMES = 100  # 2 s of mel
#: cosyvoice3.yaml's hift, but for the channel widths (small: 32 / 32; official: 512 / 512).
HIFT_CONFIG = {
    "in_channels": 80,
    "nb_harmonics": 8,
    "sampling_rate": 24000,
    "nsf_alpha": 0.1,
    "nsf_sigma": 0.003,
    "nsf_voiced_threshold": 10,
    "upsample_rates": [8, 5, 3],
    "upsample_kernel_sizes": [16, 11, 7],
    "istft_params": {"n_fft": 16, "hop_len": 4},
    "resblock_kernel_sizes": [3, 7, 11],
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "source_resblock_kernel_sizes": [7, 7, 11],
    "source_resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "lrelu_slope": 0.1,
    "audio_limit": 0.99,
    "conv_pre_look_right": 4,
}


def _reference_hift(channels: int) -> torch.nn.Module:
    """The reference's generator with random weights that reach every path: Snake slopes and biases away
    from their initial values, and an F0 predictor whose output crosses the 10 Hz voicing threshold."""
    from vllm_omni.model_executor.models.cosyvoice3.code2wav_core import hifigan

    torch.manual_seed(0)
    hift = hifigan.CausalHiFTGenerator(
        base_channels=channels,
        f0_predictor=hifigan.CausalConvRNNF0Predictor(num_class=1, in_channels=80, cond_channels=channels),
        **HIFT_CONFIG,
    ).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in hift.named_parameters():
            if name.endswith("alpha"):
                parameter.uniform_(0.5, 1.5, generator=generator)
            elif name.endswith("bias"):
                parameter.normal_(0.0, 0.02, generator=generator)
        # log-magnitude bins raised so the waveform peaks well above silence (over 0.05) yet below the clamp
        hift.conv_post.bias[: HIFT_CONFIG["istft_params"]["n_fft"] // 2 + 1] += 2.0
        # F0 = |classifier(features)|: scaled to a spread of 30 Hz over the test's mel, so that about 3 frames
        # in 4 are voiced (above 10 Hz) and the rest are not
        classifier = hift.f0_predictor.classifier
        classifier.bias.zero_()
        f0 = hift.f0_predictor(_mel(FRAMES))
        classifier.weight.mul_(30.0 / f0.pow(2).mean().sqrt())
    _predict_f0_in_float64(hift.f0_predictor)
    return hift


def _predict_f0_in_float64(predictor: torch.nn.Module) -> None:
    """Upstream's `CausalHiFTGenerator.inference` runs its F0 predictor in float64 and casts F0 back."""
    predictor.double()
    forward = predictor.forward
    predictor.forward = lambda mel, finalize=True: forward(mel.double(), finalize=finalize).float()


def _ours_from(reference: torch.nn.Module, channels: int, *, fuse: bool) -> CausalHiFTGenerator:
    ours = CausalHiFTGenerator(
        base_channels=channels,
        f0_predictor=CausalConvRNNF0Predictor(num_class=1, in_channels=80, cond_channels=channels),
        **HIFT_CONFIG,
    ).eval()
    # Upstream's file prefixes every key with `generator.`; the reference's state dict is its layout.
    state = {f"generator.{key}": value for key, value in reference.state_dict().items()}
    load_hift_state_dict(ours, state, fuse=fuse)
    sine_gen = reference.m_source.l_sin_gen
    ours.m_source.set_noise(sine_gen.sine_waves)
    return ours


def _mel(frames: int) -> torch.Tensor:
    return torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(3))


def _compare(channels: int, *, fuse: bool = True, finalize: bool = True) -> dict[str, float]:
    reference = _reference_hift(channels)
    ours = _ours_from(reference, channels, fuse=fuse)
    mel = _mel(FRAMES)
    with torch.inference_mode():
        f0 = reference.f0_predictor(mel)
        started = time.perf_counter()
        theirs, their_source, _ = reference.inference(speech_feat=mel, finalize=finalize)
        reference_seconds = time.perf_counter() - started
        started = time.perf_counter()
        speech, source = ours.inference(mel, finalize=finalize)
        our_seconds = time.perf_counter() - started
    voiced = float((f0 > HIFT_CONFIG["nsf_voiced_threshold"]).float().mean())
    assert 0.2 < voiced < 0.9, f"the test's F0 should be voiced in part, is voiced in {voiced:.0%}"
    # without finalize: the F0 predictor's 3 frames of look-right, conv_pre's 4 and one the iSTFT leaves open
    frames = FRAMES if finalize else FRAMES - 8
    assert speech.shape == (1, frames * SAMPLES_PER_MEL_FRAME) and speech.dtype == torch.float32
    assert source.shape == their_source.shape
    assert 0.05 < float(theirs.abs().max()) < HIFT_CONFIG["audio_limit"], (
        "the waveform should be audible, not clipped"
    )
    assert float((source - their_source).abs().max()) <= 1e-5
    return {
        "error": float((speech - theirs).abs().max()),
        "reference_seconds": reference_seconds,
        "our_seconds": our_seconds,
    }


@pytest.mark.parametrize("finalize", [True, False], ids=["finalize", "prefix"])
@pytest.mark.parametrize("fuse", [False, True], ids=["weight-normed", "fused"])
def test_small_causal_hift_matches_reference(cosyvoice3_reference, fuse, finalize):
    result = _compare(channels=32, fuse=fuse, finalize=finalize)
    assert result["error"] <= 1e-4, result


@pytest.mark.parametrize("finalize", [True, False], ids=["finalize", "prefix"])
def test_official_causal_hift_matches_reference(cosyvoice3_reference, record_property, finalize):
    """cosyvoice3.yaml's shapes (512 channels) on 2 s of mel, weight norm fused as the loader leaves it."""
    result = _compare(channels=512, finalize=finalize)
    for key, value in result.items():
        record_property(key, value)
    print(f"official causal HiFT, 100 mel frames, finalize={finalize}: {result}")
    assert result["error"] <= 1e-4, result


def test_stream_matches_the_references_rerun(cosyvoice3_reference):
    """Upstream streams by re-running HiFT over all mel so far and keeping the samples after those already
    returned; our stream, which runs only the new frames and a bounded context, gives the same samples."""
    reference = _reference_hift(32)
    ours = _ours_from(reference, 32, fuse=True)
    mel = _mel(FRAMES)
    stream = CausalHiftStream(ours)
    pushed, returned, worst = 0, 0, 0.0
    with torch.inference_mode():
        for size in (9, 25, 1, 30, 2, 33):  # 100 frames; the last push finalizes
            pushed += size
            finalize = pushed == FRAMES
            chunk = stream.push(mel[:, :, pushed - size : pushed], finalize)
            theirs, _, _ = reference.inference(speech_feat=mel[:, :, :pushed], finalize=finalize)
            assert chunk.shape[1] == theirs.shape[1] - returned
            returned = theirs.shape[1]
            if chunk.shape[1]:
                worst = max(worst, float((chunk - theirs[:, -chunk.shape[1] :]).abs().max()))
    assert returned == FRAMES * SAMPLES_PER_MEL_FRAME
    assert worst <= 1e-4, worst


def test_loads_upstream_keys_strictly_and_refuses_foreign_ones(cosyvoice3_reference):
    reference = _reference_hift(32)
    ours = _ours_from(reference, 32, fuse=False)
    assert set(ours.state_dict()) == set(reference.state_dict())
    state = dict(reference.state_dict())
    state["conv_pre.extra"] = torch.zeros(1)
    with pytest.raises(ValueError, match="unexpected"):
        load_hift_state_dict(ours, state)
    del state["conv_pre.extra"], state["f0_predictor.classifier.bias"]
    with pytest.raises(ValueError, match="missing"):
        load_hift_state_dict(ours, state)


def test_loads_the_old_weight_norm_layout(cosyvoice3_reference):
    """A hift.pt saved with torch's old weight norm names its halves `weight_g` / `weight_v`."""
    reference = _reference_hift(32)
    old_style = {
        f"generator.{key}".replace("parametrizations.weight.original0", "weight_g").replace(
            "parametrizations.weight.original1", "weight_v"
        ): value
        for key, value in reference.state_dict().items()
    }
    assert any(key.endswith(".weight_g") for key in old_style)
    ours = _ours_from(reference, 32, fuse=True)
    from_old = CausalHiFTGenerator(
        base_channels=32, f0_predictor=CausalConvRNNF0Predictor(cond_channels=32), **HIFT_CONFIG
    ).eval()
    load_hift_state_dict(from_old, old_style)
    sine_gen = reference.m_source.l_sin_gen
    from_old.m_source.set_noise(sine_gen.sine_waves)
    mel = _mel(FRAMES)
    assert torch.equal(from_old.inference(mel)[0], ours.inference(mel)[0])


def test_refuses_a_mel_of_the_wrong_shape():
    ours = CausalHiFTGenerator(
        base_channels=16, f0_predictor=CausalConvRNNF0Predictor(cond_channels=16), noise_seconds=1
    )
    with pytest.raises(ValueError, match="mel must be"):
        ours.inference(torch.zeros(1, 40, 10))
    with pytest.raises(ValueError, match="no frames"):
        ours.inference(torch.zeros(1, 80, 0))
    with pytest.raises(ValueError, match="noise table"):
        ours.inference(torch.zeros(1, 80, 51))  # 51 frames: 24 480 samples, over 1 s
    with pytest.raises(ValueError, match="at least 8 frames"):
        ours.inference(torch.zeros(1, 80, 7), finalize=False)
    assert ours.inference(torch.zeros(1, 80, 8), finalize=False)[0].shape == (1, 0)


def test_fixed_noise_is_drawn_as_far_as_needed_and_the_same_at_every_length():
    """A sample's noise depends on its position only: a longer take's table starts with a shorter one's."""
    ours = CausalHiFTGenerator(
        base_channels=16, f0_predictor=CausalConvRNNF0Predictor(cond_channels=16), noise_seconds=3
    )
    unvoiced = torch.zeros(1, 2)  # 2 frames below the voicing threshold: the source is the fixed noise
    short = ours.m_source(unvoiced)
    assert ours.m_source.noise.shape[1] == 24000  # one second drawn, not the three allowed
    longer = ours.m_source(torch.zeros(1, 101))  # over 2 s
    assert ours.m_source.noise.shape[1] == 72000
    assert torch.equal(short, longer[:, :, : 2 * SAMPLES_PER_MEL_FRAME])
    again = CausalHiFTGenerator(
        base_channels=16, f0_predictor=CausalConvRNNF0Predictor(cond_channels=16), noise_seconds=3
    )
    again.m_source(unvoiced)
    assert torch.equal(again.m_source.noise, ours.m_source.noise[:, :24000])  # the same seed, the same noise
    # a chunk of frames later in the take reads the noise at its own samples
    assert torch.equal(
        ours.m_source.excitation(torch.zeros(1, 2), torch.zeros(1, 2, 9, dtype=torch.float64), 99),
        longer[:, :, 99 * SAMPLES_PER_MEL_FRAME :],
    )
