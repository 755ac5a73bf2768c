"""MP3, Ogg Vorbis and Opus through libsndfile, output rates through soxr, EBU R128 loudness with a true-peak
ceiling, and the block-by-block writer a joined script goes through."""

from __future__ import annotations

import numpy as np
import pyloudnorm
import pytest
import soundfile as sf

from studio.audio.errors import ExportError
from studio.audio.export import ExportFormat, resample, write_audio
from studio.audio.loudness import normalise, true_peak_dbtp
from studio.audio.stream_writer import StreamingAudioWriter


def _speech_at(espeak_speech, rate: int) -> np.ndarray:
    return resample(espeak_speech.samples, espeak_speech.sample_rate, rate)


@pytest.mark.parametrize("name", ["mp3", "ogg", "opus", "flac", "wav16", "wav32f"])
def test_every_format_round_trips_through_soundfile(tmp_path, espeak_speech, name):
    fmt = ExportFormat.parse(name)
    speech = 0.5 * _speech_at(espeak_speech, 24000)
    result = write_audio(tmp_path / f"take{fmt.suffix}", speech, 24000, fmt)
    back, rate = sf.read(result.path, dtype="float32")
    assert rate == 24000 and sf.info(result.path).format == fmt.container
    assert abs(back.size - speech.size) < 0.1 * 24000  # lossy codecs pad a little
    n = min(back.size, speech.size)
    if fmt.lossy:  # same sound, within what the codec shifts and smears: the best lag correlates highly
        from scipy.signal import correlate

        a, b = speech[:n].astype(np.float64), back[:n].astype(np.float64)
        best = np.max(correlate(b, a, mode="full", method="fft")) / (np.linalg.norm(a) * np.linalg.norm(b))
        assert best > 0.9
    else:
        assert np.max(np.abs(back[:n] - speech[:n])) < 1e-4


def test_opus_refuses_a_rate_it_cannot_carry_before_writing(tmp_path):
    with pytest.raises(ExportError, match="Opus needs a sample rate of .*48000 Hz, not 44100"):
        write_audio(tmp_path / "take.opus", np.zeros(4410, np.float32), 44100, ExportFormat.OPUS)
    assert list(tmp_path.iterdir()) == []


def test_an_output_rate_is_a_real_resample(espeak_speech):
    speech = _speech_at(espeak_speech, 24000)
    at_48k = resample(speech, 24000, 48000)
    assert abs(at_48k.size - 2 * speech.size) <= 2
    spectrum = np.abs(np.fft.rfft(at_48k))
    freqs = np.fft.rfftfreq(at_48k.size, 1 / 48000)
    assert spectrum[freqs > 12500].sum() < 1e-3 * spectrum.sum()  # nothing above the old Nyquist: no images


@pytest.mark.parametrize("target", [-30.0, -24.0])  # espeak peaks high: -22 LUFS is its -1 dBTP
def test_loudness_lands_within_half_a_lu_of_the_target(espeak_speech, target):
    speech = 0.05 * espeak_speech.samples  # quiet: normalising must raise it
    out = normalise(speech, espeak_speech.sample_rate, target)
    measured = pyloudnorm.Meter(espeak_speech.sample_rate).integrated_loudness(out.samples.astype(np.float64))
    assert abs(measured - target) < 0.5 and not out.peak_limited
    assert true_peak_dbtp(out.samples) <= -1.0 + 0.05


def test_the_true_peak_ceiling_wins_over_a_target_too_loud(espeak_speech):
    out = normalise(espeak_speech.samples, espeak_speech.sample_rate, -3.0, ceiling_dbtp=-1.0)
    assert out.peak_limited and out.loudness_after < -3.0 and "true-peak ceiling" in out.note(-3.0)
    assert true_peak_dbtp(out.samples) == pytest.approx(-1.0, abs=0.05)


def test_silence_is_left_as_it_is():
    out = normalise(np.zeros(24000, np.float32), 24000, -20.0)
    assert out.gain_db == 0.0 and not np.any(out.samples)


@pytest.mark.parametrize("name", ["wav16", "flac", "ogg"])
def test_the_streaming_writer_matches_the_whole_file_writer(tmp_path, espeak_speech, name):
    fmt = ExportFormat.parse(name)
    speech = 0.5 * _speech_at(espeak_speech, 24000)
    with StreamingAudioWriter(tmp_path / f"joined{fmt.suffix}", 24000, fmt) as out:
        for start in range(0, speech.size, 4096):
            out.write(speech[start : start + 4096])
    whole = write_audio(tmp_path / f"whole{fmt.suffix}", speech, 24000, fmt).path
    streamed, _ = sf.read(out.path, dtype="float32")
    reference, _ = sf.read(whole, dtype="float32")
    assert out.frames == speech.size
    if fmt.lossy:
        assert abs(streamed.size - reference.size) < 2000
    else:
        assert np.array_equal(streamed, reference)


def test_a_failed_streaming_write_leaves_no_file(tmp_path):
    target = tmp_path / "joined.wav"
    with pytest.raises(RuntimeError, match="the render stopped"):
        with StreamingAudioWriter(target, 24000, ExportFormat.WAV_INT16) as out:
            out.write(np.zeros(2400, np.float32))
            raise RuntimeError("the render stopped")
    assert list(tmp_path.iterdir()) == []
