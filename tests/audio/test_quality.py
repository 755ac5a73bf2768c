"""The reference quality meter grades made signals as a listener would: clean speech good; noise, clipping,
a reverberant room, a long pause, a quiet voice or too little speech each named, with advice."""

from __future__ import annotations

import numpy as np
import pytest
from audio_signals import synthetic_speech
from scipy.signal import fftconvolve

from studio.audio.clean import clean_prompt
from studio.audio.quality import GOOD, POOR, USABLE, assess_reference

RATE = 24000
SYLLABLES = [(0.3 + 0.45 * i, 0.65 + 0.45 * i) for i in range(20)]  # ~9 s of speech-like syllables


@pytest.fixture(scope="module")
def speech():
    return synthetic_speech(RATE, SYLLABLES) * 0.8


def _noise(size, level, seed=0):
    return level * np.random.default_rng(seed).standard_normal(size)


def _room(signal, rt60_s, seed=1):
    """The signal in a room: convolved with exponentially decaying noise (60 dB down after ``rt60_s``)."""
    t = np.arange(int(1.5 * rt60_s * RATE)) / RATE
    response = np.random.default_rng(seed).standard_normal(t.size) * np.exp(-6.91 * t / rt60_s)
    response[0] = 1.0
    wet = fftconvolve(signal, response)[: signal.size]
    return 0.7 * wet / np.abs(wet).max()


def _grade(signal):
    return assess_reference(np.asarray(signal, np.float32), RATE)


def _codes(report):
    return {p.code: p.severity for p in report.problems}


def test_clean_speech_is_good(speech):
    report = _grade(speech + _noise(speech.size, 0.0005))
    assert report.verdict == GOOD and report.problems == [] and report.measures["snr_db"] > 30


def test_noisy_speech_is_poor_and_advises_a_quieter_room(speech):
    report = _grade(speech + _noise(speech.size, 0.05))
    assert report.verdict == POOR and _codes(report) == {"noisy": POOR}
    assert "quieter room" in report.problems[0].advice


def test_clipped_speech_is_poor_and_advises_lower_gain(speech):
    report = _grade(np.clip(speech * 4, -0.9, 0.9))
    assert report.verdict == POOR and _codes(report)["clipped"] == POOR
    assert "gain" in next(p.advice for p in report.problems if p.code == "clipped")


def test_a_reverberant_room_is_heard(speech):
    dry = _grade(speech + _noise(speech.size, 0.0005))
    wet = _grade(_room(speech, rt60_s=0.9) + _noise(speech.size, 0.0005))
    assert "echo" in _codes(wet) and wet.verdict in (USABLE, POOR)
    assert wet.measures["echo_s"] > 2 * dry.measures["echo_s"]
    assert "room" in next(p.advice for p in wet.problems if p.code == "echo")


def test_a_long_pause_is_named_with_where_to_cut(speech):
    cut = int(4.5 * RATE)
    signal = np.concatenate([speech[:cut], np.zeros(4 * RATE), speech[cut:]])
    report = _grade(signal + _noise(signal.size, 0.0005))
    (pause,) = [p for p in report.problems if p.code == "pause"]
    assert report.verdict == USABLE and "cut the 4 s pause at 4." in pause.advice


def test_a_quiet_voice_and_too_little_speech_are_poor(speech):
    assert _codes(_grade(speech * 0.005 + _noise(speech.size, 0.0000025)))["quiet"] == POOR
    short = _grade(speech[: int(2.2 * RATE)] + _noise(int(2.2 * RATE), 0.0005))
    assert _codes(short)["short"] == POOR and "record more speech" in short.problems[0].advice


def test_silence_has_no_speech_and_the_clean_report_carries_the_verdict(speech):
    assert _grade(np.zeros(RATE * 3)).verdict == POOR
    result = clean_prompt((speech + _noise(speech.size, 0.05)).astype(np.float32), RATE)
    assert result.quality.verdict == POOR and result.report.quality["verdict"] == POOR
    assert "Reference quality: poor" in result.report.text()
