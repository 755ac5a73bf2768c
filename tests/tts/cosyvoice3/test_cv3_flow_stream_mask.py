"""CosyVoice3's streaming DiT: upstream's static chunk mask, and what it makes frames depend on.

The expected masks are written out by hand from upstream's `subsequent_chunk_mask` /
`add_optional_chunk_mask` semantics (cosyvoice/utils/mask.py): query i sees key j when j is valid and lies
in i's chunk or in the `left_chunks` chunks before it (all of them when negative); a row that would see
nothing is opened fully.
"""

from __future__ import annotations

import pytest
import torch

from studio.tts.cosyvoice3.dit import (
    CausalConvPositionEmbedding,
    DiTAttention,
    chunked_attention_mask,
    static_chunk_mask,
)
from tests.tts.cosyvoice3.test_cv3_flow_stream import small_flow


def _bool(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.bool)


@pytest.mark.parametrize(
    ("frames", "chunk", "left", "expected"),
    [
        (4, 2, -1, [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]]),  # upstream's docstring case
        (5, 2, -1, [[1, 1, 0, 0, 0]] * 2 + [[1, 1, 1, 1, 0]] * 2 + [[1, 1, 1, 1, 1]]),  # a short last chunk
        (6, 2, 1, [[1, 1, 0, 0, 0, 0]] * 2 + [[1, 1, 1, 1, 0, 0]] * 2 + [[0, 0, 1, 1, 1, 1]] * 2),
        (5, 2, 0, [[1, 1, 0, 0, 0]] * 2 + [[0, 0, 1, 1, 0]] * 2 + [[0, 0, 0, 0, 1]]),
        (3, 5, -1, [[1, 1, 1]] * 3),  # one chunk longer than the sequence
    ],
    ids=["4-by-2", "short-last-chunk", "one-left-chunk", "no-left-chunk", "one-chunk"],
)
def test_static_chunk_mask_cases(frames, chunk, left, expected):
    assert torch.equal(static_chunk_mask(frames, chunk, left), _bool(expected))


def test_static_chunk_mask_rows_from_a_first_row():
    whole = static_chunk_mask(7, 3, left_chunks=1)
    assert torch.equal(static_chunk_mask(7, 3, left_chunks=1, first_row=3), whole[3:])
    assert torch.equal(static_chunk_mask(7, 3, first_row=6), _bool([[1] * 7]))


def test_chunked_attention_mask_combines_padding_and_opens_empty_rows():
    valid = _bool([[1, 1, 1, 0], [1, 1, 0, 0]])
    every_left = chunked_attention_mask(valid, chunk_size=2, left_chunks=-1)
    assert torch.equal(every_left[0], _bool([[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]]))
    assert torch.equal(every_left[1], _bool([[1, 1, 0, 0]] * 4))
    # no left chunk: the second sequence's last chunk holds only padding, so its rows see nothing and open
    own_chunk = chunked_attention_mask(valid, chunk_size=2, left_chunks=0)
    assert torch.equal(own_chunk[0], _bool([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 0]]))
    assert torch.equal(own_chunk[1], _bool([[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]]))
    # no chunks: every valid key for every query (the offline mask)
    assert torch.equal(chunked_attention_mask(valid, chunk_size=0)[0], _bool([[1, 1, 1, 0]] * 4))
    with pytest.raises(ValueError, match="chunk size of at least 1"):
        static_chunk_mask(4, 0)


def test_attention_zeroes_frames_the_last_query_row_cannot_see():
    """Upstream keeps the output of the frames its mask's last row sees (`mask[:, 0, -1]`)."""
    torch.manual_seed(0)
    attention = DiTAttention(dim=8, heads=2, dim_head=4).eval()
    x = torch.randn(1, 6, 8)
    angles = torch.zeros(6, 4)
    with torch.inference_mode():
        out = attention(x, static_chunk_mask(6, 2, left_chunks=1).unsqueeze(0), angles)
    assert torch.all(out[0, :2] == 0) and torch.all(out[0, 2:].abs().sum(-1) > 0)


def test_position_embedding_is_causal_and_continues_across_calls():
    torch.manual_seed(0)
    embedding = CausalConvPositionEmbedding(dim=32, kernel_size=5, groups=4).eval()
    x = torch.randn(2, 40, 32)
    changed = x.clone()
    changed[:, 25:] += 1.0
    with torch.inference_mode():
        whole, later = embedding(x), embedding(changed)
        assert torch.equal(whole[:, :25], later[:, :25]) and not torch.equal(whole[:, 25:], later[:, 25:])
        zeros = torch.zeros(2, 32, 4)
        first, (conv1_input, conv2_input) = embedding.continued(x[:, :17], (zeros, zeros))
        rest, _ = embedding.continued(x[:, 17:], (conv1_input[:, :, -4:], conv2_input[:, :, -4:]))
    assert torch.allclose(torch.cat([first, rest], dim=1), whole, atol=1e-6)


def _dit_inputs(frames: int, seed: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    x, mu, cond = (torch.randn(2, 80, frames, generator=generator) for _ in range(3))
    spks = torch.randn(2, 80, generator=generator)
    return x, torch.ones(2, 1, frames), mu, torch.full((2,), 0.4), spks, cond


@pytest.mark.parametrize("boundary", [50, 100])
def test_streaming_dit_frames_ignore_every_later_chunk(boundary):
    """Inputs after a chunk boundary (noisy mel, token features, prompt mel) change: with streaming the
    frames before it keep their velocity exactly; offline they change."""
    dit = small_flow().decoder.estimator
    x, mask, mu, t, spks, cond = _dit_inputs(frames=130, seed=3)
    later = [tensor.clone() for tensor in (x, mu, cond)]
    for tensor in later:
        tensor[:, :, boundary:] += torch.randn_like(tensor[:, :, boundary:])
    with torch.inference_mode():
        streamed = dit(x, mask, mu, t, spks, cond, streaming=True)
        streamed_later = dit(later[0], mask, later[1], t, spks, later[2], streaming=True)
        offline = dit(x, mask, mu, t, spks, cond)
        offline_later = dit(later[0], mask, later[1], t, spks, later[2])
    assert torch.equal(streamed[:, :, :boundary], streamed_later[:, :, :boundary])
    assert (streamed[:, :, boundary:] - streamed_later[:, :, boundary:]).abs().max() > 1e-2
    assert (offline[:, :, :boundary] - offline_later[:, :, :boundary]).abs().max() > 1e-3


def test_streaming_dit_chunk_sees_the_chunks_before_it():
    """Chunk 1's frames depend on chunk 0's inputs (every left chunk is visible, as upstream's -1)."""
    dit = small_flow().decoder.estimator
    x, mask, mu, t, spks, cond = _dit_inputs(frames=100, seed=4)
    earlier = x.clone()
    earlier[:, :, :10] += 1.0
    with torch.inference_mode():
        streamed = dit(x, mask, mu, t, spks, cond, streaming=True)
        streamed_earlier = dit(earlier, mask, mu, t, spks, cond, streaming=True)
    assert (streamed[:, :, 50:] - streamed_earlier[:, :, 50:]).abs().max() > 1e-3
