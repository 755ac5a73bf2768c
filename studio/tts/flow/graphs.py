"""CUDA-graph replay of the flow estimator: on a GPU its ~1,300 small kernels per Euler step are launch-bound.

Inputs are padded to a bucket of frames; the padding is masked out, so valid frames are unchanged (the
estimator's convolutions are causal, LayerNorm works per frame, padded keys get no attention). Each
(batch, bucket, streaming, dtype, autocast) shape is captured once, then replayed under a lock.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import torch
from torch import nn

from studio.tts.device.cuda_graphs import autocast_context, autocast_dtype, capture_graph


def pad_frames(tensor: torch.Tensor, frames: int) -> torch.Tensor:
    """Zero-pad the last (time) axis of `tensor` to `frames`."""
    return torch.nn.functional.pad(tensor, (0, frames - tensor.shape[-1]))


@dataclass
class _CapturedStep:
    graph: torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]  # static x, mask, mu, t, spks, cond
    output: torch.Tensor


class EstimatorGraphs:
    """Callable with the estimator's signature that replays captured CUDA graphs for CUDA inputs."""

    def __init__(
        self, estimator: nn.Module, bucket_frames: int = 64, max_frames: int = 2048, warmup: int = 2
    ):
        self.estimator = estimator
        self.bucket_frames = bucket_frames
        self.max_frames = max_frames
        self.warmup = warmup
        self._steps: dict[tuple, _CapturedStep] = {}
        self._lock = threading.Lock()
        self._pool = None
        self._fingerprint: tuple | None = None

    def __call__(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        mu: torch.Tensor,
        t: torch.Tensor,
        spks: torch.Tensor,
        cond: torch.Tensor,
        streaming: bool = False,
    ) -> torch.Tensor:
        frames = x.shape[2]
        padded = math.ceil(frames / self.bucket_frames) * self.bucket_frames
        if not x.is_cuda or padded > self.max_frames or torch.cuda.is_current_stream_capturing():
            return self.estimator(x, mask, mu, t, spks, cond, streaming=streaming)
        weights = next(self.estimator.parameters())
        fingerprint = (weights.data_ptr(), weights.dtype)  # moved or cast weights invalidate the graphs
        compute = autocast_dtype()
        key = (x.device, x.shape[0], padded, bool(streaming), x.dtype, compute)
        inputs = (
            pad_frames(x, padded),
            pad_frames(mask.to(x.dtype), padded),
            pad_frames(mu, padded),
            t,
            spks,
            pad_frames(cond, padded),
        )
        with self._lock:
            if fingerprint != self._fingerprint:
                self._steps.clear()
                self._pool = None  # a pool whose graphs are all gone cannot take a new capture
                self._fingerprint = fingerprint
            step = self._steps.get(key)
            if step is None:
                step = self._steps[key] = self._capture(inputs, bool(streaming), compute)
            for static, value in zip(step.inputs, inputs, strict=True):
                static.copy_(value)
            step.graph.replay()
            return step.output[:, :, :frames].clone()

    def _capture(
        self, inputs: tuple[torch.Tensor, ...], streaming: bool, compute: torch.dtype | None
    ) -> _CapturedStep:
        static = tuple(tensor.clone() for tensor in inputs)
        context = autocast_context(compute)
        graph, output, self._pool = capture_graph(
            lambda: self.estimator(*static, streaming=streaming),
            static[0].device,
            self._pool,
            context,
            self.warmup,
        )
        return _CapturedStep(graph, static, output)
