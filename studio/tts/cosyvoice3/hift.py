"""CosyVoice3's vocoder: the causal HiFT generator (upstream `CausalHiFTGenerator`), mel at 50 Hz -> 24 kHz.

It is CosyVoice2's HiFT (`studio.tts.hift.model`) with causal convolutions: `conv_pre` looks
`conv_pre_look_right` mel frames ahead, every other convolution looks only back, the F0 predictor's first
convolution looks 3 frames ahead (F0 is predicted in float64, as upstream), and the sine source holds its
randomness fixed per model (a table of additive noise indexed by sample position) and its phase as a running
sum that can be carried from chunk to chunk, so `studio.tts.cosyvoice3.hift_stream` can vocode a take chunk by
chunk. Parameter names follow upstream's `hift.pt`; load it with `studio.tts.hift.model.load_hift_state_dict`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from studio.tts.hift.model import ConvRNNF0Predictor, HiFTGenerator, ResBlock, Snake

#: Upstream's fixed noise table covers 300 s of audio at 24 kHz.
DEFAULT_NOISE_SECONDS = 300
#: Seed of the generator that draws a model's fixed phases and noise table.
DEFAULT_NOISE_SEED = 0


class CausalConv1d(nn.Conv1d):
    """Stride-1 convolution whose output at t sees inputs up to t (`left`) or from t onwards (`right`).

    The zero padding of (kernel_size - 1) * dilation goes on one side, so the output keeps the input's length;
    `unpadded` skips it (the output is shorter by that padding).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        dilation: int = 1,
        *,
        causal_type: str = "left",
    ):
        if causal_type not in ("left", "right"):
            raise ValueError(f"CausalConv1d: causal_type must be 'left' or 'right', not {causal_type!r}")
        super().__init__(in_channels, out_channels, kernel_size, 1, padding=0, dilation=dilation)
        self.causal_padding = (kernel_size - 1) * dilation
        self.causal_type = causal_type

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = (self.causal_padding, 0) if self.causal_type == "left" else (0, self.causal_padding)
        return super().forward(F.pad(x, pad))

    def unpadded(self, x: torch.Tensor) -> torch.Tensor:
        """The convolution over real inputs only: [B, C, T] -> [B, C', T - causal_padding]."""
        return super().forward(x)


class CausalConv1dUpsample(nn.Conv1d):
    """Nearest-neighbour upsampling by `stride`, then a left-causal convolution (replaces ConvTranspose1d)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__(in_channels, out_channels, kernel_size, 1, padding=0)
        self.causal_padding = kernel_size - 1
        self.stride_up = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(x, scale_factor=float(self.stride_up), mode="nearest")
        return super().forward(F.pad(x, (self.causal_padding, 0)))


class CausalConv1dDownSample(nn.Conv1d):
    """Strided convolution padded on the left by stride - 1, so each output sees only inputs up to its end."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        if stride < 2 or kernel_size % stride != 0:
            raise ValueError(
                f"CausalConv1dDownSample: stride {stride} must be >= 2 and divide kernel_size {kernel_size}"
            )
        super().__init__(in_channels, out_channels, kernel_size, stride, padding=0)
        self.causal_padding = stride - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (self.causal_padding, 0)))


class CausalResBlock(ResBlock):
    """CosyVoice2's residual block (same keys, same forward) with left-causal dilated convolutions."""

    def __init__(self, channels: int, kernel_size: int, dilations: Sequence[int]):
        nn.Module.__init__(self)
        self.convs1 = nn.ModuleList(
            weight_norm(CausalConv1d(channels, channels, kernel_size, d)) for d in dilations
        )
        self.convs2 = nn.ModuleList(
            weight_norm(CausalConv1d(channels, channels, kernel_size)) for _ in dilations
        )
        self.activations1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in dilations)


