"""Parity of the prompt features with the reference code: Kaldi fbank, Whisper log-mel, the flow's mel."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from studio.tts.frontend import features
from tests.parity.conftest import relative_error

pytestmark = pytest.mark.parity


def _speechlike(sample_rate: int, seconds: float, seed: int) -> torch.Tensor:
    """Harmonics with a wobbling pitch, a syllable envelope and a little noise, peak ~0.6."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(sample_rate * seconds)) / sample_rate
    pitch = 140 + 30 * np.sin(2 * np.pi * 1.3 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / sample_rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 3.0 * t) ** 2
    wav = 0.15 * voice * envelope + 0.01 * rng.standard_normal(t.size)
    return torch.from_numpy(wav.astype(np.float32))


@pytest.mark.parametrize("seconds", [1.37, 0.5])
def test_kaldi_fbank_matches_torchaudio_compliance(reference, seconds):
    import torchaudio.compliance.kaldi as kaldi

    wav = _speechlike(16000, seconds, seed=1)
    theirs = kaldi.fbank(wav.unsqueeze(0), num_mel_bins=80, dither=0, sample_frequency=16000)
    ours = features.kaldi_fbank(wav)
    assert ours.dtype == torch.float32 and ours.shape == (1 + (wav.numel() - 400) // 160, 80)
    assert relative_error(ours, theirs) <= 1e-4


def test_whisper_filters_equal_whisper_assets(reference):
    with np.load(reference / "whisper" / "assets" / "mel_filters.npz") as assets:
        theirs = torch.from_numpy(assets["mel_128"])
    assert relative_error(features.whisper_mel_filters(128), theirs) <= 1e-6


@pytest.mark.parametrize(
    ("sr", "n_fft", "n_mels", "fmin", "fmax"), [(16000, 400, 128, 0.0, None), (24000, 1920, 80, 0.0, 8000.0)]
)
def test_mel_filters_equal_librosas(sr, n_fft, n_mels, fmin, fmax):
    """The runtime makes its filters without librosa (a test-only dependency): they must be librosa's."""
    librosa = pytest.importorskip("librosa")
    theirs = torch.from_numpy(librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax))
    assert relative_error(features.mel_filters(sr, n_fft, n_mels, fmin, fmax), theirs) <= 1e-6


def test_whisper_log_mel_matches_whisper(reference):
    import whisper

    wav = _speechlike(16000, 1.37, seed=2)
    theirs = whisper.log_mel_spectrogram(wav, n_mels=128)
    ours = features.whisper_log_mel(wav)
    assert ours.shape == (128, wav.numel() // 160)
    assert relative_error(ours, theirs) <= 1e-4


@pytest.mark.parametrize("fmax", [8000, None])  # cosyvoice2.yaml's feat_extractor, cosyvoice3.yaml's
def test_flow_mel_matches_matcha_with_official_feat_extractor(reference, fmax):
    from matcha.utils.audio import mel_spectrogram

    wav = _speechlike(24000, 1.37, seed=3).unsqueeze(0)
    theirs = mel_spectrogram(
        wav,
        n_fft=1920,
        num_mels=80,
        sampling_rate=24000,
        hop_size=480,
        win_size=1920,
        fmin=0,
        fmax=fmax,
        center=False,
    )
    ours = features.flow_mel(wav, fmax)
    assert ours.shape == (1, 80, wav.shape[1] // 480)
    assert relative_error(ours, theirs) <= 1e-4


def test_features_reject_bad_input():
    with pytest.raises(ValueError, match="mono"):
        features.kaldi_fbank(torch.zeros(2, 16000))
    with pytest.raises(ValueError, match="at least 400"):
        features.kaldi_fbank(torch.zeros(100))
    with pytest.raises(TypeError, match="torch.Tensor"):
        features.flow_mel(np.zeros(24000, dtype=np.float32))
