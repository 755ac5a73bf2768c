"""Loading: every readable format, rate, depth and channel count to float32 mono; each bad input its error."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import soundfile as sf
from audio_signals import sparse_long_wav

from studio.audio import errors
from studio.audio.io import load_audio, probe

RATE = 16000


def tone(sr: int, seconds: float = 0.5, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(sr * seconds)) / sr
    fade = np.minimum(1.0, np.minimum(t, t[-1] - t) / 0.05)  # no clicks for lossy codecs to smear
    return (amp * fade * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


@pytest.mark.parametrize(
    ("fmt", "subtype", "sr", "tolerance"),
    [
        ("WAV", "PCM_16", 8000, 1e-4),
        ("WAV", "PCM_24", 44100, 1e-6),
        ("WAV", "PCM_32", 96000, 1e-6),
        ("WAV", "FLOAT", 192000, 0.0),
        ("WAV", "DOUBLE", 22050, 1e-7),
        ("WAV", "PCM_U8", 11025, 1e-2),
        ("FLAC", "PCM_16", 48000, 1e-4),
        ("FLAC", "PCM_24", 88200, 1e-6),
        ("AIFF", "PCM_16", 32000, 1e-4),
        ("OGG", "VORBIS", 24000, None),
        ("OGG", "OPUS", 48000, None),
        ("MP3", "MPEG_LAYER_III", 44100, None),
    ],
)
def test_loads_formats_and_rates_as_float32_mono(tmp_path, fmt, subtype, sr, tolerance):
    x = tone(sr)
    path = tmp_path / f"in.{fmt.lower()}"
    sf.write(path, x, sr, format=fmt, subtype=subtype)
    audio = load_audio(path)
    assert audio.samples.dtype == np.float32 and audio.samples.ndim == 1
    assert audio.sample_rate == sr
    assert audio.info.format == fmt and audio.info.subtype == subtype
    if tolerance is not None:  # lossless: the samples come back
        assert len(audio.samples) == len(x)
        np.testing.assert_allclose(audio.samples, x, atol=tolerance)
    else:  # lossy codecs: same length and level, roughly
        assert abs(len(audio.samples) - len(x)) <= sr * 0.1
        level_db = 20 * np.log10(np.std(audio.samples) / np.std(x))
        assert abs(level_db) < 1.0


@pytest.mark.parametrize("channels", [2, 6])
def test_multichannel_is_averaged(tmp_path, channels):
    x = tone(RATE)
    gains = np.linspace(1.0, 0.2, channels, dtype=np.float32)
    sf.write(tmp_path / "multi.wav", np.outer(x, gains), RATE, subtype="FLOAT")
    audio = load_audio(tmp_path / "multi.wav")
    np.testing.assert_allclose(audio.samples, x * gains.mean(), atol=1e-6)
    assert audio.downmix == f"mean of {channels} channels"


def test_channels_in_opposite_polarity_do_not_cancel(tmp_path):
    x = tone(RATE)
    sf.write(tmp_path / "inverted.wav", np.stack([x, -0.9 * x], axis=1), RATE, subtype="FLOAT")
    audio = load_audio(tmp_path / "inverted.wav")
    np.testing.assert_allclose(audio.samples, x, atol=1e-6)  # the louder channel, not near-silence
    assert "cancel" in audio.downmix


def test_window_reads_only_the_requested_part(tmp_path):
    x = np.arange(RATE * 3, dtype=np.float32) / (RATE * 3)
    sf.write(tmp_path / "ramp.wav", x, RATE, subtype="FLOAT")
    audio = load_audio(tmp_path / "ramp.wav", offset_s=1.0, duration_s=0.5)
    np.testing.assert_array_equal(audio.samples, x[RATE : RATE + RATE // 2])
    assert audio.offset_s == 1.0


def test_two_hour_file_is_refused_from_its_header_without_reading(tmp_path):
    path = tmp_path / "two_hours.wav"
    sparse_long_wav(path, 2.0, tone(RATE), RATE)
    assert probe(path).duration_s == pytest.approx(7200, rel=1e-6)
    tracemalloc.start()
    try:
        with pytest.raises(errors.AudioTooLongError, match="2 h 00 min") as info:
            load_audio(path)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.duration_s == pytest.approx(7200, rel=1e-6)
    assert peak_bytes < 5_000_000
    part = load_audio(path, duration_s=10.0)  # a window of it loads fine
    assert len(part.samples) == 10 * RATE


def _write_bytes(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda d: d / "missing.wav", errors.AudioFileNotFoundError),
        (lambda d: d, errors.AudioFileNotFoundError),
        (lambda d: _write_bytes(d / "empty.wav", b""), errors.EmptyAudioError),
        (
            lambda d: _write_bytes(d / "notes.wav", b"this is a text file, not audio\n" * 20),
            errors.NotAudioError,
        ),
        (lambda d: _write_bytes(d / "noise.mp3", bytes(range(256)) * 8), errors.NotAudioError),
    ],
    ids=["missing", "folder", "zero-bytes", "text", "garbage-mp3"],
)
def test_bad_files_raise_their_specific_error(tmp_path, make, error):
    with pytest.raises(error) as info:
        load_audio(make(tmp_path))
    assert isinstance(info.value, errors.AudioError)
    assert str(info.value)  # a message for the user, not an empty exception


def test_header_without_samples_is_empty(tmp_path):
    sf.write(tmp_path / "header_only.wav", np.zeros(0, dtype=np.float32), RATE)
    with pytest.raises(errors.EmptyAudioError):
        load_audio(tmp_path / "header_only.wav")


def test_truncated_file_reads_what_is_there_or_says_damaged(tmp_path):
    sf.write(tmp_path / "full.flac", tone(RATE, 2.0), RATE)
    data = (tmp_path / "full.flac").read_bytes()
    cut = _write_bytes(tmp_path / "cut.flac", data[: len(data) // 2])
    try:
        audio = load_audio(cut)
    except errors.UnreadableAudioError as exc:
        assert "damaged" in str(exc)
    else:
        assert 0 < len(audio.samples) <= 2 * RATE


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_samples_are_refused(tmp_path, bad):
    x = tone(RATE)
    x[100] = bad
    sf.write(tmp_path / "bad.wav", x, RATE, subtype="FLOAT")
    with pytest.raises(errors.InvalidSamplesError, match="NaN or infinity"):
        load_audio(tmp_path / "bad.wav")


@pytest.mark.parametrize("level", [0.0, 2e-4])
def test_silence_is_refused_unless_allowed(tmp_path, level):
    x = np.full(RATE, level, dtype=np.float32)
    sf.write(tmp_path / "silent.wav", x, RATE, subtype="FLOAT")
    with pytest.raises(errors.SilentAudioError, match="silent"):
        load_audio(tmp_path / "silent.wav")
    assert len(load_audio(tmp_path / "silent.wav", allow_silent=True).samples) == RATE


def test_too_low_sample_rate_is_unsupported(tmp_path):
    sf.write(tmp_path / "low.wav", tone(4000), 4000)
    with pytest.raises(errors.UnsupportedAudioError, match="4000 Hz"):
        load_audio(tmp_path / "low.wav")
