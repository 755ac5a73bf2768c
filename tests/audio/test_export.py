"""Exporting takes: exact round trips, atomic writes, no silent overwrites, safe names, clear disk errors."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
import soundfile as sf

from studio.audio import errors, export
from studio.audio.export import ExportFormat, export_take, safe_filename, write_audio


@pytest.fixture
def take() -> np.ndarray:
    rng = np.random.default_rng(7)
    x = rng.uniform(-1.0, 1.0, 24000).astype(np.float32)
    x[:4] = [1.0, -1.0, 0.0, 0.5]  # full scale both ways
    return x


def test_float32_wav_round_trips_exactly(tmp_path, take):
    result = export_take(take, tmp_path, "take", fmt="wav32f")
    back, sr = sf.read(result.path, dtype="float32")
    assert sr == 24000 and result.path.name == "take.wav"
    np.testing.assert_array_equal(back, take)
    assert sf.info(result.path).subtype == "FLOAT"


def test_int16_wav_round_trips_within_one_lsb(tmp_path, take):
    result = export_take(take, tmp_path, "take", fmt=ExportFormat.WAV_INT16)
    pcm, sr = sf.read(result.path, dtype="int16")
    assert sr == 24000 and sf.info(result.path).subtype == "PCM_16"
    assert pcm[0] == 32767 and pcm[1] == -32767  # x * 32767
    error_lsb = np.abs(pcm.astype(np.float64) / 32767 - take) * 32767
    assert error_lsb.max() <= 0.5 + 1e-6  # rounding: within one LSB with room to spare
    assert result.clipped_samples == 0 and not result.warnings


def test_flac_round_trips_within_one_24bit_lsb(tmp_path, take):
    result = export_take(take, tmp_path, "take", fmt="flac")
    pcm, _ = sf.read(result.path, dtype="int32")
    assert result.path.suffix == ".flac" and sf.info(result.path).subtype == "PCM_24"
    error_lsb = np.abs((pcm >> 8).astype(np.float64) / 8388607 - take) * 8388607
    assert error_lsb.max() <= 0.5 + 1e-3


def test_samples_past_full_scale_are_clipped_counted_and_warned(tmp_path, take):
    hot = take * 1.5
    expected = int(np.count_nonzero(np.abs(np.rint(hot.astype(np.float64) * 32767)) > 32767))
    result = export_take(hot, tmp_path, "hot")
    assert result.clipped_samples == expected > 0
    assert str(expected) in result.warnings[0]
    pcm, _ = sf.read(result.path, dtype="int16")
    assert pcm.max() == 32767 and pcm.min() == -32767  # clipped, not wrapped around
    floated = export_take(hot, tmp_path, "hot", fmt="wav32f")
    np.testing.assert_array_equal(sf.read(floated.path, dtype="float32")[0], hot)
    assert floated.warnings  # kept in float, but the user is told


def test_existing_files_are_never_overwritten_silently(tmp_path, take):
    first = export_take(take, tmp_path, "take")
    second = export_take(take * 0.5, tmp_path, "take")
    third = export_take(take * 0.25, tmp_path, "take.wav")
    assert [first.path.name, second.path.name, third.path.name] == [
        "take.wav",
        "take (2).wav",
        "take (3).wav",
    ]
    original = first.path.read_bytes()
    with pytest.raises(errors.OutputExistsError, match="not overwritten"):
        export_take(take * 0.1, tmp_path, "take", on_conflict="error")
    assert first.path.read_bytes() == original
    replaced = export_take(take * 0.1, tmp_path, "take", on_conflict="overwrite")
    assert replaced.path == first.path and first.path.read_bytes() != original
    with pytest.raises(errors.OutputExistsError):
        write_audio(first.path, take, 24000, ExportFormat.WAV_INT16)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("../../etc/passwd", "etc_passwd.wav"),
        ("..", "take.wav"),
        ("a/b\\c", "a_b_c.wav"),
        ("CON", "_CON.wav"),
        ("nul.txt", "_nul.txt.wav"),
        ("  .hidden  ", "hidden.wav"),
        ('what? <now>: "yes" | no*', "what_ _now_ _yes_ _ no_.wav"),
        ("", "take.wav"),
        ("Ünïcødé take 1", "Ünïcødé take 1.wav"),
        ("trailing dots...", "trailing dots.wav"),
    ],
)
def test_safe_filename(name, expected):
    assert safe_filename(name, ".wav") == expected


def test_names_never_escape_the_folder(tmp_path, take):
    folder = tmp_path / "takes"
    folder.mkdir()
    for name in ("../outside", "/abs/path", "..\\..\\win", "x" * 400):
        result = export_take(take, folder, name)
        assert result.path.parent == folder and result.path.exists()
        assert len(result.path.name.encode()) <= 255
    assert sorted(p.name for p in tmp_path.iterdir()) == ["takes"]


def _listing(folder):
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize(
    ("code", "message"),
    [(errno.ENOSPC, "disk .* is full"), (errno.EACCES, "No permission"), (errno.EROFS, "read-only")],
)
def test_write_failure_leaves_no_partial_file_and_keeps_the_old_one(
    tmp_path, take, monkeypatch, code, message
):
    export_take(take, tmp_path, "take")
    before = (tmp_path / "take.wav").read_bytes()

    def failing_fsync(fd):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(export.os, "fsync", failing_fsync)
    with pytest.raises(errors.ExportError, match=message):
        export_take(take * 0.5, tmp_path, "take", on_conflict="overwrite")
    with pytest.raises(errors.ExportError, match=message):
        export_take(take * 0.5, tmp_path, "new take")
    assert _listing(tmp_path) == ["take.wav"]  # no temp file, no half-written take
    assert (tmp_path / "take.wav").read_bytes() == before


def test_encoder_failure_mid_write_leaves_nothing(tmp_path, take, monkeypatch):
    def half_write(handle, data, *args, **kwargs):
        handle.write(b"RIFF" + bytes(1000))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sf, "write", half_write)
    with pytest.raises(errors.ExportError, match="full"):
        export_take(take, tmp_path, "take")
    assert _listing(tmp_path) == []


def test_bad_targets_and_samples_get_clear_errors(tmp_path, take):
    with pytest.raises(errors.ExportError, match="does not exist"):
        export_take(take, tmp_path / "nowhere", "take")
    with pytest.raises(errors.ExportError, match="does not exist"):
        write_audio(tmp_path / "nowhere" / "take.wav", take, 24000, ExportFormat.WAV_INT16)
    with pytest.raises(errors.InvalidSamplesError):
        export_take(np.array([0.1, np.nan], dtype=np.float32), tmp_path, "take")
    with pytest.raises(errors.ExportError, match="mono"):
        export_take(np.zeros((10, 2), dtype=np.float32), tmp_path, "take")
    with pytest.raises(errors.ExportError, match="Unknown export format"):
        export_take(take, tmp_path, "take", fmt="aiff")
    assert _listing(tmp_path) == []