class CausalConvRNNF0Predictor(ConvRNNF0Predictor):
    """CosyVoice2's F0 predictor (same keys, same forward) with causal convolutions: the first looks 3 mel
    frames ahead (kernel 4), the other four look 2 frames back (kernel 3)."""

    def __init__(self, num_class: int = 1, in_channels: int = 80, cond_channels: int = 512):
        nn.Module.__init__(self)
        layers: list[nn.Module] = [
            weight_norm(CausalConv1d(in_channels, cond_channels, 4, causal_type="right")),
            nn.ELU(),
        ]
        for _ in range(4):
            layers += [weight_norm(CausalConv1d(cond_channels, cond_channels, 3)), nn.ELU()]
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(cond_channels, num_class)

    @property
    def look_right(self) -> int:
        """Mel frames after a frame that its F0 depends on."""
        return self.condnet[0].causal_padding

    @property
    def look_back(self) -> int:
        """Mel frames before a frame that its F0 depends on."""
        return sum(
            layer.causal_padding
            for layer in self.condnet
            if isinstance(layer, CausalConv1d) and layer.causal_type == "left"
        )

    def forward(self, x: torch.Tensor, finalize: bool = True) -> torch.Tensor:
        """mel [B, 80, T] -> F0 [B, T]; with `finalize` False the last `look_right` frames are only the first
        convolution's look-right (in place of its zero padding) and F0 has T - look_right frames."""
        if finalize:
            return super().forward(x)
        features = self.condnet[0].unpadded(x)
        for layer in self.condnet[1:]:
            features = layer(features)
        return torch.abs(self.classifier(features.transpose(1, 2)).squeeze(-1))


