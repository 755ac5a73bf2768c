"""The users' workloads, for `bench --workload` and benchmarks/load_http.py alike (no torch, no Qt).

A workload is a seeded, fixed distribution of take lengths in seconds of audio, several voices, and texts
sized to the lengths. Random weights never emit a stop id, so a take runs to its token bound: in process
the bound is the take's exact speech tokens (``speech_tokens``); through the server, which bounds a take by
its text (20 speech tokens per text token), the text has ``text_tokens`` words (common words are one
token each). Arrivals are closed-loop (N clients back to back) or open-loop (Poisson at a rate).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

TOKENS_PER_SECOND = 25  # speech tokens per second of audio
SPEECH_TOKENS_PER_TEXT_TOKEN = 20  # the LM's length bound: a take without stop ids runs to 20x its text
VOICES = 4
WORDS = (
    "the studio reads every line with care and keeps the voice steady while the story moves "
    "from the quiet room to the open road where people talk about the day and the night"
).split()


@dataclass(frozen=True)
class Workload:
    """Take lengths: log-normal around ``median_s`` (spread ``sigma``) clipped to [low_s, high_s];
    ``sigma`` 0: every take is ``median_s``."""

    name: str
    description: str
    median_s: float
    sigma: float
    low_s: float
    high_s: float

    def seconds(self, rng: random.Random) -> float:
        if self.sigma == 0:
            return self.median_s
        return min(self.high_s, max(self.low_s, self.median_s * math.exp(rng.gauss(0.0, self.sigma))))


WORKLOADS = {
    w.name: w
    for w in (
        Workload("sentences", "sentences read aloud: 2-30 s, median 8 s", 8.0, 0.55, 2.0, 30.0),
        Workload("script", "script lines: one sentence or two, 1.5-25 s, median 5 s", 5.0, 0.7, 1.5, 25.0),
        Workload("short", "4 s takes (bench --tokens 100)", 4.0, 0.0, 4.0, 4.0),
        Workload("long", "20 s takes (bench --tokens 500)", 20.0, 0.0, 20.0, 20.0),
    )
}


@dataclass(frozen=True)
class Take:
    index: int
    seconds: float  # the audio it runs to
    speech_tokens: int  # its exact token bound (in process)
    text: str  # ``speech_tokens / 20`` words: the server's bound lands on the same length
    voice: int  # 0 .. VOICES - 1


def text_of(words: int, rng: random.Random) -> str:
    chosen = [rng.choice(WORDS) for _ in range(max(1, words))]
    return " ".join(chosen).capitalize() + "."


def takes(
    name: str,
    count: int,
    seed: int = 0,
    voices: int = VOICES,
    speech_tokens_per_text_token: int = SPEECH_TOKENS_PER_TEXT_TOKEN,
) -> list[Take]:
    """``count`` takes of workload ``name``; the same seed gives the same takes on every machine. A take's text
    has ``speech_tokens / speech_tokens_per_text_token`` words (default: its length is its text's bound)."""
    workload = WORKLOADS[name]
    rng = random.Random(f"{name}:{seed}")
    out = []
    for index in range(count):
        seconds = workload.seconds(rng)
        tokens = max(1, round(seconds * TOKENS_PER_SECOND))
        words = max(1, round(tokens / speech_tokens_per_text_token) - 1)  # the full stop is a token too
        out.append(Take(index, tokens / TOKENS_PER_SECOND, tokens, text_of(words, rng), index % voices))
    return out


def poisson_arrivals(rate: float, count: int, seed: int = 0) -> list[float]:
    """Seconds from the start at which each of ``count`` takes arrives, at ``rate`` takes per second."""
    rng = random.Random(f"arrivals:{rate}:{seed}")
    at, out = 0.0, []
    for _ in range(count):
        at += rng.expovariate(rate)
        out.append(at)
    return out


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50/p95/p99 (nearest rank), average and maximum; None for each when there are no values."""
    if not values:
        return {k: None for k in ("p50", "p95", "p99", "avg", "max")}
    ordered = sorted(values)

    def rank(share: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]

    average = sum(ordered) / len(ordered)
    return {"p50": rank(0.5), "p95": rank(0.95), "p99": rank(0.99), "avg": average, "max": ordered[-1]}


def underruns(arrivals: list[tuple[float, float]]) -> tuple[int, float]:
    """(chunks that arrived after the audio before them had finished playing, seconds of silence), for
    chunks given as (arrival time, audio seconds) in order; playback starts at the first chunk."""
    count, silence, played_until = 0, 0.0, None
    for arrived, seconds in arrivals:
        if played_until is None:
            played_until = arrived
        elif arrived > played_until:
            count += 1
            silence += arrived - played_until
            played_until = arrived
        played_until += seconds
    return count, silence


GOOD_FIRST_AUDIO_S = 0.5  # goodput: takes with first audio within this and no underrun


def level_figures(records: list[dict], wall: float) -> dict:
    """One level's figures from its takes' records (``first_audio_s``, ``audio_s``, ``underruns``,
    ``error``): the keys `bench --workload` and load_http.py both write."""
    done = [r for r in records if not r.get("error")]
    good = [r for r in done if r["underruns"] == 0 and r["first_audio_s"] <= GOOD_FIRST_AUDIO_S]
    messages = sorted({r["error"] for r in records if r.get("error")})
    return {
        "takes": len(records),
        "errors": len(records) - len(done),
        "error_messages": messages[:5],
        "underruns": sum(r["underruns"] for r in done),
        "takes_with_underrun": sum(1 for r in done if r["underruns"]),
        "underrun_s": sum(r.get("underrun_s", 0.0) for r in done),
        "first_audio_s": percentiles([r["first_audio_s"] for r in done]),
        "audio_seconds": sum(r["audio_s"] for r in done),
        "take_audio_s": percentiles([r["audio_s"] for r in done]),  # as run (HTTP: the server's bound)
        "audio_seconds_per_second": sum(r["audio_s"] for r in done) / wall if wall > 0 else 0.0,
        "goodput_takes_per_s": len(good) / wall if wall > 0 else 0.0,
        "goodput_share": len(good) / len(records) if records else 0.0,
        "wall_s": wall,
        "records": [_rounded(record) for record in sorted(records, key=lambda r: r.get("index", 0))],
    }


def _rounded(record: dict) -> dict:
    """A take's record as the JSON keeps it (which take is slow, and why, must be readable from a GPU run)."""
    return {key: round(value, 4) if isinstance(value, float) else value for key, value in record.items()}
