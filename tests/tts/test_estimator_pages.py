"""A take's estimator keys/values live in fixed pages (issue 34, items 2 and 3): written across page
boundaries and read back they equal one contiguous tensor; growing adds pages and never moves or copies the
rows a take holds (so it never needs its bytes twice); shared prompt rows stay the prompt cache's."""

from __future__ import annotations

import math

import pytest
import torch

from studio.tts.flow.streaming.batched_solve import PAGE_FRAMES, EstimatorState

SHAPE = (2, 3, 2, 2, 1)  # steps, blocks, k/v, CFG rows, heads (before frames)
HEAD_DIM = 4


def frames(n: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*SHAPE, n, HEAD_DIM, generator=generator)


def test_rows_written_in_uneven_chunks_across_pages_read_back_exactly():
    total = 3 * PAGE_FRAMES + 17
    source = frames(total)
    state = EstimatorState()
    for start, end in ((0, 25), (25, 100), (100, PAGE_FRAMES * 2), (PAGE_FRAMES * 2, total)):
        state.write(source, start, end)
        state.length = end
    assert len(state.pages) == math.ceil(total / PAGE_FRAMES)
    assert torch.equal(state.prefix(total), source)
    target = torch.zeros(*SHAPE, total + 9, HEAD_DIM)
    state.copy_prefix(target, 150)
    assert torch.equal(target[..., :150, :], source[..., :150, :]) and not target[..., 150:, :].any()


def test_growing_adds_pages_and_leaves_the_rows_held_where_they_were():
    source = frames(2 * PAGE_FRAMES + 1)
    state = EstimatorState()
    state.write(source, 0, 10)
    first = state.pages[0].data_ptr()
    state.write(source, 10, PAGE_FRAMES + 3)
    state.write(source, PAGE_FRAMES + 3, 2 * PAGE_FRAMES + 1)
    assert state.pages[0].data_ptr() == first and len(state.pages) == 3
    assert {page.shape[5] for page in state.pages} == {PAGE_FRAMES}  # one size: the allocator reuses them
    state.length = 2 * PAGE_FRAMES + 1
    assert state.nbytes == 3 * state.pages[0].nbytes


def test_shared_prompt_rows_are_read_from_the_base_and_never_written():
    prompt, own = frames(70, seed=1), frames(70 + 40, seed=2)
    state = EstimatorState(base=prompt, base_length=70, length=70, written=70)
    state.write(own, 70, 110)
    state.length = 110
    expected = torch.cat([prompt, own[..., 70:, :]], dim=5)
    assert torch.equal(state.prefix(110), expected)
    assert len(state.pages) == 1 and state.nbytes == state.pages[0].nbytes  # the base is not the take's
    with pytest.raises(RuntimeError, match="shared prompt rows"):
        state.write(own, 60, 80)


def test_pages_follow_the_compute_dtype():
    state = EstimatorState()
    state.write(frames(10), 0, 10)
    state.write(frames(20).half(), 10, 20)
    assert {page.dtype for page in state.pages} == {torch.float16}
    assert torch.allclose(state.prefix(10).float(), frames(10), atol=1e-2)


def test_float8_pages_read_back_each_vector_within_its_scales_rounding_in_half_the_bytes():
    head_dim = 64  # the flow's (scales cost 4 bytes a vector of head_dim values)
    generator = torch.Generator().manual_seed(4)
    source = torch.randn(*SHAPE, PAGE_FRAMES + 30, head_dim, generator=generator)
    source = source * torch.logspace(-3, 2, head_dim)  # magnitudes over 5 decades
    state = EstimatorState(fp8=True)
    for start, end in ((0, 40), (40, PAGE_FRAMES + 30)):
        state.write(source, start, end)
        state.length = end
    back = state.prefix(PAGE_FRAMES + 30)
    assert back.dtype == source.dtype
    # e4m3 keeps 3 mantissa bits: each value within 1/16 of its vector's largest magnitude
    error = (back - source).abs() / source.abs().amax(dim=-1, keepdim=True)
    assert float(error.max()) <= 1 / 16 and float(error.max()) > 0
    plain = EstimatorState()
    plain.write(source.half(), 0, PAGE_FRAMES + 30)
    assert state.nbytes < 0.6 * plain.nbytes


def test_zero_vectors_stay_zero_in_float8():
    source = torch.zeros(*SHAPE, 10, HEAD_DIM)
    state = EstimatorState(fp8=True)
    state.write(source, 0, 10)
    state.length = 10
    back = state.prefix(10)
    assert torch.isfinite(back).all() and not back.any()
