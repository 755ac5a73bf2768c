"""The script format, the joiner (gaps, crossfades, no clicks) and the subtitles it times."""

from __future__ import annotations

import itertools
import re
import tracemalloc

import numpy as np
import pytest

from studio.script.assemble import CROSSFADE_S, Cue, Joiner, srt_text, vtt_text
from studio.script.parse import MAX_LINE_CHARS, ScriptError, parse_lines, read_script, script_summary


def test_prefixes_name_voices_and_instructions_and_blank_lines_are_paragraphs():
    lines = list(parse_lines([
        "Opening words before any prefix.\n",
        "[Alice]  Hello   there.\n",
        "Still Alice.\n",
        "\n",
        "\n",
        "[Bob|Speak slowly, like a tired man] Hi, Alice.\n",
        "[|Whisper] Bob whispers now.\r\n",
        "[ alice ] Back to her.",
    ], default_voice="Narrator"))  # fmt: skip
    assert [(x.number, x.source_line, x.voice, x.instruction, x.paragraph_before, x.text) for x in lines] == [
        (1, 1, "Narrator", "", False, "Opening words before any prefix."),
        (2, 2, "Alice", "", False, "Hello there."),
        (3, 3, "Alice", "", False, "Still Alice."),
        (4, 6, "Bob", "Speak slowly, like a tired man", True, "Hi, Alice."),
        (5, 7, "Bob", "Whisper", False, "Bob whispers now."),
        (6, 8, "alice", "", False, "Back to her."),
    ]
    count, voices = script_summary(lines)
    assert count == 6 and voices == {"Narrator": 1, "Alice": 3, "Bob": 2}  # any case is the same voice


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        (["[Alice]   \n"], "line 1: a voice prefix with nothing to say"),
        (["A line with no voice.\n"], "line 1: no voice"),
        (["\n", "[A] " + "x" * (MAX_LINE_CHARS + 1)], f"line 2: {MAX_LINE_CHARS + 1} characters"),
    ],
)
def test_bad_lines_are_named_by_their_line_number(lines, words):
    with pytest.raises(ScriptError, match=re.escape(words)):
        list(parse_lines(lines))


def test_a_file_that_is_not_utf8_says_so(tmp_path):
    path = tmp_path / "script.txt"
    path.write_bytes(b"[A] caf\xe9\n")
    with pytest.raises(ScriptError, match="not UTF-8"):
        list(read_script(path))
    with pytest.raises(ScriptError, match="no script at"):
        list(read_script(tmp_path / "missing.txt"))


def test_a_100000_line_script_streams_in_bounded_memory():
    source = (f"[Voice{i % 3}] Line number {i} of a very long book.\n" for i in range(100_000))
    first = list(itertools.islice(parse_lines(source), 3))
    assert [line.number for line in first] == [1, 2, 3]  # the rest is not read yet
    tracemalloc.start()
    count, voices = script_summary(parse_lines(f"[V{i % 3}] Line {i}.\n" for i in range(100_000)))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count == 100_000 and len(voices) == 3 and peak < 1 << 20


def _tone(seconds: float, rate: int, freq: float, phase: float = 0.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.8 * np.sin(2 * np.pi * freq * t + phase)).astype(np.float32)


def _join(parts, gaps, rate):
    blocks = []
    joiner = Joiner(blocks.append, rate)
    cues = [joiner.add(part, gap) for part, gap in zip(parts, gaps, strict=True)]
    total = joiner.close()
    joined = np.concatenate(blocks)
    assert joined.size == total
    return joined, cues


def test_with_gaps_the_join_is_the_lines_plus_the_gaps_and_the_cues_are_where_the_lines_are():
    rate = 24000
    parts = [_tone(0.5, rate, 220), _tone(0.3, rate, 330, 1.0), _tone(0.7, rate, 440, 2.0)]
    joined, cues = _join(parts, [0.0, 0.25, 0.75], rate)
    assert joined.size == sum(p.size for p in parts) + int(0.25 * rate) + int(0.75 * rate)
    for (start, end), part in zip(cues, parts, strict=True):
        a, b = round(start * rate), round(end * rate)
        assert b - a == part.size
        middle = slice(a + 240, b - 240)  # past the 5 ms edge fades the line is untouched
        assert np.array_equal(joined[middle], part[240 : part.size - 240])
    assert not np.any(joined[round(cues[0][1] * rate) : round(cues[1][0] * rate)])  # the gap is silence


def test_lines_that_end_mid_wave_never_click():
    rate = 24000
    parts = [_tone(0.51, rate, 997, 0.3), _tone(0.43, rate, 613, 1.7), _tone(0.37, rate, 1201, 2.9)]
    steepest = max(np.max(np.abs(np.diff(p))) for p in parts)  # the lines' own steepest step
    cut = np.concatenate([[0.0], *parts, [0.0]])
    assert np.max(np.abs(np.diff(cut))) > 2 * steepest  # butted together they would click
    for gaps, bound in (([0, 0.2, 0.2], 1.01), ([0, 0, 0], np.sqrt(2))):  # silence between, or crossfaded
        joined, _ = _join(parts, gaps, rate)  # a crossfade adds two slopes weighted a, b with a^2 + b^2 = 1
        assert np.max(np.abs(np.diff(np.concatenate([[0.0], joined, [0.0]])))) <= steepest * bound


def test_without_a_gap_lines_crossfade_with_equal_power():
    rate = 24000
    parts = [_tone(0.5, rate, 220), _tone(0.5, rate, 220)]  # the same tone, in phase: no dip at the join
    joined, cues = _join(parts, [0, 0], rate)
    overlap = int(CROSSFADE_S * rate)
    assert joined.size == 2 * parts[0].size - overlap and cues[1][0] == pytest.approx(0.5 - CROSSFADE_S)
    noise = np.random.default_rng(0).standard_normal((2, rate)).astype(np.float32) * 0.1
    joined, _ = _join(list(noise), [0, 0], rate)  # uncorrelated: equal power keeps the level at the join
    seam = joined[rate - overlap : rate]
    assert np.sqrt(np.mean(seam**2)) == pytest.approx(0.1, rel=0.25)


def test_subtitles_are_srt_and_webvtt_with_the_cue_times():
    cues = [Cue(0.0, 1.2345, "Hello.", "Alice"), Cue(3661.5, 3662.0, "An hour later.", "Bob")]
    assert srt_text(cues) == (
        "1\n00:00:00,000 --> 00:00:01,234\nHello.\n\n2\n01:01:01,500 --> 01:01:02,000\nAn hour later.\n\n"
    )
    vtt = vtt_text(cues)
    assert vtt.startswith("WEBVTT\n\n") and "01:01:01.500 --> 01:01:02.000\n<v Bob>An hour later." in vtt
