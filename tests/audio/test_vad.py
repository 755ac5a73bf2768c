"""Voice activity: clicks and hum are not speech; cut offers fall in pauses, or at the quietest spot."""

from __future__ import annotations

import numpy as np
import soxr
from audio_signals import synthetic_speech

from studio.audio import vad


def at_16k(speech):
    return soxr.resample(speech.samples, speech.sample_rate, 16000).astype(np.float32)


def test_a_click_and_mains_hum_before_the_speech_are_not_kept(espeak_speech):
    speech = espeak_speech.padded(1.0, 1.0)
    x = at_16k(speech)
    t = np.arange(len(x)) / 16000
    x += 0.01 * np.sin(2 * np.pi * 50 * t).astype(np.float32)  # hum, 40 dB down
    x[int(0.3 * 16000) : int(0.32 * 16000)] += 0.8  # a 20 ms click at 0.3 s
    start, end = vad.speech_bounds(x, pad_s=0.0)
    assert abs(start - speech.start_s) <= 0.1
    assert abs(end - speech.end_s) <= 0.1


def test_speech_bounds_is_none_without_speech():
    assert vad.speech_bounds(np.zeros(16000, dtype=np.float32)) is None
    assert vad.speech_segments(np.zeros(100, dtype=np.float32)) == []


def test_cut_offers_prefer_long_pauses_within_the_limit():
    sylls, t = [], 0.2
    for i in range(70):
        sylls.append((t, t + 0.3))
        t += 0.45 + (1.0 if i == 40 else 0.0)  # one long pause, after about 18.6 s
    x = synthetic_speech(16000, sylls)
    offers = vad.propose_cuts(x, max_s=30.0, min_s=3.0)
    pause_start, pause_end = sylls[40][1], sylls[41][0]
    assert pause_start < offers[0].time_s < pause_end and offers[0].pause_s > 1.0
    assert all(3.0 <= o.time_s <= 30.0 for o in offers)
    assert vad.propose_cuts(x[: 20 * 16000], max_s=30.0) == []  # short enough: nothing to offer


def test_continuous_sound_gets_a_quietest_spot_offer():
    t = np.arange(40 * 16000) / 16000
    x = (0.3 * np.sin(2 * np.pi * 200 * t) * (1 + 0.5 * np.sin(2 * np.pi * 0.3 * t))).astype(np.float32)
    offers = vad.propose_cuts(x, max_s=30.0, min_s=3.0, segments=[vad.SpeechSegment(0.0, 40.0)])
    assert len(offers) == 1 and offers[0].kind == "quietest"
    assert 28.0 <= offers[0].time_s <= 30.0
    envelope_minima = (0.75 + np.arange(20)) / 0.3  # where 1 + 0.5 sin(2 pi 0.3 t) is lowest
    expected = envelope_minima[(envelope_minima >= 28.0) & (envelope_minima <= 30.0)][0]
    assert abs(offers[0].time_s - expected) < 0.1
