"""Several CosyVoice3 takes' vocoder pushes run as one batch: one F0 prediction and one generator run.

Each take's `CausalHiftStream` push needs the F0 of a mel window and then the generator over another window;
the windows differ in length from take to take. `push_many` right-pads them to the longest and runs the F0
predictor once and the generator's network once over the padded batch, then hands each take the frames of
its own window. Right padding changes nothing a take keeps, because:

- the F0 predictor runs with its zero look-right padding (`finalize`) over zero-padded mel: a finalizing take
  sees the zeros its own call would, and a take that is not finalizing keeps only frames whose look-right
  lies inside its window (as its own call without `finalize`); its other convolutions look only back;
- `conv_pre` looks ahead over zero padding in a take's own call too, and the padding is zeros; every later
  layer of the network looks only back;
- the two steps that see a window's right edge are done per take over its own frames: the source's STFT
  (it reflects the window's last samples) and the inverse STFT (its overlap-add window sum ends there).

So each take's samples equal its own `push` up to float rounding (other kernels for another batch size).

On CUDA the network (`HiFTGenerator.spectrum`, about 940 of a push's ~1,040 operations) is replayed as CUDA
graphs (`SpectrumGraphs`, attached by the loader as `hift.spectrum_graphs`): the windows are right-padded
further, to a frame bucket (32 frames up to 256), and the takes run in pieces of a few row counts (`batch_pieces`;
padded rows are zeros), which the same argument makes exact; a shape runs eagerly once and is captured when it
recurs (or while the flow's scheduler idles).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

from studio.tts.cosyvoice3.hift import CausalHiFTGenerator
from studio.tts.cosyvoice3.hift_stream import CausalHiftStream
from studio.tts.device.cuda_graphs import (
    ShapeGraphs,
    autocast_context,
    autocast_dtype,
    bucket_frames,
    capture_graph,
    in_pieces,
)

log = logging.getLogger(__name__)

SPECTRUM_GRAPHS_KEPT = 32


class HiftPush(NamedTuple):
    """One take's push: `stream.push(mel, finalize)`."""

    stream: CausalHiftStream
    mel: torch.Tensor  # [1, mel bins, F]
    finalize: bool


def _right_padded(windows: Sequence[torch.Tensor]) -> torch.Tensor:
    """[1, C, W_i] tensors -> [N, C, max W_i] zero-padded on the right."""
    longest = max(window.shape[2] for window in windows)
    return torch.cat([F.pad(window, (0, longest - window.shape[2])) for window in windows], dim=0)


