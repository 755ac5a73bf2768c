"""CUDA-graph replay of HiFT's chunk synthesis: about a thousand small kernels per chunk, launch-bound eagerly.

The random draws of the neural source are made eagerly first (`draw_source_noise`, from the request's own
generator, in upstream's order), so the captured part is deterministic and equals the eager path exactly.
A graph is captured per exact shape (batch, mel frames, source-cache length, dtype): HiFT's convolutions
are not causal, so padding would change the output. Streaming repeats a few shapes (the first chunk, the
steady chunks, the cross-fade cache), so a small LRU of graphs serves nearly every chunk; a capture that
fails switches graphs off and the vocoder keeps running eagerly.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import nn

from studio.tts.device.cuda_graphs import capture_graph
from studio.tts.hift.source import SourceNoise, draw_source_noise

log = logging.getLogger(__name__)


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]  # mel, cache source, then the noise draws
    outputs: tuple[torch.Tensor, torch.Tensor]  # speech, source


class HiftGraphs:
    """`inference` with HiFT's signature that replays captured graphs, at most `max_graphs` kept (LRU)."""

    def __init__(self, hift: nn.Module, max_graphs: int = 16):
        self.hift = hift
        self.max_graphs = max_graphs
        self.enabled = True
        self.captures = 0
        self._graphs: OrderedDict[tuple, _Captured] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = None
        self._fingerprint: tuple | None = None

    def inference(
        self, speech_feat: torch.Tensor, cache_source: torch.Tensor | None, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hift = self.hift
        batch, _, frames = speech_feat.shape
        samples = frames * int(hift.upsample_scale)
        harmonics = hift.m_source.l_linear.in_features
        noise = draw_source_noise(batch, samples, harmonics, speech_feat.device, generator)
        if cache_source is None:
            cache_source = speech_feat.new_zeros(batch, 1, 0, dtype=torch.float32)
        if not self.enabled or torch.cuda.is_current_stream_capturing():
            return hift.vocode_eager(speech_feat, cache_source, None, noise)
        weights = next(hift.parameters())
        inputs = (speech_feat, cache_source, noise.phase, noise.sine, noise.unused)
        key = (speech_feat.device, batch, frames, cache_source.shape[2], speech_feat.dtype, weights.dtype)
        with self._lock:
            fingerprint = (weights.data_ptr(), weights.dtype)
            if fingerprint != self._fingerprint:
                self._drop()
                self._fingerprint = fingerprint
            captured = self._graphs.get(key)
            if captured is None:
                try:
                    captured = self._capture(inputs)
                except RuntimeError:
                    log.warning("HiFT: CUDA-graph capture failed; vocoding continues eagerly", exc_info=True)
                    self.enabled = False
                    self._drop()
                    return hift.vocode_eager(speech_feat, cache_source, None, noise)
                self._graphs[key] = captured
                self.captures += 1
                while len(self._graphs) > self.max_graphs:
                    self._graphs.popitem(last=False)
            self._graphs.move_to_end(key)
            for static, value in zip(captured.inputs, inputs, strict=True):
                static.copy_(value)
            captured.graph.replay()
            speech, source = (tensor.clone() for tensor in captured.outputs)
        return speech, source

    def _drop(self) -> None:
        self._graphs.clear()
        self._pool = None  # a pool whose graphs are all gone cannot take a new capture

    def _run(self, static: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        mel, cache_source, phase, sine, unused = static
        return self.hift.vocode_eager(mel, cache_source, None, SourceNoise(phase, sine, unused))

    def _capture(self, inputs: tuple[torch.Tensor, ...]) -> _Captured:
        static = tuple(tensor.clone() for tensor in inputs)
        graph, outputs, self._pool = capture_graph(lambda: self._run(static), static[0].device, self._pool)
        return _Captured(graph, static, outputs)
