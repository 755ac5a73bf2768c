"""Joining a script's lines into one track, and its subtitles.

Between two lines goes the chosen gap of silence (each line's edges faded over a few milliseconds, so a
line that ends mid-wave does not click), or, with no gap, a short equal-power crossfade. The joiner keeps
only one crossfade's worth of audio back, so a script of any length joins in bounded memory. Each line's
position in the joined track is its subtitle cue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

EDGE_FADE_S = 0.005
CROSSFADE_S = 0.02


@dataclass(frozen=True)
class Cue:
    start_s: float
    end_s: float
    text: str
    voice: str = ""


def _ramp(n: int) -> np.ndarray:
    """0..1 over n samples, equal-power (sin^2 + cos^2 = 1 with its mirror)."""
    return np.sin(0.5 * np.pi * (np.arange(n, dtype=np.float32) + 0.5) / n).astype(np.float32)


class Joiner:
    """``add(samples, gap_s)`` line by line, then ``close()``; ``write`` receives the joined track in blocks.
    ``add`` returns the line's (start, end) in seconds of the joined track."""

    def __init__(
        self, write: Callable[[np.ndarray], None], sample_rate: int, crossfade_s: float = CROSSFADE_S
    ):
        self.write, self.rate = write, sample_rate
        self.crossfade = max(1, int(crossfade_s * sample_rate))
        self.edge = max(1, int(EDGE_FADE_S * sample_rate))
        self.written = 0  # samples handed to write
        self.tail = np.zeros(0, dtype=np.float32)  # the end of the last line, held back for a crossfade
        self.lines = 0

    def add(self, samples: np.ndarray, gap_s: float) -> tuple[float, float]:
        line = np.asarray(samples, dtype=np.float32).copy()
        first = self.lines == 0
        self.lines += 1
        gap = 0 if first else int(round(gap_s * self.rate))
        if gap > 0 or first:
            self._fade_edges(line, start=True)
            self._flush_tail(fade_out=not first)
            if gap:
                self.write(np.zeros(gap, dtype=np.float32))
                self.written += gap
            start = self.written
        else:
            overlap = min(self.crossfade, self.tail.size, line.size)
            head = self.tail[: self.tail.size - overlap]
            if head.size:
                self.write(head)
                self.written += head.size
            ramp = _ramp(overlap)
            line[:overlap] = self.tail[self.tail.size - overlap :] * ramp[::-1] + line[:overlap] * ramp
            self.tail = np.zeros(0, dtype=np.float32)
            start = self.written
        keep = min(self.crossfade, line.size)
        body = line[: line.size - keep]
        if body.size:
            self.write(body)
            self.written += body.size
        self.tail = line[line.size - keep :]
        return start / self.rate, (start + line.size) / self.rate

    def close(self) -> int:
        """Writes what is held back; the joined length in samples."""
        self._flush_tail(fade_out=True)
        return self.written

    def _fade_edges(self, line: np.ndarray, start: bool) -> None:
        n = min(self.edge, line.size)
        if n and start:
            line[:n] *= _ramp(n)

    def _flush_tail(self, fade_out: bool) -> None:
        if not self.tail.size:
            return
        tail = self.tail.copy()
        n = min(self.edge, tail.size)
        if fade_out and n:
            tail[tail.size - n :] *= _ramp(n)[::-1]
        self.write(tail)
        self.written += tail.size
        self.tail = np.zeros(0, dtype=np.float32)


def _stamp(seconds: float, separator: str) -> str:
    millis = int(round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def srt_text(cues: Iterable[Cue]) -> str:
    """SubRip: numbered cues, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, a blank line after each."""
    return "".join(
        f"{n}\n{_stamp(c.start_s, ',')} --> {_stamp(c.end_s, ',')}\n{c.text}\n\n"
        for n, c in enumerate(cues, start=1)
    )


def vtt_text(cues: Iterable[Cue]) -> str:
    """WebVTT, each cue with its voice as the speaker (``<v Name>``)."""
    body = "".join(
        f"{_stamp(c.start_s, '.')} --> {_stamp(c.end_s, '.')}\n"
        + (f"<v {c.voice}>{c.text}\n\n" if c.voice else f"{c.text}\n\n")
        for c in cues
    )
    return "WEBVTT\n\n" + body
