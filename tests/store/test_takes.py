"""The take store: WAV + sidecar written at once, listed, renamed, deleted, denoised copy, exported."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from studio.takes import TakeError, TakeStore


def tone(seconds=0.5, rate=24000):
    return (0.3 * np.sin(np.arange(int(seconds * rate)) * 0.07)).astype(np.float32)


def test_a_take_is_on_disk_with_its_sidecar_as_soon_as_it_is_added(tmp_path):
    store = TakeStore(tmp_path / "takes")
    audio = tone()
    take = store.add(
        audio,
        24000,
        text="Hello there, how are you today my friend",
        voice="Ann",
        mode="zero-shot",
        seed=3,
        settings={"speed": 1.1},
        stats={"rtf": 0.5, "first_chunk_latency": 0.2},
    )
    samples, rate = sf.read(store.wav_path(take.id), dtype="float32")
    np.testing.assert_array_equal(samples, audio)
    assert rate == 24000
    sidecar = json.loads(store.sidecar_path(take.id).read_text())
    assert sidecar["text"].startswith("Hello there") and sidecar["seed"] == 3 and sidecar["voice"] == "Ann"
    assert sidecar["stats"]["rtf"] == 0.5 and sidecar["settings"]["speed"] == 1.1
    assert take.name == "Hello there, how are you today"  # the first six words
    assert take.duration_s == pytest.approx(0.5)
    assert not list(store.folder.glob("*.tmp")) and not list(store.folder.glob(".*"))
    # a new store over the same folder (the studio restarted) sees it
    assert [t.id for t in TakeStore(store.folder).list()] == [take.id]


def test_rename_delete_and_errors(tmp_path):
    store = TakeStore(tmp_path)
    first, second = store.add(tone(), 24000, text="one"), store.add(tone(), 24000, text="two")
    assert [t.id for t in store.list()] == [first.id, second.id]
    assert store.rename(first.id, "  Intro  ").name == "Intro"
    assert store.get(first.id).name == "Intro"
    with pytest.raises(TakeError, match="empty"):
        store.rename(first.id, " ")
    store.delete(second.id)
    assert [t.id for t in store.list()] == [first.id]
    assert not store.wav_path(second.id).exists()
    with pytest.raises(TakeError, match="no take"):
        store.get(second.id)
    with pytest.raises(TakeError, match="mono"):
        store.add(np.zeros((2, 10), dtype=np.float32), 24000)
    with pytest.raises(TakeError, match="NaN"):
        store.add(np.array([0.0, np.nan], dtype=np.float32), 24000)


def test_damaged_sidecars_are_skipped_by_list(tmp_path):
    store = TakeStore(tmp_path)
    good = store.add(tone(), 24000, text="fine")
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "orphan.json").write_text(json.dumps(good.to_json() | {"id": "orphan"}))  # no WAV
    assert [t.id for t in store.list()] == [good.id]


def test_the_denoised_copy_is_preferred_for_playback_and_export_and_the_original_kept(tmp_path):
    store = TakeStore(tmp_path / "takes")
    original = tone()
    take = store.add(original, 24000, text="noisy take")
    quieter = original * 0.5
    assert store.save_denoised(take.id, quieter).denoised
    played, _ = store.load_audio(take.id)
    np.testing.assert_array_equal(played, quieter)
    kept, _ = store.load_audio(take.id, prefer_denoised=False)
    np.testing.assert_array_equal(kept, original)
    out = tmp_path / "out"
    out.mkdir()
    [result] = store.export([take.id], out, fmt="wav32f")
    exported, rate = sf.read(result.path, dtype="float32")
    np.testing.assert_array_equal(exported, quieter)
    assert rate == 24000


def test_export_many_in_each_format_never_overwrites(tmp_path):
    store = TakeStore(tmp_path / "takes")
    ids = [store.add(tone(), 24000, text="same name").id for _ in range(2)]
    out = tmp_path / "out"
    out.mkdir()
    for fmt, subtype in (("wav16", "PCM_16"), ("flac", "PCM_24")):
        results = store.export(ids, out, fmt=fmt)
        paths = [r.path for r in results]
        assert len(set(paths)) == 2 and all(p.exists() for p in paths)
        assert {sf.info(p).subtype for p in paths} == {subtype}


def test_a_discard_can_be_undone_once_and_the_next_discard_removes_it_for_good(tmp_path):
    store = TakeStore(tmp_path / "takes")
    first, second, third = (store.add(tone(0.1 * n), 24000, text=f"take {n}") for n in (1, 2, 3))
    store.save_denoised(first.id, tone(0.1))
    wav_bytes = store.wav_path(first.id).read_bytes()
    assert store.discard([first.id, second.id]) == [first.id, second.id]
    assert [t.id for t in store.list()] == [third.id]
    assert not store.wav_path(first.id).exists() and not store.denoised_path(first.id).exists()
    assert sorted(store.restore_discarded()) == sorted([first.id, second.id])
    assert [t.id for t in store.list()] == [first.id, second.id, third.id]
    assert store.wav_path(first.id).read_bytes() == wav_bytes and store.get(first.id).denoised
    assert store.restore_discarded() == []  # nothing left to undo
    store.discard([first.id])
    store.discard([second.id])  # the first discard is now gone for good
    assert store.restore_discarded() == [second.id]
    assert [t.id for t in store.list()] == [second.id, third.id] and not any(store.trash.iterdir())
    with pytest.raises(TakeError):
        store.discard([third.id, "no-such-take"])  # nothing moves when one id is unknown
    assert [t.id for t in store.list()] == [second.id, third.id]


def test_export_as_writes_the_file_the_user_named(tmp_path):
    store = TakeStore(tmp_path / "takes")
    take = store.add(tone(), 24000, text="named export")
    target = tmp_path / "out" / "My chosen name.flac"
    target.parent.mkdir()
    target.write_bytes(b"old")  # the save dialog already asked about replacing it
    result = store.export_as(take.id, target, fmt="flac")
    assert result.path == target and sf.info(target).format == "FLAC"
    np.testing.assert_allclose(sf.read(target, dtype="float32")[0], tone(), atol=1e-4)


def test_exports_can_be_resampled_and_loudness_normalised(tmp_path):
    import pyloudnorm

    store = TakeStore(tmp_path / "takes")
    rng = np.random.default_rng(0)
    speechlike = (0.02 * rng.standard_normal(3 * 24000) * (1 + np.sin(np.arange(3 * 24000) / 2400))).astype(
        np.float32
    )
    take = store.add(speechlike, 24000, text="mastered export")
    (out := tmp_path / "out").mkdir()
    [result] = store.export([take.id], out, fmt="mp3", sample_rate=48000, loudness_lufs=-20.0)
    audio, rate = sf.read(result.path, dtype="float64")
    assert rate == 48000 and result.path.suffix == ".mp3"
    assert abs(pyloudnorm.Meter(rate).integrated_loudness(audio) + 20) < 0.5
    loud = store.export_as(take.id, out / "loud.wav", fmt="wav16", loudness_lufs=-6.0)
    assert any("true-peak ceiling" in warning for warning in loud.warnings)  # it says why it is quieter
