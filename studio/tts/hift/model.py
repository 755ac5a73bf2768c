"""HiFT vocoder: 80-bin mel at 50 Hz -> 24 kHz waveform (neural source filter + iSTFTNet), as upstream.

`load_hift_state_dict` loads any official `hift.pt` layout strictly and then fuses weight norm away.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm

from studio.tts.hift.source import SourceModuleHnNSF2, SourceNoise, draw_source_noise


def get_padding(kernel_size: int, dilation: int = 1) -> int:
    return int((kernel_size * dilation - dilation) / 2)


class Snake(nn.Module):
    """Snake activation x + sin^2(alpha x) / alpha with a learned per-channel alpha (key `alpha`)."""

    def __init__(self, in_features: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(in_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha.unsqueeze(0).unsqueeze(-1)
        return x + (1.0 / (alpha + 1e-9)) * torch.sin(x * alpha).pow(2)


class ResBlock(nn.Module):
    """HiFi-GAN residual block with Snake activations and weight-normalised dilated convolutions."""

    def __init__(
        self, channels: int = 512, kernel_size: int = 3, dilations: list[int] | tuple[int, ...] = (1, 3, 5)
    ):
        super().__init__()
        self.convs1 = nn.ModuleList(
            weight_norm(
                nn.Conv1d(channels, channels, kernel_size, 1, dilation=d, padding=get_padding(kernel_size, d))
            )
            for d in dilations
        )
        self.convs2 = nn.ModuleList(
            weight_norm(nn.Conv1d(channels, channels, kernel_size, 1, padding=get_padding(kernel_size, 1)))
            for _ in dilations
        )
        self.activations1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv1, conv2, act1, act2 in zip(
            self.convs1, self.convs2, self.activations1, self.activations2, strict=True
        ):
            x = conv2(act2(conv1(act1(x)))) + x
        return x


class ConvRNNF0Predictor(nn.Module):
    """Predicts F0 (Hz) per mel frame with five weight-normalised convolutions and a linear classifier."""

    def __init__(self, num_class: int = 1, in_channels: int = 80, cond_channels: int = 512):
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(5):
            layers += [
                weight_norm(nn.Conv1d(in_channels if i == 0 else cond_channels, cond_channels, 3, padding=1)),
                nn.ELU(),
            ]
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(cond_channels, num_class)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """mel [B, 80, T] -> F0 [B, T]."""
        return torch.abs(self.classifier(self.condnet(x).transpose(1, 2)).squeeze(-1))


class HiFTGenerator(nn.Module):
    """HiFTNet generator: mel -> F0 -> sine source; mel + source STFT -> magnitude/phase -> iSTFT."""

    def __init__(
        self,
        in_channels: int = 80,
        base_channels: int = 512,
        nb_harmonics: int = 8,
        sampling_rate: int = 22050,
        nsf_alpha: float = 0.1,
        nsf_sigma: float = 0.003,
        nsf_voiced_threshold: float = 10,
        upsample_rates: list[int] = (8, 8),
        upsample_kernel_sizes: list[int] = (16, 16),
        istft_params: Mapping[str, int] | None = None,
        resblock_kernel_sizes: list[int] = (3, 7, 11),
        resblock_dilation_sizes: list[list[int]] = ((1, 3, 5), (1, 3, 5), (1, 3, 5)),
        source_resblock_kernel_sizes: list[int] = (7, 11),
        source_resblock_dilation_sizes: list[list[int]] = ((1, 3, 5), (1, 3, 5)),
        lrelu_slope: float = 0.1,
        audio_limit: float = 0.99,
        f0_predictor: nn.Module | None = None,
    ):
        super().__init__()
        if f0_predictor is None:
            raise ValueError("HiFTGenerator needs an f0_predictor module")
        self.graphs = (
            None  # CUDA-graph replay of `inference` (hift/graphs.py), attached by the loader on CUDA
        )
        if sampling_rate == 22050:
            raise ValueError("HiFTGenerator: the 22.05 kHz (CosyVoice 1) source module is not supported")
        istft_params = dict(istft_params or {"n_fft": 16, "hop_len": 4})
        upsample_rates = list(upsample_rates)
        self.sampling_rate = sampling_rate
        self.n_fft = int(istft_params["n_fft"])
        self.hop_len = int(istft_params["hop_len"])
        self.lrelu_slope = lrelu_slope
        self.audio_limit = audio_limit
        self.num_kernels = len(resblock_kernel_sizes)
        self.num_upsamples = len(upsample_rates)
        self.upsample_scale = int(np.prod(upsample_rates)) * self.hop_len  # waveform samples per mel frame
        self.m_source = SourceModuleHnNSF2(
            sampling_rate, self.upsample_scale, nb_harmonics, nsf_alpha, nsf_sigma, nsf_voiced_threshold
        )
        self.conv_pre = weight_norm(nn.Conv1d(in_channels, base_channels, 7, 1, padding=3))
        self.ups = nn.ModuleList(
            weight_norm(
                nn.ConvTranspose1d(
                    base_channels // 2**i, base_channels // 2 ** (i + 1), k, u, padding=(k - u) // 2
                )
            )
            for i, (u, k) in enumerate(zip(upsample_rates, upsample_kernel_sizes, strict=False))
        )
        self.source_downs = nn.ModuleList()
        self.source_resblocks = nn.ModuleList()
        cum_rates = np.cumprod([1] + upsample_rates[::-1][:-1])[::-1]
        for i, (u, k, d) in enumerate(
            zip(cum_rates, source_resblock_kernel_sizes, source_resblock_dilation_sizes, strict=False)
        ):
            ch = base_channels // 2 ** (i + 1)
            u = int(u)
            down = (
                nn.Conv1d(self.n_fft + 2, ch, 1, 1)
                if u == 1
                else nn.Conv1d(self.n_fft + 2, ch, u * 2, u, padding=u // 2)
            )
            self.source_downs.append(down)
            self.source_resblocks.append(ResBlock(ch, k, d))
        self.resblocks = nn.ModuleList(
            ResBlock(base_channels // 2 ** (i + 1), k, d)
            for i in range(self.num_upsamples)
            for k, d in zip(resblock_kernel_sizes, resblock_dilation_sizes, strict=False)
        )
        self.conv_post = weight_norm(
            nn.Conv1d(base_channels // 2**self.num_upsamples, self.n_fft + 2, 7, 1, padding=3)
        )
        self.reflection_pad = nn.ReflectionPad1d((1, 0))
        self.f0_predictor = f0_predictor
        self._windows: dict[torch.device, torch.Tensor] = {}

    def fuse_weight_norm(self) -> None:
        """Replace every weight-norm parametrisation by its computed weight (faster; call after loading)."""
        for module in self.modules():
            if parametrize.is_parametrized(module, "weight"):
                parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)

    def _window(self, device: torch.device) -> torch.Tensor:
        window = self._windows.get(device)
        if window is None:
            hann = torch.hann_window(self.n_fft, periodic=True, dtype=torch.float64)
            window = self._windows[device] = hann.to(device=device, dtype=torch.float32)
        return window

    def _stft(self, x: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(
            x.float(),
            self.n_fft,
            self.hop_len,
            self.n_fft,
            window=self._window(x.device),
            return_complex=True,
        )
        return torch.cat([spec.real, spec.imag], dim=1)

    def _istft(self, magnitude: torch.Tensor, phase: torch.Tensor, graph_safe: bool = False) -> torch.Tensor:
        magnitude = torch.clip(magnitude, max=1e2)
        spec = torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase))
        window = self._window(magnitude.device)
        if not graph_safe:
            return torch.istft(spec, self.n_fft, self.hop_len, self.n_fft, window=window)
        # torch.istft's own window check reads a value back to the host, which a CUDA graph cannot hold:
        # the same inverse (centred, one-sided, window overlap-add) by hand; equal up to float rounding
        frames = torch.fft.irfft(spec, n=self.n_fft, dim=1) * window[:, None]  # [B, n_fft, F]
        count = frames.shape[2]
        length = self.n_fft + self.hop_len * (count - 1)

        def overlap_add(x: torch.Tensor) -> torch.Tensor:
            folded = F.fold(x, output_size=(1, length), kernel_size=(1, self.n_fft), stride=(1, self.hop_len))
            return folded.reshape(x.shape[0], length)

        envelope = overlap_add((window * window)[None, :, None].expand(1, -1, count))
        half = self.n_fft // 2
        return overlap_add(frames)[:, half : length - half] / envelope[:, half : length - half]

    def decode(self, x: torch.Tensor, source: torch.Tensor, graph_safe: bool = False) -> torch.Tensor:
        """mel [B, 80, T] and excitation [B, 1, N] -> waveform [B, N] clamped to +-audio_limit."""
        return self.waveform(self.spectrum(x, self._stft(source.squeeze(1))), graph_safe)

    def waveform(self, spectrum: torch.Tensor, graph_safe: bool = False) -> torch.Tensor:
        """`spectrum`'s output [B, n_fft + 2, S] -> waveform [B, hop * (S - 1)] clamped to +-audio_limit."""
        bins = self.n_fft // 2 + 1
        audio = self._istft(torch.exp(spectrum[:, :bins, :]), torch.sin(spectrum[:, bins:, :]), graph_safe)
        return torch.clamp(audio, -self.audio_limit, self.audio_limit)

    def spectrum(self, x: torch.Tensor, s_stft: torch.Tensor) -> torch.Tensor:
        """`decode`'s network between the two STFTs: mel [B, 80, T] and the excitation's STFT [B, n_fft + 2, S]
        -> conv_post's output [B, n_fft + 2, S] float32 (log magnitudes, then phases)."""
        x = self.conv_pre(x)
        s_stft = s_stft.to(x.dtype)
        for i in range(self.num_upsamples):
            x = self.ups[i](F.leaky_relu(x, self.lrelu_slope))
            if i == self.num_upsamples - 1:
                x = self.reflection_pad(x)
            x = x + self.source_resblocks[i](self.source_downs[i](s_stft))
            blocks = self.resblocks[i * self.num_kernels : (i + 1) * self.num_kernels]
            xs = blocks[0](x)
            for block in blocks[1:]:
                xs = xs + block(x)
            x = xs / self.num_kernels
        return self.conv_post(F.leaky_relu(x)).float()

    @torch.inference_mode()
    def inference(
        self,
        speech_feat: torch.Tensor,
        cache_source: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """mel [B, 80, T] -> (speech [B, 480*T] float32, source [B, 1, 480*T] for the next chunk's cache).

        `cache_source` (the previous call's source tail) replaces the start of the new source so chunk
        edges join without glitches; randomness comes from `generator` when given.
        """
        graphs = self.graphs
        if graphs is not None and speech_feat.is_cuda:
            return graphs.inference(speech_feat, cache_source, generator)
        return self.vocode_eager(speech_feat, cache_source, generator)

    @torch.inference_mode()
    def inference_rows(
        self,
        speech_feat: torch.Tensor,
        cache_source: torch.Tensor,
        generators: list[torch.Generator | None],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`inference` of B independent chunks at once, each drawing from its own generator: row i equals
        `inference` of row i alone with `generators[i]` up to float rounding (other kernels for another
        batch size; eagerly, the inverse STFT computed by hand). cache_source [B, 1, S]; rows past
        `generators` are padding (they repeat the first row's draws)."""
        samples = speech_feat.shape[2] * int(self.upsample_scale)
        harmonics = self.m_source.l_linear.in_features
        draws = [draw_source_noise(1, samples, harmonics, speech_feat.device, g) for g in generators]
        draws += draws[:1] * (speech_feat.shape[0] - len(draws))  # rows beyond the generators: padding
        noise = SourceNoise(
            *(torch.cat([getattr(d, name) for d in draws]) for name in ("phase", "sine", "unused"))
        )
        graphs = self.graphs
        if graphs is not None and speech_feat.is_cuda:
            return graphs.vocode(speech_feat, cache_source, noise)
        return self.vocode_eager(speech_feat, cache_source, None, noise)

    def vocode_eager(
        self,
        speech_feat: torch.Tensor,
        cache_source: torch.Tensor | None,
        generator: torch.Generator | None,
        noise: SourceNoise | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`inference` without graphs; with `noise` (drawn ahead) it draws nothing and can be captured (its
        inverse STFT then avoids torch.istft's host read-back; the result equals up to float rounding)."""
        # inputs follow the weights (e.g. after .half())
        speech_feat = speech_feat.to(self.conv_pre.bias.dtype)
        f0 = self.f0_predictor(speech_feat)
        f0 = F.interpolate(f0[:, None].float(), scale_factor=float(self.upsample_scale), mode="nearest")
        source = self.m_source(f0.transpose(1, 2), generator, noise).transpose(1, 2)
        if cache_source is not None and cache_source.shape[2] != 0:
            source[:, :, : cache_source.shape[2]] = cache_source
        return self.decode(speech_feat, source, graph_safe=noise is not None).float(), source


_OLD_STYLE = re.compile(r"^(.*)\.weight_([gv])$")


def _canonical_keys(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Strip a `generator.` prefix and rename old-style `weight_g/weight_v` to parametrisation keys."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if key.startswith("generator."):
            key = key[len("generator.") :]
        match = _OLD_STYLE.match(key)
        if match:
            index = "0" if match.group(2) == "g" else "1"
            key = f"{match.group(1)}.parametrizations.weight.original{index}"
        out[key] = value
    return out


def load_hift_state_dict(
    module: HiFTGenerator, state_dict: Mapping[str, torch.Tensor], *, fuse: bool = True
) -> None:
    """Load a HiFT state dict strictly, whatever its weight-norm layout, then fuse weight norm if asked.

    Accepts new-style (`parametrizations.weight.original0/1`), old-style (`weight_g`/`weight_v`) and plain
    (`weight`, already fused) keys, with or without a `generator.` prefix. Raises ValueError naming the
    missing or unexpected keys.
    """
    source = _canonical_keys(state_dict)
    wanted = set(module.state_dict().keys())
    for key in list(source):
        if key in wanted:
            continue
        prefix = key.rsplit(".", 1)[0] if key.endswith(".weight") else None
        if prefix and f"{prefix}.parametrizations.weight.original1" in wanted:
            weight = source.pop(key)  # fused weight into a weight-norm module: g = ||w||, v = w
            norm = torch.linalg.vector_norm(weight.float().flatten(1), dim=1).view(
                -1, *[1] * (weight.dim() - 1)
            )
            source[f"{prefix}.parametrizations.weight.original0"] = norm
            source[f"{prefix}.parametrizations.weight.original1"] = weight
        elif key.endswith(".parametrizations.weight.original1"):
            prefix = key[: -len(".parametrizations.weight.original1")]
            if f"{prefix}.weight" in wanted:  # weight-norm keys into an already fused module
                g = source.pop(f"{prefix}.parametrizations.weight.original0", None)
                v = source.pop(key)
                if g is not None:
                    source[f"{prefix}.weight"] = torch._weight_norm(v.float(), g.float(), 0)
    missing = sorted(wanted - set(source))
    unexpected = sorted(set(source) - wanted)
    if missing or unexpected:
        raise ValueError(
            f"hift state dict does not match HiFTGenerator: missing {missing[:5]}"
            f"{' ...' if len(missing) > 5 else ''}, unexpected {unexpected[:5]}"
            f"{' ...' if len(unexpected) > 5 else ''}"
        )
    module.load_state_dict(source, strict=True)
    if fuse:
        module.fuse_weight_norm()
