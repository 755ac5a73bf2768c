"""Audio features of the prompt, torch in and torch out (float32), on the input's device, without torchaudio.

- `kaldi_fbank`: Kaldi's 80-bin log fbank of 16 kHz audio (the speaker embedder's input), a port of
  `torchaudio.compliance.kaldi.fbank(num_mel_bins=80, dither=0, sample_frequency=16000)` with its defaults
  (25 ms povey window, 10 ms shift, pre-emphasis 0.97, DC removal, snip_edges, 512-point FFT, power spectrum).
- `whisper_log_mel`: Whisper's 128-bin log-mel of 16 kHz audio (the speech tokenizer's input).
- `flow_mel`: Matcha/HiFi-GAN log-mel of 24 kHz audio with the official yaml's `feat_extractor` parameters.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

KALDI_SAMPLE_RATE = 16000
WHISPER_N_FFT, WHISPER_HOP = 400, 160
FLOW_MEL = dict(n_fft=1920, num_mels=80, sampling_rate=24000, hop_size=480, win_size=1920, fmin=0, fmax=8000)


def _mono(wav: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(wav, torch.Tensor):
        raise TypeError(f"{name} expects a torch.Tensor waveform, got {type(wav).__name__}")
    if wav.dim() == 2 and wav.shape[0] == 1:
        wav = wav[0]
    if wav.dim() != 1:
        raise ValueError(f"{name} expects a mono waveform [N] or [1, N], got shape {tuple(wav.shape)}")
    return wav.float()


@lru_cache(maxsize=8)
def _kaldi_mel_banks(num_bins: int, padded_window: int, sample_rate: float, low_freq: float) -> torch.Tensor:
    """Kaldi's triangular mel banks [num_bins, padded_window // 2 + 1] (last column zero), as torchaudio builds them."""

    def mel(freq):
        return (
            1127.0 * (1.0 + freq / 700.0).log()
            if isinstance(freq, torch.Tensor)
            else 1127.0 * math.log(1.0 + freq / 700.0)
        )

    high_freq = 0.5 * sample_rate
    mel_low, mel_high = mel(low_freq), mel(high_freq)
    delta = (mel_high - mel_low) / (num_bins + 1)
    bins = torch.arange(num_bins).unsqueeze(1)
    left = mel_low + bins * delta
    center = mel_low + (bins + 1.0) * delta
    right = mel_low + (bins + 2.0) * delta
    fft_mel = mel(sample_rate / padded_window * torch.arange(padded_window / 2)).unsqueeze(0)
    up = (fft_mel - left) / (center - left)
    down = (right - fft_mel) / (right - center)
    banks = torch.max(torch.zeros(1), torch.min(up, down))
    return torch.nn.functional.pad(banks, (0, 1))


def kaldi_fbank(wav16k: torch.Tensor) -> torch.Tensor:
    """80-bin Kaldi log fbank of 16 kHz audio in [-1, 1] -> [T, 80], T = 1 + (N - 400) // 160."""
    wav = _mono(wav16k, "kaldi_fbank")
    window_size, window_shift, padded = 400, 160, 512
    if wav.numel() < window_size:
        raise ValueError(
            f"kaldi_fbank needs at least {window_size} samples (25 ms at 16 kHz), got {wav.numel()}"
        )
    frames = wav.unfold(0, window_size, window_shift)
    frames = frames - frames.mean(dim=1, keepdim=True)
    previous = torch.cat([frames[:, :1], frames[:, :-1]], dim=1)
    frames = frames - 0.97 * previous
    povey = torch.hann_window(window_size, periodic=False, device=wav.device, dtype=wav.dtype).pow(0.85)
    frames = torch.nn.functional.pad(frames * povey, (0, padded - window_size))
    power = torch.fft.rfft(frames).abs().pow(2.0)
    banks = _kaldi_mel_banks(80, padded, float(KALDI_SAMPLE_RATE), 20.0).to(wav.device)
    energies = torch.mm(power, banks.T)
    return energies.clamp_min(torch.finfo(torch.float32).eps).log()


@lru_cache(maxsize=8)
def mel_filters(sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float | None) -> torch.Tensor:
    """Slaney-scale, slaney-normalised mel filters [n_mels, n_fft // 2 + 1], as ``librosa.filters.mel``
    makes them by default (equal within 1e-8; checked in the parity tests), from transformers' audio utils
    so the runtime needs no librosa (and its numba, llvmlite and scikit-learn)."""
    from transformers.audio_utils import mel_filter_bank

    filters = mel_filter_bank(
        num_frequency_bins=n_fft // 2 + 1,
        num_mel_filters=n_mels,
        min_frequency=fmin,
        max_frequency=fmax if fmax is not None else sr / 2,
        sampling_rate=sr,
        norm="slaney",
        mel_scale="slaney",
    )
    return torch.from_numpy(filters.T.copy()).float()


def whisper_mel_filters(n_mels: int = 128) -> torch.Tensor:
    """Whisper's mel filterbank [n_mels, 201]: slaney filters for 16 kHz, n_fft 400."""
    return mel_filters(16000, WHISPER_N_FFT, n_mels, 0.0, None)


def whisper_log_mel(wav16k: torch.Tensor, n_mels: int = 128) -> torch.Tensor:
    """Whisper's log-mel spectrogram of 16 kHz audio -> [n_mels, N // 160] (clamped to 8 decades, scaled)."""
    wav = _mono(wav16k, "whisper_log_mel")
    if wav.numel() <= WHISPER_N_FFT // 2:
        raise ValueError(f"whisper_log_mel needs more than {WHISPER_N_FFT // 2} samples, got {wav.numel()}")
    window = torch.hann_window(WHISPER_N_FFT, device=wav.device)
    stft = torch.stft(wav, WHISPER_N_FFT, WHISPER_HOP, window=window, return_complex=True)
    power = stft[..., :-1].abs() ** 2
    log_spec = (whisper_mel_filters(n_mels).to(wav.device) @ power).clamp_min(1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


def flow_mel(wav24k: torch.Tensor, fmax: float | None = FLOW_MEL["fmax"]) -> torch.Tensor:
    """The flow's 80-bin log-mel of 24 kHz audio -> [1, 80, T], T = N // 480 (reflect-padded, center=False).

    ``fmax`` is the yaml's ``feat_extractor`` top frequency: 8000 for CosyVoice2, None (half the rate) for
    CosyVoice3."""
    wav = _mono(wav24k, "flow_mel")
    p = FLOW_MEL
    pad = (p["n_fft"] - p["hop_size"]) // 2
    if wav.numel() <= pad:
        raise ValueError(f"flow_mel needs more than {pad} samples at 24 kHz, got {wav.numel()}")
    wav = torch.nn.functional.pad(wav[None, None], (pad, pad), mode="reflect")[0]
    window = torch.hann_window(p["win_size"], device=wav.device)
    spec = torch.stft(
        wav,
        p["n_fft"],
        hop_length=p["hop_size"],
        win_length=p["win_size"],
        window=window,
        center=False,
        normalized=False,
        onesided=True,
        return_complex=True,
    )
    magnitude = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    top = None if fmax is None else float(fmax)
    basis = mel_filters(p["sampling_rate"], p["n_fft"], p["num_mels"], float(p["fmin"]), top)
    return torch.log(torch.clamp(basis.to(wav.device) @ magnitude, min=1e-5))