class CausalSineSource(nn.Module):
    """F0 per mel frame -> one excitation signal (upstream's causal `SourceModuleHnNSF` with `SineGen2`; keys
    `l_linear`).

    Each harmonic's phase advances once per mel frame by that frame's F0 (in cycles per sample, mod 1); the
    running sum is held over the frame's samples (upsample_scale times the phase, nearest), so a sample
    depends on no later frame. The running sum is a take-long state: `cycles` continues it from `start`,
    summing in float64 one frame after the other (as PyTorch's CPU cumsum of float32 accumulates), so a take
    cut into chunks gets the same phases as the whole take. Upstream also adds random initial phases to the
    take's first sample; its frame-rate integration reads each frame's step from the frame's middle samples,
    so that sample never counts and there are none here.

    The additive noise is fixed per model, as upstream: a table [1, samples, harmonics] uniform in [0, 1),
    indexed by the sample's position in the take (outside the state dict; `set_noise` replaces it). As
    upstream's, it is float32 whatever the model is cast to, and it moves to the F0's device when used. It is
    drawn from a generator seeded `noise_seed`, one second at a time and only as far as the longest take so far
    needs (upstream holds 300 s, 259 MB, per model): the generator fills a table in order, so a sample's noise
    is the same however far the table was drawn, and a stream's push draws at most the seconds it reaches.
    """

    def __init__(
        self,
        sampling_rate: int,
        upsample_scale: int,
        harmonic_num: int,
        sine_amp: float,
        noise_std: float,
        voiced_threshold: float,
        noise_samples: int,
        noise_seed: int,
    ):
        super().__init__()
        if upsample_scale < 3:
            raise ValueError(f"CausalSineSource: upsample_scale must be >= 3, not {upsample_scale}")
        self.sampling_rate = sampling_rate
        self.upsample_scale = upsample_scale
        self.sine_amp = sine_amp
        self.noise_std = noise_std
        self.voiced_threshold = voiced_threshold
        self.l_linear = nn.Linear(harmonic_num + 1, 1)
        self.noise_samples = noise_samples
        self.noise_seed = noise_seed
        # the table as consecutive blocks: one per second drawn, or the one table given to set_noise
        self._noise_blocks: list[torch.Tensor] = []
        self._noise_generator: torch.Generator | None = None
        self._noise_given = False

    @property
    def harmonics(self) -> int:
        return self.l_linear.in_features

    @property
    def noise(self) -> torch.Tensor:
        """The noise table drawn (or given) so far [1, samples, harmonics]."""
        if not self._noise_blocks:
            return torch.zeros(1, 0, self.harmonics)
        return torch.cat(self._noise_blocks, dim=1)

    def set_noise(self, noise: torch.Tensor) -> None:
        """Use this fixed noise table [1, samples, harmonics] from now on."""
        if noise.dim() != 3 or noise.shape[0] != 1 or noise.shape[2] != self.harmonics:
            raise ValueError(f"noise must be [1, samples, {self.harmonics}], not {list(noise.shape)}")
        self._noise_blocks = [noise.detach().to(torch.float32).clone()]
        self._noise_given = True

    def _noise_at(self, first_sample: int, samples: int, device: torch.device) -> torch.Tensor:
        end = first_sample + samples
        if samples == 0:
            return torch.zeros(1, 0, self.harmonics, device=device)
        second = self.sampling_rate
        drawn = sum(block.shape[1] for block in self._noise_blocks)
        limit = drawn if self._noise_given else self.noise_samples
        if end > limit:
            raise ValueError(
                f"CausalSineSource: the take reaches sample {end}, past the fixed noise table's {limit} "
                f"({limit / second:.1f} s); build the model with more noise_seconds"
            )
        if self._noise_generator is None:
            self._noise_generator = torch.Generator().manual_seed(self.noise_seed)
        while drawn < end:
            length = min(second, self.noise_samples - drawn)
            block = torch.rand(1, length, self.harmonics, generator=self._noise_generator)
            self._noise_blocks.append(block)
            drawn += length
        if any(block.device != device for block in self._noise_blocks):
            self._noise_blocks = [block.to(device) for block in self._noise_blocks]
        if self._noise_given:
            return self._noise_blocks[0][:, first_sample:end]
        first_block = first_sample // second
        blocks = self._noise_blocks[first_block : (end - 1) // second + 1]
        table = blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=1)
        offset = first_block * second
        return table[:, first_sample - offset : end - offset]

    def cycles(self, f0: torch.Tensor, start: torch.Tensor | None = None) -> torch.Tensor:
        """f0 [B, T] Hz per mel frame -> each harmonic's running phase in cycles after each frame
        [B, T, harmonics] float64, continuing from `start` [B, harmonics] (the take's start when None)."""
        harmonics = torch.arange(1, self.harmonics + 1, device=f0.device, dtype=torch.float32)
        steps = ((f0.float()[:, :, None] * harmonics / self.sampling_rate) % 1).double()
        if start is None:
            return torch.cumsum(steps, dim=1)
        return torch.cumsum(torch.cat([start.double()[:, None], steps], dim=1), dim=1)[:, 1:]

    def excitation(self, f0: torch.Tensor, cycles: torch.Tensor, first_frame: int) -> torch.Tensor:
        """Frames first_frame.. of a take: f0 [B, T] and `cycles` [B, T, harmonics] -> [B, 1, T * scale]
        float32 (whatever the model's dtype or autocast: the phase would drift in half precision)."""
        scale = self.upsample_scale
        phase = (cycles.float() * 2 * math.pi) * scale
        sine_waves = torch.repeat_interleave(torch.sin(phase), scale, dim=1) * self.sine_amp
        uv = torch.repeat_interleave((f0.float() > self.voiced_threshold).to(torch.float32), scale, dim=1)
        uv = uv[:, :, None]
        noise_amp = uv * self.noise_std + (1 - uv) * self.sine_amp / 3
        noise = self._noise_at(first_frame * scale, sine_waves.shape[1], f0.device)
        sine_waves = sine_waves * uv + noise_amp * noise
        with torch.autocast(device_type=f0.device.type, enabled=False):
            merged = F.linear(sine_waves, self.l_linear.weight.float(), self.l_linear.bias.float())
        return torch.tanh(merged).transpose(1, 2)

    def forward(self, f0: torch.Tensor) -> torch.Tensor:
        """f0 [B, T] in Hz per mel frame of a whole take -> excitation [B, 1, T * upsample_scale] float32."""
        return self.excitation(f0, self.cycles(f0), 0)