def decode_many(
    hift: CausalHiFTGenerator, mels: Sequence[torch.Tensor], sources: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """`hift.decode(mel_i, source_i)` for each take, the network run once over the right-padded batch:
    mels [1, 80, W_i], sources [1, 1, W_i * upsample_scale] -> waveforms [1, W_i * upsample_scale]."""
    stfts = [hift._stft(source.squeeze(1)) for source in sources]
    frames = [stft.shape[2] for stft in stfts]
    graphs, spectra = getattr(hift, "spectrum_graphs", None), None
    if graphs is not None and (mels[0].is_cuda or graphs.anywhere):
        try:
            spectra = graphs(mels, stfts)
        except Exception:  # noqa: BLE001 - a fault of the graph path costs speed, not takes: eager from now on
            log.warning(
                "CosyVoice3 HiFT: the graphed network failed; running it eagerly from now on", exc_info=True
            )
            hift.spectrum_graphs = None
    if spectra is None:
        spectra = hift.spectrum(_right_padded(mels).to(hift.conv_pre.bias.dtype), _right_padded(stfts))
    return [hift.waveform(spectra[row : row + 1, :, :count]) for row, count in enumerate(frames)]


class SpectrumGraphs:
    """`hift.spectrum` over takes' windows, padded to a (batch, frames) bucket and replayed as CUDA graphs.

    `capture` is `capture_graph`'s signature: a stand-in (tests) runs the graph path off CUDA too."""

    def __init__(self, hift: CausalHiFTGenerator, capture=capture_graph):
        self.hift = hift
        self.stft_rate = hift.upsample_scale // hift.hop_len  # STFT frames per mel frame
        self._graphs = ShapeGraphs(
            "CosyVoice3 HiFT",
            self._run,
            SPECTRUM_GRAPHS_KEPT,
            eager_first=1,
            capture=capture,
            capture_when_paid=True,
        )
        self.anywhere = capture is not capture_graph

    @property
    def captures(self) -> int:
        return self._graphs.captures

    def __call__(self, mels: Sequence[torch.Tensor], stfts: Sequence[torch.Tensor]) -> torch.Tensor:
        """mels [1, 80, W_i], their sources' STFTs [1, n_fft + 2, W_i * stft_rate + 1] -> the network's
        output [takes, n_fft + 2, frames * stft_rate + 1] (a take's row: its STFT's frames, then padding).
        The takes run in pieces of `batch_pieces` rows, so that a few row counts serve any batch."""
        frames = bucket_frames(max(mel.shape[2] for mel in mels))
        spectra = [
            self._piece([mels[i] for i in piece], [stfts[i] for i in piece], rows, frames)[: len(piece)]
            for piece, rows in in_pieces(range(len(mels)))
        ]
        return spectra[0] if len(spectra) == 1 else torch.cat(spectra)

    def _piece(
        self, mels: Sequence[torch.Tensor], stfts: Sequence[torch.Tensor], rows: int, frames: int
    ) -> torch.Tensor:
        hift = self.hift
        mel = mels[0].new_zeros(rows, mels[0].shape[1], frames, dtype=hift.conv_pre.bias.dtype)
        stft = stfts[0].new_zeros(rows, stfts[0].shape[1], frames * self.stft_rate + 1)
        for row, (window, spectrum) in enumerate(zip(mels, stfts, strict=True)):
            mel[row, :, : window.shape[2]] = window[0]
            stft[row, :, : spectrum.shape[2]] = spectrum[0]
        weights = hift.conv_pre.bias
        compute = autocast_dtype()
        key = (rows, frames, mel.dtype, stft.dtype, compute)
        fingerprint = (weights.data_ptr(), weights.dtype)
        return self._graphs(key, fingerprint, (mel, stft), lambda: autocast_context(compute))[0]

    def _run(self, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor]:
        return (self.hift.spectrum(*inputs),)


def attach_hift_graphs(hift: CausalHiFTGenerator, enabled: bool = True, **options) -> SpectrumGraphs | None:
    """Replay the causal HiFT's batched network as CUDA graphs (`SpectrumGraphs`), or stop (``enabled`` False)."""
    hift.spectrum_graphs = SpectrumGraphs(hift, **options) if enabled else None
    return hift.spectrum_graphs


@torch.inference_mode()
def vocode_pushes(pushes: Sequence[HiftPush]) -> list[torch.Tensor | Exception]:
    """Each push's new samples [1, S] float32, as its stream's own `push` returns them, or the error that
    push raises: a push that fails on its own (closed or finalized stream, wrong mel shape, a take past the
    noise table) fails alone, its stream left as its own push would leave it. The F0 predictor and the
    generator run once each for all pushes of one generator; an error there is raised (every take's state
    is then unknown). A stream may appear once."""
    if len({id(push.stream) for push in pushes}) != len(pushes):
        raise ValueError("vocode_pushes: a stream may push once per batch")
    results: list[torch.Tensor | Exception | None] = [None] * len(pushes)
    live: list[int] = []
    for index, push in enumerate(pushes):
        try:
            push.stream.accept(push.mel, push.finalize)
            live.append(index)
        except Exception as error:  # noqa: BLE001 - the push's own error goes back to its take
            results[index] = error
    by_model: dict[int, list[int]] = {}
    for index in live:
        by_model.setdefault(id(pushes[index].stream.hift), []).append(index)
    for indices in by_model.values():
        _vocode_group(pushes, indices, results)
    return results


def _vocode_group(
    pushes: Sequence[HiftPush], indices: list[int], results: list[torch.Tensor | Exception | None]
) -> None:
    """The accepted pushes of one generator: F0 then the network, each once for all of them."""
    hift = pushes[indices[0]].stream.hift
    requests = [(index, pushes[index].stream.f0_request()) for index in indices]
    requests = [(index, request) for index, request in requests if request is not None]
    if requests:
        f0 = hift.predict_f0(_right_padded([request.mel for _, request in requests]), finalize=True)
        for row, (index, request) in enumerate(requests):
            pushes[index].stream.take_f0(f0[row : row + 1], request)
    windows = []
    for index in indices:
        stream = pushes[index].stream
        try:
            window = stream.network_window()
        except Exception as error:  # noqa: BLE001 - e.g. the take ran past the noise table: its own error
            results[index] = error
            continue
        if window is None:
            results[index] = stream.no_samples()
        else:
            windows.append((index, window))
    if not windows:
        return
    speeches = decode_many(hift, [w.mel for _, w in windows], [w.source for _, w in windows])
    for (index, window), speech in zip(windows, speeches, strict=True):
        results[index] = pushes[index].stream.take_speech(speech.float(), window)


def push_many(pushes: Sequence[HiftPush]) -> list[torch.Tensor]:
    """`[stream.push(mel, finalize) for stream, mel, finalize in pushes]` run as one batch (`vocode_pushes`);
    raises the first push's error."""
    results = vocode_pushes(pushes)
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results
