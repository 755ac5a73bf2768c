"""CosyVoice3's graph paths with real CUDA-graph captures: the flow's graphed solve (`DiTGraphSolver`, in one
pass and a step at a time) and the batched HiFT network (`SpectrumGraphs`) against each take's own eager work.

CUDA only (skipped elsewhere); `scripts/gpu/run.sh gputests` runs it on a GPU. Tolerances allow for the GPU's
kernels choosing differently for the padded batch's shapes (cuDNN's TF32 convolutions in float32).
"""

from __future__ import annotations

import copy

import pytest
import torch

from studio.tts.cosyvoice3.flow_graphs import attach_dit_graphs
from studio.tts.cosyvoice3.hift_batch import HiftPush, attach_hift_graphs, push_many
from studio.tts.cosyvoice3.hift_stream import CausalHiftStream
from studio.tts.device.cuda_graphs import MIN_CONTEXT
from tests.tts.cosyvoice3 import test_cv3_hift_stream
from tests.tts.cosyvoice3.test_cv3_flow_graphs import Take, run_to_the_end
from tests.tts.cosyvoice3.test_cv3_flow_stream import small_flow

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

hift = test_cv3_hift_stream.hift  # the fixture: a small HiFT with weights that reach every path


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 5e-3), (torch.float16, 3e-2)])
@pytest.mark.parametrize("stepwise", [False, True], ids=["one-pass", "stepwise"])
@torch.inference_mode()
def test_captured_flow_solves_equal_each_takes_own_calls(dtype, tolerance, stepwise):
    flow = small_flow().to("cuda", dtype)
    graphed = copy.deepcopy(flow)
    solver = attach_dit_graphs(graphed)
    if stepwise:  # one Euler step of four takes, not every step of one
        solver.budget_bytes = solver.arena_bytes(8, MIN_CONTEXT, 1, dtype)
    for seeds in ((1, 2), (3, 4)):  # the second pair meets the first pair's shapes: replays
        run_to_the_end([Take(graphed, flow, 30, 150, seed=seed) for seed in seeds], tolerance)
    assert solver.captures >= 1 and solver._graphs.enabled
    assert (solver.stepwise_batches == solver.batches) if stepwise else solver.stepwise_batches == 0


@torch.inference_mode()
def test_captured_hift_network_equals_each_takes_own_pushes(hift):
    cuda = copy.deepcopy(hift).to("cuda")
    graphs = attach_hift_graphs(cuda)
    generator = torch.Generator().manual_seed(5)
    mels = [torch.randn(1, 80, 300, generator=generator).to("cuda") for _ in range(3)]
    alone = [CausalHiftStream(cuda) for _ in mels]
    together = [CausalHiftStream(cuda) for _ in mels]
    worst = 0.0
    for push in range(6):  # 50 frames a push: the same shape each round, captured, then replayed
        chunks = [mel[:, :, 50 * push : 50 * (push + 1)] for mel in mels]
        batched = push_many([HiftPush(s, c, push == 5) for s, c in zip(together, chunks, strict=True)])
        for stream, chunk, got in zip(alone, chunks, batched, strict=True):
            expected = stream.push(chunk, push == 5)
            assert got.shape == expected.shape
            if expected.numel():
                worst = max(worst, float((got - expected).abs().max()))
    assert graphs.captures >= 1 and worst <= 1e-3
