"""CosyVoice3's vocoder streamed chunk by chunk at a cost per chunk that does not grow with the take.

Upstream streams `CausalHiFTGenerator` by running it, at every hop, over all the mel so far (`finalize`
False until the last call) and keeping the samples after those already returned: the work per hop grows with
the take. Its waveform is causal but for a few look-right frames, so a sample depends on a bounded window of
mel frames, except through the sine source: each harmonic's phase is a running sum over the whole take, and
the source's noise is read at the sample's position in the take. `CausalHiftStream` therefore runs the network
over the new frames plus `vocoder_look_back` frames of left context, with the source rebuilt from F0 and phases
it keeps per frame (the phase carried from push to push) and the noise read at absolute positions, and returns
only the new samples. They equal upstream's re-run up to float rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch

from studio.tts.cosyvoice3.hift import CausalConv1dDownSample, CausalHiFTGenerator, CausalResBlock


def _resblock_look_back(block: CausalResBlock) -> int:
    """Frames before a frame that a causal residual block's output at it depends on."""
    return sum(conv.causal_padding for conv in (*block.convs1, *block.convs2))


def vocoder_look_back(hift: CausalHiFTGenerator) -> int:
    """Mel frames before an output frame whose mel or source the output frame depends on (an upper bound).

    Walks the generator from its waveform back to its inputs, in mel frames: the inverse STFT's overlap, the
    reflection pad and conv_post at the last level's rate; at each level its residual blocks, then either the
    source branch (its residual block, its downsampling of the source STFT and the STFT's window) or the
    upsampling convolution and the nearest-neighbour upsampling's rounding; conv_pre looks only ahead.
    """
    rates = [
        math.prod(int(block.stride_up) for block in hift.ups[: i + 1]) for i in range(hift.num_upsamples)
    ]
    stft_rate = rates[-1]  # STFT frames per mel frame: the last level's rate
    stft_window = Fraction(math.ceil(hift.n_fft / 2 / hift.hop_len), stft_rate)
    reach = Fraction(2 + hift.conv_post.causal_padding + 1, stft_rate)  # the last two: iSTFT and reflection
    widest = Fraction(0)
    for level in reversed(range(hift.num_upsamples)):
        rate = rates[level]
        blocks = hift.resblocks[level * hift.num_kernels : (level + 1) * hift.num_kernels]
        reach += Fraction(max(_resblock_look_back(block) for block in blocks), rate)
        down = hift.source_downs[level]
        down_reach = down.causal_padding if isinstance(down, CausalConv1dDownSample) else 0
        source_reach = Fraction(_resblock_look_back(hift.source_resblocks[level]), rate)
        widest = max(widest, reach + source_reach + Fraction(down_reach, stft_rate) + stft_window)
        previous_rate = rates[level - 1] if level else 1
        reach += Fraction(hift.ups[level].causal_padding, rate) + Fraction(1, previous_rate)
    return math.ceil(max(widest, reach))


@dataclass
class HiftStreamState:
    """One take's vocoder state between pushes; frame indices count mel frames from the take's start."""

    mel: torch.Tensor  # [1, mel bins, n] float32: the take's mel frames from mel_start on
    f0: torch.Tensor  # [1, n'] float32: F0 of frames f0_start .. f0_end - 1
    cycles: torch.Tensor  # [1, n', harmonics] float64: each harmonic's running phase after those frames
    mel_start: int = 0
    f0_start: int = 0
    frames_out: int = 0  # frames whose waveform has been returned
    finalized: bool = False

    @property
    def frames(self) -> int:
        return self.mel_start + self.mel.shape[2]

    @property
    def f0_end(self) -> int:
        return self.f0_start + self.f0.shape[1]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.mel, self.f0, self.cycles))


@dataclass
class F0Request:
    """The mel a push's F0 is predicted over: F0 frames `begin` .. `stop` - 1 of `mel` are the new ones."""

    mel: torch.Tensor  # [1, mel bins, W] float32
    begin: int
    stop: int


@dataclass
class NetworkWindow:
    """What a push runs the generator on: mel frames start .. start + W - 1 and their source."""

    mel: torch.Tensor  # [1, mel bins, W] float32
    source: torch.Tensor  # [1, 1, W * upsample_scale] float32
    start: int  # the window's first frame in the take
    out_end: int  # frames whose samples have been returned after this push


