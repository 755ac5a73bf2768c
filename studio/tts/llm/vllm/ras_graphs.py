"""RAS's draw for the rows that lead vLLM's batch, replayed as one CUDA graph per batch size.

One RAS step is ~40 small kernels on one row of 6,564 logits: launch-bound. Replayed from a graph it is one
launch, plus three outside it: the logits copied into the graph's input, and the row made one-hot on the draw
(the H200, one stream: 2.62 -> 2.01 ms a token, greedy's cost). A graph reads only tensors that stay where they
are while requests come and go: the processor's per-row tables (parameters, the rings of recent draws), its stop
row, and two inputs of this module (logits, steps and uniform numbers), so it serves every batch of its size.
Any of them reallocated (the tables grow, the vocabulary or the logits' dtype change) drops the graphs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from studio.tts.device.cuda_graphs import capture_graph

if TYPE_CHECKING:
    from studio.tts.llm.vllm.sampling import RasLogitsProcessor, _Batch


class RasGraphs:
    """The captured draws of one processor, by (rows, top-k width)."""

    def __init__(self, device: torch.device):
        self.device = device
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._pool = None
        self._fingerprint: tuple | None = None
        self._logits = torch.empty(0, 0, device=device)  # the captured draws' input: leading rows' logits
        self._steps = torch.empty(0, dtype=torch.int64, device=device)  # steps, then the uniforms' bits
        self.captures = 0

    def draw(self, processor: RasLogitsProcessor, batch: _Batch, logits: torch.Tensor) -> torch.Tensor:
        """`processor.draw_leading` for `batch` (its rows lead `logits`), from the graph of its size."""
        n, capacity = len(batch.reqs), processor.params.shape[0]
        if self._logits.shape != (capacity, logits.shape[1]) or self._logits.dtype != logits.dtype:
            self._logits = torch.empty(capacity, logits.shape[1], dtype=logits.dtype, device=self.device)
            self._steps = torch.empty(2 * capacity, dtype=torch.int64, device=self.device)
        fingerprint = tuple(
            t.data_ptr()
            for t in (processor.params, processor.ring_tokens, processor.ring_steps, batch.stop_row)
        ) + (processor.ring_tokens.shape[1], self._logits.data_ptr())
        if fingerprint != self._fingerprint:
            self._graphs.clear()
            self._pool = None  # a pool whose graphs are all gone cannot take a new capture: a new one
            self._fingerprint = fingerprint
        self._logits[:n].copy_(logits[:n])
        processor._steps(batch, into=self._steps)
        key = (n, batch.head_allowed.shape[1])
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._graphs[key] = self._capture(processor, batch)
        graph, drawn = entry
        graph.replay()
        return drawn

    def _capture(
        self, processor: RasLogitsProcessor, batch: _Batch
    ) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        n = len(batch.reqs)
        steps, uniforms = self._steps[:n], self._steps[n : 2 * n].view(torch.float64)
        # The warm-up run records its draw in the rings: put them back, so the replay sees this step's window.
        rings = processor.ring_tokens[:n].clone(), processor.ring_steps[:n].clone()

        def run() -> torch.Tensor:  # the batch's columns computed inside: their memory is the graph's own
            return processor.draw_leading(processor.resident_batch(batch), self._logits[:n], steps, uniforms)

        graph, drawn, self._pool = capture_graph(run, self.device, self._pool)
        processor.ring_tokens[:n].copy_(rings[0])
        processor.ring_steps[:n].copy_(rings[1])
        self.captures += 1
        return graph, drawn