class CausalHiFTGenerator(HiFTGenerator):
    """HiFTNet with causal convolutions (upstream `CausalHiFTGenerator`): mel [B, 80, T] -> waveform.

    Shares CosyVoice2's `decode` (the causality lives in the layers), STFT, weight-norm fusion and loader;
    `inference` is upstream's call over a whole mel (`finalize`) or over a take's prefix (without).
    """

    def __init__(
        self,
        in_channels: int = 80,
        base_channels: int = 512,
        nb_harmonics: int = 8,
        sampling_rate: int = 24000,
        nsf_alpha: float = 0.1,
        nsf_sigma: float = 0.003,
        nsf_voiced_threshold: float = 10,
        upsample_rates: Sequence[int] = (8, 5, 3),
        upsample_kernel_sizes: Sequence[int] = (16, 11, 7),
        istft_params: Mapping[str, int] | None = None,
        resblock_kernel_sizes: Sequence[int] = (3, 7, 11),
        resblock_dilation_sizes: Sequence[Sequence[int]] = ((1, 3, 5), (1, 3, 5), (1, 3, 5)),
        source_resblock_kernel_sizes: Sequence[int] = (7, 7, 11),
        source_resblock_dilation_sizes: Sequence[Sequence[int]] = ((1, 3, 5), (1, 3, 5), (1, 3, 5)),
        lrelu_slope: float = 0.1,
        audio_limit: float = 0.99,
        conv_pre_look_right: int = 4,
        f0_predictor: nn.Module | None = None,
        noise_seconds: float = DEFAULT_NOISE_SECONDS,
        noise_seed: int = DEFAULT_NOISE_SEED,
    ):
        nn.Module.__init__(self)
        if f0_predictor is None:
            raise ValueError("CausalHiFTGenerator needs an f0_predictor module")
        if sampling_rate == 22050:
            raise ValueError(
                "CausalHiFTGenerator: the 22.05 kHz (CosyVoice 1) source module is not supported"
            )
        if conv_pre_look_right < 1:
            raise ValueError(f"conv_pre_look_right must be >= 1, not {conv_pre_look_right}")
        if len(upsample_rates) != len(upsample_kernel_sizes):
            raise ValueError(
                f"{len(upsample_rates)} upsample_rates but {len(upsample_kernel_sizes)} upsample_kernel_sizes"
            )
        istft_params = dict(istft_params or {"n_fft": 16, "hop_len": 4})
        upsample_rates = [int(u) for u in upsample_rates]
        self.graphs = None
        self.sampling_rate = sampling_rate
        self.n_fft = int(istft_params["n_fft"])
        self.hop_len = int(istft_params["hop_len"])
        self.lrelu_slope = lrelu_slope
        self.audio_limit = audio_limit
        self.conv_pre_look_right = conv_pre_look_right
        self.num_kernels = len(resblock_kernel_sizes)
        self.num_upsamples = len(upsample_rates)
        self.upsample_scale = int(np.prod(upsample_rates)) * self.hop_len  # waveform samples per mel frame
        self.m_source = CausalSineSource(
            sampling_rate,
            self.upsample_scale,
            nb_harmonics,
            nsf_alpha,
            nsf_sigma,
            nsf_voiced_threshold,
            noise_samples=int(noise_seconds * sampling_rate),
            noise_seed=noise_seed,
        )
        self.conv_pre = weight_norm(
            CausalConv1d(in_channels, base_channels, conv_pre_look_right + 1, causal_type="right")
        )
        self.ups = nn.ModuleList(
            weight_norm(CausalConv1dUpsample(base_channels // 2**i, base_channels // 2 ** (i + 1), k, u))
            for i, (u, k) in enumerate(zip(upsample_rates, upsample_kernel_sizes, strict=True))
        )
        self.source_downs = nn.ModuleList()
        self.source_resblocks = nn.ModuleList()
        cum_rates = np.cumprod([1] + upsample_rates[::-1][:-1])[::-1]
        for i, (u, k, d) in enumerate(
            zip(cum_rates, source_resblock_kernel_sizes, source_resblock_dilation_sizes, strict=False)
        ):
            channels = base_channels // 2 ** (i + 1)
            u = int(u)
            self.source_downs.append(
                CausalConv1d(self.n_fft + 2, channels, 1)
                if u == 1
                else CausalConv1dDownSample(self.n_fft + 2, channels, u * 2, u)
            )
            self.source_resblocks.append(CausalResBlock(channels, k, d))
        self.resblocks = nn.ModuleList(
            CausalResBlock(base_channels // 2 ** (i + 1), k, d)
            for i in range(self.num_upsamples)
            for k, d in zip(resblock_kernel_sizes, resblock_dilation_sizes, strict=True)
        )
        self.conv_post = weight_norm(CausalConv1d(base_channels // 2**self.num_upsamples, self.n_fft + 2, 7))
        self.reflection_pad = nn.ReflectionPad1d((1, 0))
        self.f0_predictor = f0_predictor.double()
        self._windows: dict[torch.device, torch.Tensor] = {}

    @property
    def finalize_trim_frames(self) -> int:
        """Mel frames at the end of a take's mel that a call without `finalize` vocodes none of: the F0
        predictor's and conv_pre's look-right, and one frame the inverse STFT's overlap leaves incomplete."""
        return self.f0_predictor.look_right + self.conv_pre_look_right + 1

    def predict_f0(self, mel: torch.Tensor, finalize: bool = True) -> torch.Tensor:
        """mel [B, 80, T] -> F0 [B, T] float32 ([B, T - look_right] without `finalize`), predicted in float64
        as upstream does: the sine source sums F0 over the whole take, so a rounding difference between a
        chunk and the whole take would grow into a different phase."""
        predictor = self.f0_predictor
        if predictor.classifier.weight.dtype != torch.float64:  # cast since construction (.half(), .to())
            with torch.inference_mode(False), torch.no_grad():
                predictor.double()
        with torch.autocast(device_type=mel.device.type, enabled=False):
            return predictor(mel.double(), finalize).float()

    @torch.inference_mode()
    def inference(
        self, speech_feat: torch.Tensor, finalize: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """mel [B, 80, T] -> (speech [B, 480 * T] float32, source [B, 1, 480 * T]), as upstream's call.

        Without `finalize` the mel is a take's prefix: its last frames serve as look-right (to the F0 predictor
        and to conv_pre) in place of zero padding, and the speech stops where later frames could still change
        it: speech [B, 480 * (T - finalize_trim_frames)], source [B, 1, 480 * (T - f0 look-right)].
        """
        mel_bins = self.f0_predictor.condnet[0].in_channels
        if speech_feat.dim() != 3 or speech_feat.shape[1] != mel_bins:
            raise ValueError(
                f"CausalHiFTGenerator.inference: mel must be [batch, {mel_bins}, frames], "
                f"not {list(speech_feat.shape)}"
            )
        if speech_feat.shape[2] == 0:
            raise ValueError("CausalHiFTGenerator.inference: the mel has no frames")
        if not finalize and speech_feat.shape[2] < self.finalize_trim_frames:
            raise ValueError(
                f"CausalHiFTGenerator.inference: without finalize the mel needs at least "
                f"{self.finalize_trim_frames} frames, not {speech_feat.shape[2]}"
            )
        f0 = self.predict_f0(speech_feat, finalize)
        source = self.m_source(f0)
        speech = self.decode(speech_feat[:, :, : f0.shape[1]].to(self.conv_pre.bias.dtype), source).float()
        if not finalize:
            # causal past conv_pre: the samples kept never see conv_pre's zero padding on the right
            kept = speech_feat.shape[2] - self.finalize_trim_frames
            speech = speech[:, : kept * self.upsample_scale]
        return speech, source

    def vocode_eager(
        self,
        speech_feat: torch.Tensor,
        cache_source: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        noise: object | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`inference` of a whole take. A causal source joins chunks by its fixed noise and carried phase, not
        by a cached source or per-request draws: those arguments are refused."""
        if cache_source is not None or generator is not None or noise is not None:
            raise ValueError(
                "CausalHiFTGenerator: cache_source, generator and noise do not apply (its noise is fixed)"
            )
        return self.inference(speech_feat, finalize=True)

    def inference_rows(self, *args: object, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        """Not available: CosyVoice3 streams each take through its own `CausalHiftStream`."""
        raise NotImplementedError(
            "CausalHiFTGenerator has no batched chunk vocoding (inference_rows); stream a take with "
            "studio.tts.cosyvoice3.hift_stream.CausalHiftStream"
        )