class CausalHiftStream:
    """Vocodes one take pushed as mel chunks; each push returns only the new waveform samples.

    After each push, the samples returned so far equal `hift.inference(all mel so far, finalize)` (upstream's
    re-run) up to float rounding. `last_network_frames` and `last_f0_frames` say how many mel frames the last
    push ran the generator and the F0 predictor on: the push's new frames plus a fixed context, whatever the
    take's length. The take's state is one `HiftStreamState` on the generator's device.
    """

    def __init__(self, hift: CausalHiFTGenerator):
        self.hift = hift
        self.look_back = vocoder_look_back(hift)
        self.last_network_frames = 0
        self.last_f0_frames = 0
        device = hift.conv_pre.bias.device
        mel_bins = hift.conv_pre.in_channels
        harmonics = hift.m_source.harmonics
        self.state: HiftStreamState | None = HiftStreamState(
            mel=torch.zeros(1, mel_bins, 0, device=device),
            f0=torch.zeros(1, 0, device=device),
            cycles=torch.zeros(1, 0, harmonics, device=device, dtype=torch.float64),
        )

    @property
    def state_bytes(self) -> int:
        """Bytes of device memory the take's state holds (0 once closed)."""
        return 0 if self.state is None else self.state.nbytes

    def close(self) -> None:
        """Drop the take's state; pushing afterwards is an error."""
        self.state = None

    def check(self, mel: torch.Tensor) -> None:
        """Raise the error `push(mel, ...)` would raise before it changes anything (closed or finalized
        stream, mel not [1, mel bins, frames])."""
        state = self._open_state()
        mel_bins = state.mel.shape[1]
        if mel.dim() != 3 or mel.shape[0] != 1 or mel.shape[1] != mel_bins:
            raise ValueError(
                f"CausalHiftStream.push: mel must be [1, {mel_bins}, frames], not {list(mel.shape)}"
            )

    @torch.inference_mode()
    def push(self, mel: torch.Tensor, finalize: bool) -> torch.Tensor:
        """The take's next mel frames [1, mel bins, F] (F may be 0) -> its new waveform samples [1, S] float32.

        Without `finalize` the waveform stops `hift.finalize_trim_frames` frames before the mel's end (later
        frames could still change it); the push with `finalize` ends the take and returns the rest.
        `hift_batch.push_many` runs several takes' pushes as one batch, with the same results.
        """
        self.accept(mel, finalize)
        if (request := self.f0_request()) is not None:
            self.take_f0(self.hift.predict_f0(request.mel, finalize), request)
        window = self.network_window()
        if window is None:
            return self.no_samples()
        speech = self.hift.decode(window.mel.to(self.hift.conv_pre.bias.dtype), window.source).float()
        return self.take_speech(speech, window)

    # -- a push's steps, in order (`push`, or `hift_batch.push_many` across takes) --------------------------
    def accept(self, mel: torch.Tensor, finalize: bool) -> None:
        """Check the push and append its mel to the take's."""
        self.check(mel)
        state = self.state
        state.mel = torch.cat([state.mel, mel.to(state.mel)], dim=2)
        state.finalized = finalize

    @property
    def _source_end(self) -> int:
        """Frames whose F0 (hence source) the mel so far fixes: all once finalized."""
        state = self.state
        return state.frames if state.finalized else state.frames - self.hift.f0_predictor.look_right

    def f0_request(self) -> F0Request | None:
        """The mel window whose F0 the push needs (None: no new frame's F0 is fixed yet)."""
        state = self.state
        begin, end = state.f0_end, self._source_end
        self.last_f0_frames = 0
        if end <= begin:
            return None
        first = max(0, begin - self.hift.f0_predictor.look_back)
        window = state.mel[:, :, first - state.mel_start :]
        self.last_f0_frames = window.shape[2]
        return F0Request(window, begin - first, end - first)

    def take_f0(self, f0: torch.Tensor, request: F0Request) -> None:
        """F0 predicted over `request`'s window [1, >= request.stop] -> the new frames' F0 and running
        phases."""
        state = self.state
        f0 = f0[:, request.begin : request.stop]
        start = state.cycles[:, -1] if state.f0_end else None  # the phase after the frame before
        cycles = self.hift.m_source.cycles(f0, start)
        state.f0 = torch.cat([state.f0, f0], dim=1)
        state.cycles = torch.cat([state.cycles, cycles], dim=1)

    def network_window(self) -> NetworkWindow | None:
        """The mel frames and source the generator runs on for this push (None: no new samples yet)."""
        state = self.state
        hift = self.hift
        source_end = self._source_end
        out_end = state.frames if state.finalized else state.frames - hift.finalize_trim_frames
        if out_end <= state.frames_out:
            return None
        start = max(0, state.frames_out - self.look_back)
        source = hift.m_source.excitation(
            state.f0[:, start - state.f0_start : source_end - state.f0_start],
            state.cycles[:, start - state.f0_start : source_end - state.f0_start],
            start,
        )
        mel = state.mel[:, :, start - state.mel_start : source_end - state.mel_start]
        return NetworkWindow(mel, source, start, out_end)

    def no_samples(self) -> torch.Tensor:
        """End a push that returns no samples."""
        state = self.state
        self.last_network_frames = 0
        self._drop_unneeded(state)
        return torch.zeros(1, 0, device=state.mel.device)

    def take_speech(self, speech: torch.Tensor, window: NetworkWindow) -> torch.Tensor:
        """The generator's waveform over `window` [1, >= its samples] -> the push's new samples [1, S]."""
        state = self.state
        scale = self.hift.upsample_scale
        speech = speech[
            :, (state.frames_out - window.start) * scale : (window.out_end - window.start) * scale
        ]
        self.last_network_frames = window.mel.shape[2]
        state.frames_out = window.out_end
        self._drop_unneeded(state)
        return speech

    def _open_state(self) -> HiftStreamState:
        if self.state is None:
            raise RuntimeError("CausalHiftStream: the stream is closed")
        if self.state.finalized:
            raise RuntimeError(
                "CausalHiftStream: the take was finalized; start a new stream for another take"
            )
        return self.state

    def _drop_unneeded(self, state: HiftStreamState) -> None:
        """Keep only what the next push reads: its network's left context, the F0 predictor's look-back and
        the last running phase (nothing after the finalizing push)."""
        if state.finalized:
            state.mel, state.f0, state.cycles = state.mel[:, :, :0], state.f0[:, :0], state.cycles[:, :0]
            return
        next_start = max(0, state.frames_out - self.look_back)
        keep_f0 = min(next_start, state.f0_end - 1)
        if keep_f0 > state.f0_start:
            state.f0 = state.f0[:, keep_f0 - state.f0_start :].clone()
            state.cycles = state.cycles[:, keep_f0 - state.f0_start :].clone()
            state.f0_start = keep_f0
        keep_mel = min(next_start, max(0, state.f0_end - self.hift.f0_predictor.look_back))
        if keep_mel > state.mel_start:
            state.mel = state.mel[:, :, keep_mel - state.mel_start :].clone()
            state.mel_start = keep_mel
