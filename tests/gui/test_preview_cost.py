"""A long streamed take costs the preview no more per chunk than a short one (issue 37, item 1): the
waveform draws a bounded number of points and each chunk's work and memory follow the chunk, not the take;
what it draws is still the take's min/max outline, and the whole take is there for playback."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest

from studio.gui.playback.preview import PreviewPanel
from studio.gui.playback.waveform import MAX_COLUMNS, Envelope

pytestmark = pytest.mark.gui

RATE = 24000
#: drawn points per curve the preview may use: about a wide screen's pixel columns, whatever the take's length
MOST_POINTS = 4096


def engine_chunk_lengths(seconds: float, sentence_s: float = 9.4) -> Iterator[int]:
    """Chunk lengths in samples as the engine streams them: per sentence 1 s, 2 s, then 4 s, and the rest."""
    left = int(seconds * RATE)
    while left > 0:
        sentence = min(left, int(sentence_s * RATE))
        left -= sentence
        for hop_s in (1, 2, 4, 4, 4, 4):
            size = min(sentence, hop_s * RATE)
            if size <= 0:
                break
            sentence -= size
            yield size
        if sentence > 0:
            yield sentence


def _chunk(size: int, start: int) -> np.ndarray:
    return (0.3 * np.sin((start + np.arange(size)) * 0.05)).astype(np.float32)


def _points_drawn(panel: PreviewPanel) -> int:
    xs, _ys = panel.waveform._upper.getData()
    return 0 if xs is None else len(xs)


def test_a_long_take_draws_a_bounded_number_of_points_and_each_chunk_costs_the_same(qtbot):
    panel = PreviewPanel()
    qtbot.addWidget(panel)
    panel.begin_take(streaming=True)
    done = 0
    tracemalloc.start()
    try:
        for size in engine_chunk_lengths(15 * 60):
            chunk = _chunk(size, done)
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            panel.add_chunk(chunk, RATE, 0.4)
            used = tracemalloc.get_traced_memory()[1] - before
            done += size
            at = f"at {done / RATE:.0f} s"
            assert _points_drawn(panel) <= MOST_POINTS, f"{_points_drawn(panel)} points drawn {at}"
            # the memory a chunk needs follows the chunk (a copy, its outline), never the take so far
            assert used <= 4 * chunk.nbytes + 2_000_000, f"a {size}-sample chunk used {used} bytes {at}"
    finally:
        tracemalloc.stop()
    assert panel.waveform.duration == pytest.approx(15 * 60)


def test_the_outline_of_a_long_take_shows_a_click_where_it_is(qtbot):
    panel = PreviewPanel()
    qtbot.addWidget(panel)
    panel.begin_take(streaming=True)
    click_at = int(100.0 * RATE)
    sent = []
    done = 0
    for size in engine_chunk_lengths(180):
        chunk = 0.05 * _chunk(size, done)
        if done <= click_at < done + size:
            chunk[click_at - done] = -0.9
            chunk[click_at - done + 1] = 0.8
        panel.add_chunk(chunk, RATE, 0.4)
        sent.append(chunk)
        done += size
    waveform = panel.waveform
    times, highs = waveform._upper.getData()
    _times, lows = waveform._lower.getData()
    assert len(times) <= MOST_POINTS
    column_s = times[1] - times[0]
    assert times[np.argmax(highs)] == pytest.approx(100.0, abs=column_s)
    assert times[np.argmin(lows)] == pytest.approx(100.0, abs=column_s)
    assert highs.max() == pytest.approx(0.8) and lows.min() == pytest.approx(-0.9)
    assert np.array_equal(waveform.samples, np.concatenate(sent))  # what plays once the take is stored


def test_a_whole_take_set_at_once_is_drawn_as_few_points_as_a_streamed_one(qtbot):
    panel = PreviewPanel()
    qtbot.addWidget(panel)
    audio = _chunk(10 * 60 * RATE, 0)
    panel.waveform.set_audio(audio, RATE)
    times, highs = panel.waveform._upper.getData()
    assert len(times) <= MOST_POINTS
    assert times[-1] < 600.0 <= times[-1] + 2 * (times[1] - times[0])
    assert highs.max() == pytest.approx(audio.max())


@pytest.mark.parametrize("seed", range(5))
def test_the_outline_kept_chunk_by_chunk_is_the_min_and_max_of_each_column(seed):
    rng = np.random.default_rng(seed)
    audio = rng.standard_normal(int(rng.integers(1, 2_000_000))).astype(np.float32)
    outline = Envelope(RATE)
    cuts = np.sort(rng.integers(0, audio.size, size=int(rng.integers(0, 60))))
    for piece in np.split(audio, cuts):
        outline.extend(piece)
    assert outline.total == audio.size and outline.count <= MAX_COLUMNS
    assert outline.count == -(-audio.size // outline.span)
    starts = np.arange(outline.count) * outline.span
    assert np.array_equal(outline.lows, np.minimum.reduceat(audio, starts))
    assert np.array_equal(outline.highs, np.maximum.reduceat(audio, starts))
    assert np.allclose(outline.times, starts / RATE)
    assert outline.peak == pytest.approx(float(np.abs(audio).max()))


def test_an_outline_needs_a_positive_sample_rate():
    with pytest.raises(ValueError, match="sample rate must be positive"):
        Envelope(0)
