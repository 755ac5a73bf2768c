"""HiFT's neural source: F0 -> harmonic sine excitation (upstream `SineGen2` / `SourceModuleHnNSF2`).

All randomness (initial harmonic phases, additive noise) is drawn from an optional `torch.Generator`, so
each request owns its random stream; the draws happen in upstream's order, so a generator seeded `s`
reproduces upstream after `torch.manual_seed(s)`. The source is computed in float32 whatever the
model's dtype: phase accumulation in half precision would drift audibly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


def _uniform(shape: tuple[int, ...], device: torch.device, generator: torch.Generator | None) -> torch.Tensor:
    """Uniform [0, 1) float32 noise on `device`, from `generator` when given."""
    if generator is None:
        return torch.rand(shape, device=device, dtype=torch.float32)
    return torch.rand(shape, generator=generator, device=generator.device, dtype=torch.float32).to(device)


def _normal_like(like: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Standard normal float32 noise shaped and strided like `like` (as randn_like fills it)."""
    if generator is None:
        return torch.randn_like(like, dtype=torch.float32)
    noise = torch.empty_like(like, dtype=torch.float32, device=generator.device).normal_(generator=generator)
    return noise.to(like.device)


@dataclass(frozen=True)
class SourceNoise:
    """Every random draw of one source computation, drawn ahead (`draw_source_noise`) so the rest of the
    computation is deterministic and can be captured as a CUDA graph."""

    phase: torch.Tensor  # [B, harmonics] uniform initial phases
    sine: torch.Tensor  # [B, N, harmonics] standard normal, laid out as the sine waves are
    unused: torch.Tensor  # [B, N, 1] upstream's unused noise branch (keeps the random stream aligned)


def draw_source_noise(
    batch: int, samples: int, harmonics: int, device: torch.device, generator: torch.Generator | None
) -> SourceNoise:
    """The draws `SourceModuleHnNSF2.forward` would make, in the same order and memory layout."""
    gen_device = generator.device if generator is not None else device

    def normal(channels: int) -> torch.Tensor:
        # [B, N, C] strided as [B, C, N] transposed, exactly like the tensors `_normal_like` copies: the
        # generator fills contiguous and strided tensors in different orders
        shape, strides = (batch, samples, channels), (channels * samples, 1, samples)
        noise = torch.empty_strided(shape, strides, dtype=torch.float32, device=gen_device)
        return noise.normal_(generator=generator)

    phase = _uniform((batch, harmonics), device, generator)
    sine = normal(harmonics)
    unused = normal(1)
    return SourceNoise(phase, sine.to(device), unused.to(device))


class SineGen2(nn.Module):
    """Sine waves at F0 and its harmonics, phase-integrated at frame rate then interpolated to samples."""

    def __init__(
        self,
        samp_rate: int,
        upsample_scale: int,
        harmonic_num: int = 0,
        sine_amp: float = 0.1,
        noise_std: float = 0.003,
        voiced_threshold: float = 0,
    ):
        super().__init__()
        self.sine_amp = sine_amp
        self.noise_std = noise_std
        self.harmonic_num = harmonic_num
        self.sampling_rate = samp_rate
        self.voiced_threshold = voiced_threshold
        self.upsample_scale = upsample_scale

    def _f02sine(
        self, f0_values: torch.Tensor, generator: torch.Generator | None, phase: torch.Tensor | None = None
    ) -> torch.Tensor:
        rad_values = (f0_values / self.sampling_rate) % 1
        if phase is None:
            phase = _uniform((f0_values.shape[0], f0_values.shape[2]), f0_values.device, generator)
        initial_phase = phase.clone()
        initial_phase[:, 0] = 0
        rad_values[:, 0, :] = rad_values[:, 0, :] + initial_phase
        rad_values = F.interpolate(
            rad_values.transpose(1, 2), scale_factor=1 / self.upsample_scale, mode="linear"
        ).transpose(1, 2)
        phase = torch.cumsum(rad_values, dim=1) * 2 * math.pi
        phase = F.interpolate(
            phase.transpose(1, 2) * self.upsample_scale, scale_factor=self.upsample_scale, mode="linear"
        ).transpose(1, 2)
        return torch.sin(phase)

    def forward(
        self, f0: torch.Tensor, generator: torch.Generator | None = None, noise: SourceNoise | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """f0 [B, N, 1] in Hz at sample rate -> (sine waves [B, N, harmonics+1], voiced flag [B, N, 1])."""
        harmonics = torch.arange(1, self.harmonic_num + 2, device=f0.device, dtype=torch.float32)
        phase = None if noise is None else noise.phase
        sine_waves = self._f02sine(f0 * harmonics.view(1, 1, -1), generator, phase) * self.sine_amp
        uv = (f0 > self.voiced_threshold).to(torch.float32)
        noise_amp = uv * self.noise_std + (1 - uv) * self.sine_amp / 3
        drawn = _normal_like(sine_waves, generator) if noise is None else noise.sine
        return sine_waves * uv + noise_amp * drawn, uv


class SourceModuleHnNSF2(nn.Module):
    """Merges the harmonics into one excitation signal with a linear layer and tanh (keys `l_linear`)."""

    def __init__(
        self,
        sampling_rate: int,
        upsample_scale: int,
        harmonic_num: int = 0,
        sine_amp: float = 0.1,
        add_noise_std: float = 0.003,
        voiced_threshod: float = 0,
    ):
        super().__init__()
        self.sine_amp = sine_amp
        self.l_sin_gen = SineGen2(
            sampling_rate, upsample_scale, harmonic_num, sine_amp, add_noise_std, voiced_threshod
        )
        self.l_linear = nn.Linear(harmonic_num + 1, 1)

    def forward(
        self, f0: torch.Tensor, generator: torch.Generator | None = None, noise: SourceNoise | None = None
    ) -> torch.Tensor:
        """f0 [B, N, 1] (Hz, per sample) -> excitation [B, N, 1] in float32 (`noise`: the draws, made ahead)."""
        with torch.autocast(device_type=f0.device.type, enabled=False):
            sine_waves, uv = self.l_sin_gen(f0.float(), generator, noise)
            merged = torch.tanh(
                F.linear(sine_waves, self.l_linear.weight.float(), self.l_linear.bias.float())
            )
            if noise is None:
                # upstream also draws a noise branch it never uses; drawing it keeps the random stream aligned
                _normal_like(uv, generator)
        return merged
