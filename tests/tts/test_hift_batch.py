"""HiFT of several takes' chunks in one batch (`Token2WavStream.vocode_many`, the chunk scheduler's path) gives
each take what its own `vocode` gives: its own random draws, cached mel and source, and cross-fade.

Real (small) HiFT; two copies of each take's stream, one vocoded alone and one in the batch, chunk by chunk.
"""

from __future__ import annotations

import pytest
import torch

from studio.tts import token2wav
from studio.tts.device.cuda_graphs import batch_pieces
from studio.tts.token2wav import Token2WavStream
from tests.tts.test_incremental_flow import modules, relative_error  # noqa: F401
from tests.tts.test_scheduler import make_stream

TOLERANCE = 1e-5  # float rounding: other kernels for another batch size, the inverse STFT by hand


def stream(flow, hift, seed: int) -> Token2WavStream:
    return make_stream(flow, hift, 20, seed, scheduled=False)


def mel(frames: int, seed: int) -> torch.Tensor:
    return torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(seed)) - 5


def record_batches(hift, monkeypatch) -> list[tuple[int, int]]:
    """HiFT's batched calls from now on, each as (rows, chunks): rows past the chunks are padding."""
    batches = []
    rows = hift.inference_rows

    def counting(speech_feat, cache_source, generators):
        batches.append((speech_feat.shape[0], len(generators)))
        return rows(speech_feat, cache_source, generators)

    monkeypatch.setattr(hift, "inference_rows", counting)
    return batches


@torch.inference_mode()
def test_a_batch_of_takes_chunks_equals_each_take_vocoded_alone(modules, monkeypatch):  # noqa: F811
    flow, hift = modules
    seeds = (1, 2, 3, 4, 5, 6, 7, 8)
    alone = [stream(flow, hift, seed) for seed in seeds]
    together = [stream(flow, hift, seed) for seed in seeds]
    batches = record_batches(hift, monkeypatch)
    # seven takes' chunks of one length go together (padded to eight rows), the eighth's is longer: alone
    for step, frames in enumerate((40, 30, 30)):
        lengths = [frames] * 7 + [frames + 7]
        mels = [mel(n, 10 * step + k) for k, n in enumerate(lengths)]
        finalize = step == 2
        expected = [s.vocode(m, finalize) for s, m in zip(alone, mels, strict=True)]
        got = Token2WavStream.vocode_many([(s, m, finalize) for s, m in zip(together, mels, strict=True)])
        for ours, theirs in zip(got, expected, strict=True):
            assert relative_error(ours, theirs) < TOLERANCE
    assert batches == [(8, 7)] * 3
    # the draws were each take's own: another seed gives another waveform
    other = stream(flow, hift, 99)
    first = mel(40, 0)
    assert relative_error(other.vocode(first, False), stream(flow, hift, 1).vocode(first, False)) > 1e-3


def test_batch_pieces_cover_every_batch_with_a_few_row_counts():
    row_counts = set()
    for size in range(1, 129):
        pieces = batch_pieces(size)
        assert sum(real for real, _ in pieces) == size
        for real, rows in pieces:
            assert rows & (rows - 1) == 0 and real <= rows  # a power of two, at least the real rows
            assert rows - real <= real / 5  # padding costs at most a fifth more work
            row_counts.add(rows)
    assert row_counts == {1, 2, 4, 8, 16, 32, 64, 128}


@torch.inference_mode()
def test_a_large_batch_runs_in_pieces_of_a_few_row_counts_and_each_chunk_equals_its_own(
    modules,  # noqa: F811
    monkeypatch,
):
    """21 chunks of one shape: pieces of 16, 4 and 1 rows (graphs for three row counts, not one for 24 rows of
    which three padded), every chunk its own take's speech."""
    flow, hift = modules
    batches = record_batches(hift, monkeypatch)
    seeds = range(1, 22)
    together = [stream(flow, hift, seed) for seed in seeds]
    alone = [stream(flow, hift, seed) for seed in seeds]
    mels = [mel(20, seed) for seed in seeds]
    got = Token2WavStream.vocode_many([(s, m, False) for s, m in zip(together, mels, strict=True)])
    assert batches == [(16, 16), (4, 4), (1, 1)]
    for ours, take, m in zip(got, alone, mels, strict=True):
        assert relative_error(ours, take.vocode(m, False)) < TOLERANCE


@torch.inference_mode()
def test_a_failed_batch_runs_again_chunk_by_chunk_and_only_the_culprit_fails(modules, monkeypatch):  # noqa: F811
    flow, hift = modules

    def failing(*args):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(hift, "inference_rows", failing)
    takes = [stream(flow, hift, seed) for seed in (1, 2, 3)]
    reference = [stream(flow, hift, seed) for seed in (1, 2, 3)]
    mels = [mel(40, 1), mel(40, 2), torch.full((1, 80, 40), float("nan"))]
    broken = takes[2]
    monkeypatch.setattr(broken, "vocode", lambda mel, finalize: (_ for _ in ()).throw(ValueError("bad mel")))
    got = Token2WavStream.vocode_many([(s, m, False) for s, m in zip(takes, mels, strict=True)])
    for i in range(2):
        assert relative_error(got[i], reference[i].vocode(mels[i], False)) < TOLERANCE
    assert isinstance(got[2], ValueError)


@torch.inference_mode()
def test_batches_are_split_to_stay_within_their_frames(modules, monkeypatch):  # noqa: F811
    flow, hift = modules
    batches = record_batches(hift, monkeypatch)
    monkeypatch.setattr(token2wav, "HIFT_BATCH_FRAMES", 100)  # two chunks of 40 frames at most
    takes = [stream(flow, hift, seed) for seed in (1, 2, 3, 4, 5)]
    reference = [stream(flow, hift, seed) for seed in (1, 2, 3, 4, 5)]
    mels = [mel(40, seed) for seed in range(5)]
    got = Token2WavStream.vocode_many([(s, m, False) for s, m in zip(takes, mels, strict=True)])
    assert batches == [(2, 2), (2, 2)]  # and the fifth alone, through its own `vocode`
    for ours, take, m in zip(got, reference, mels, strict=True):
        assert relative_error(ours, take.vocode(m, False)) < TOLERANCE


@torch.inference_mode()
def test_a_limit_of_zero_vocodes_each_chunk_alone(modules, monkeypatch):  # noqa: F811
    flow, hift = modules
    monkeypatch.setenv("STUDIO_HIFT_BATCH_FRAMES", "0")
    monkeypatch.setattr(hift, "inference_rows", lambda *args: pytest.fail("batched though switched off"))
    takes = [stream(flow, hift, seed) for seed in (1, 2)]
    got = Token2WavStream.vocode_many([(s, mel(40, 1), False) for s in takes])
    assert all(isinstance(speech, torch.Tensor) and speech.shape[1] > 0 for speech in got)
