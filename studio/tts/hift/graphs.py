"""CUDA-graph replay of HiFT's chunk synthesis: about a thousand small kernels per chunk, launch-bound eagerly.

The random draws of the neural source are made eagerly first (`draw_source_noise`, from the request's own
generator, in upstream's order), so the captured part is deterministic and equals the eager path exactly.
A graph is captured per exact shape (batch, mel frames, source-cache length, dtype): HiFT's convolutions
are not causal, so padding would change the output. Streaming repeats a few shapes (the first chunk, the
steady chunks, the cross-fade cache), so a small LRU of graphs (`ShapeGraphs`) serves nearly every chunk; a
shape is captured once its eager calls have cost what a capture costs (or while the GPU idles); a
capture that fails switches graphs off and the vocoder keeps running eagerly.
"""

from __future__ import annotations

import torch
from torch import nn

from studio.tts.device.cuda_graphs import ShapeGraphs
from studio.tts.hift.source import SourceNoise, draw_source_noise


class HiftGraphs:
    """`inference` with HiFT's signature that replays captured graphs, at most `max_graphs` kept (LRU)."""

    def __init__(self, hift: nn.Module, max_graphs: int = 32):
        self.hift = hift
        # eager until a shape's eager calls have cost a capture: a last chunk's length seldom recurs, and a
        # capture cost 0.13-0.38 s on the H200
        self._graphs = ShapeGraphs(
            "HiFT", self._run, max_graphs=max_graphs, eager_first=1, capture_when_paid=True
        )

    @property
    def captures(self) -> int:
        return self._graphs.captures

    @property
    def enabled(self) -> bool:
        return self._graphs.enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self._graphs.enabled = value

    def inference(
        self, speech_feat: torch.Tensor, cache_source: torch.Tensor | None, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hift = self.hift
        batch, _, frames = speech_feat.shape
        samples = frames * int(hift.upsample_scale)
        harmonics = hift.m_source.l_linear.in_features
        noise = draw_source_noise(batch, samples, harmonics, speech_feat.device, generator)
        return self.vocode(speech_feat, cache_source, noise)

    def vocode(
        self, speech_feat: torch.Tensor, cache_source: torch.Tensor | None, noise: SourceNoise
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`inference` with its draws made (`noise`), replayed from the shape's graph."""
        batch = speech_feat.shape[0]
        if cache_source is None:
            cache_source = speech_feat.new_zeros(batch, 1, 0, dtype=torch.float32)
        weights = next(self.hift.parameters())
        inputs = (speech_feat, cache_source, noise.phase, noise.sine, noise.unused)
        key = (
            speech_feat.device,
            batch,
            speech_feat.shape[2],
            cache_source.shape[2],
            speech_feat.dtype,
            weights.dtype,
        )
        speech, source = self._graphs(key, (weights.data_ptr(), weights.dtype), inputs)
        return speech, source

    def _run(self, static: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        mel, cache_source, phase, sine, unused = static
        return self.hift.vocode_eager(mel, cache_source, None, SourceNoise(phase, sine, unused))
