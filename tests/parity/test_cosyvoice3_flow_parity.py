"""Our CosyVoice3 DiT estimator (studio/tts/cosyvoice3/dit.py) against the reference's (vllm-omni's port of
upstream's): the reference's state dict loads strictly into ours (the `flow.pt` key layout matches), then
the velocity for one step is compared on identical inputs, in fp32.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.parity

TOLERANCE = 1e-4
SMALL_DIT = {"dim": 64, "depth": 2, "heads": 4, "dim_head": 16, "ff_mult": 2}
DIT_COMMON = {
    "mel_dim": 80,
    "mu_dim": 80,
    "spk_dim": 80,
    "out_channels": 80,
    "static_chunk_size": 50,
    "num_decoding_left_chunks": -1,
}


def _estimator_pair(dit: dict):
    """The reference's DiT with random weights, and ours holding the same weights (loaded strictly)."""
    from vllm_omni.model_executor.models.cosyvoice3.cosyvoice3_code2wav import _build_dit_estimator

    from studio.tts.cosyvoice3.dit import DiT

    torch.manual_seed(0)
    reference = _build_dit_estimator({**dit, **DIT_COMMON}).eval()
    ours = DiT(**dit, **DIT_COMMON).eval()
    ours.load_state_dict(reference.state_dict(), strict=True)
    return reference, ours


def _estimator_inputs(frames: int, valid_frames: int, seed: int) -> tuple[torch.Tensor, ...]:
    """A CFG-doubled batch as the solver builds it: conditional row, then the unconditional one."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 80, frames, generator=generator)
    mu = torch.randn(2, 80, frames, generator=generator)
    mu[1] = 0
    cond = torch.randn(2, 80, frames, generator=generator)
    cond[1] = 0
    spks = torch.randn(2, 80, generator=generator)
    spks[1] = 0
    mask = torch.zeros(2, 1, frames)
    mask[:, :, :valid_frames] = 1
    t = torch.full((2,), 0.3)
    return x, mask, mu, t, spks, cond


def _max_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    assert ours.shape == theirs.shape
    return (ours - theirs).abs().max().item()


@pytest.mark.parametrize("valid_frames", [40, 29], ids=["all-valid", "padded-tail"])
def test_dit_estimator_matches_the_reference_for_one_step(cosyvoice3_reference, valid_frames):
    reference, ours = _estimator_pair(SMALL_DIT)
    inputs = _estimator_inputs(frames=40, valid_frames=valid_frames, seed=1)
    with torch.inference_mode():
        theirs = reference(*inputs)
        mine = ours(*inputs)
    assert theirs.abs().max() > 0.1  # a real velocity, not zeros on both sides
    assert _max_error(mine, theirs) <= TOLERANCE
