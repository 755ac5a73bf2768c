"""A full, read-only or missing disk never leaves half a take, never hides audio, and is named with its
cause; a crafted sidecar cannot make the store touch files outside its folder. Real small tmpfs disks."""

from __future__ import annotations

import errno

import numpy as np
import pytest

from studio.atomic_files import DiskError
from studio.audio.errors import ExportError
from studio.audio.export import ExportFormat, encode_audio, write_audio
from studio.takes import TakeError, TakeStore
from studio.voices import VoiceExistsError, VoiceLibrary

RATE = 24000
PAGE = 4096


def _tone(seconds: float) -> np.ndarray:
    return (0.3 * np.sin(np.arange(int(RATE * seconds)) * 0.05)).astype(np.float32)


def _listing(folder):
    return sorted(p.name for p in folder.rglob("*"))


def test_a_take_the_disk_cannot_hold_leaves_nothing_and_names_the_cause(small_disk):
    store = TakeStore(small_disk(64) / "takes")
    with pytest.raises(DiskError) as caught:
        store.add(_tone(1.0), RATE, text="too long for this disk")  # 96 KB on a 64 KB disk
    assert caught.value.errno == errno.ENOSPC and caught.value.cause == "ENOSPC"
    assert "is full" in str(caught.value) and str(store.folder) in str(caught.value)
    assert _listing(store.folder) == [] and store.list() == []


def test_when_only_the_sidecar_does_not_fit_no_invisible_wav_is_left(small_disk):
    disk = small_disk(64)
    header = len(encode_audio(np.zeros(1, np.float32), RATE, "WAV", "FLOAT")) - 4
    samples = (16 * PAGE - 200 - header) // 4  # the WAV alone fills the disk to its last page
    store = TakeStore(disk)
    with pytest.raises(DiskError, match="full"):
        store.add(np.full(samples, 0.1, np.float32), RATE, text="the sidecar will not fit")
    assert _listing(disk) == []  # neither the WAV nor a temporary file stays behind
    small = store.add(_tone(0.05), RATE, text="a small take still fits")
    assert [t.id for t in store.list()] == [small.id]


def test_a_read_only_or_missing_folder_is_named_and_nothing_breaks_until_a_write(small_disk, tmp_path):
    read_only = TakeStore(small_disk(64, read_only=True) / "takes")
    assert read_only.list() == []
    with pytest.raises(DiskError) as caught:
        read_only.check_writable()
    assert caught.value.cause == "EROFS" and "read-only" in str(caught.value)
    with pytest.raises(DiskError, match="read-only"):
        read_only.add(_tone(0.1), RATE)
    (tmp_path / "a-file").write_text("not a folder")
    under_a_file = TakeStore(tmp_path / "a-file" / "takes")
    assert under_a_file.list() == []
    with pytest.raises(DiskError) as caught:
        under_a_file.check_writable()
    assert caught.value.cause == "ENOTDIR"


def test_a_crafted_sidecar_id_cannot_reach_outside_the_store(tmp_path):
    outside = tmp_path / "x.wav"
    outside.write_bytes(b"someone else's file")
    store = TakeStore(tmp_path / "deep" / "takes")
    take = store.add(_tone(0.1), RATE, text="a real take")
    crafted = store.folder / "evil.json"
    crafted.write_text(store.sidecar_path(take.id).read_text().replace(take.id, "../../x"))
    assert [t.id for t in store.list()] == [take.id]  # the crafted sidecar is not a take
    for bad in ("../../x", "evil/../../x", "", "a/b"):
        with pytest.raises(TakeError):
            store.delete(bad)
    with pytest.raises(TakeError, match="names another take"):
        store.get("evil")
    assert outside.read_bytes() == b"someone else's file"


@pytest.mark.parametrize("fmt", [ExportFormat.WAV_FLOAT32, ExportFormat.FLAC, ExportFormat.WAV_INT16])
def test_export_to_a_full_disk_says_so_and_leaves_no_partial_file(small_disk, fmt):
    disk = small_disk(32)
    with pytest.raises(ExportError) as caught:
        write_audio(disk / f"take{fmt.suffix}", np.random.default_rng(0).uniform(-1, 1, RATE * 2), RATE, fmt)
    message = str(caught.value)
    assert "is full (ENOSPC)" in message and str(disk) in message and "free some space" in message
    assert _listing(disk) == []


def test_saving_a_voice_on_a_full_disk_names_the_cause_and_leaves_no_staging_folder(small_disk):
    library = VoiceLibrary(small_disk(32) / "voices")
    with pytest.raises(DiskError) as caught:
        library.save("Anna", _tone(2.0), RATE, "hello")
    assert caught.value.cause == "ENOSPC" and "full" in caught.value.explain("the voice was not saved")
    assert [p for p in library.folder.iterdir()] == [] and library.list() == []


def test_names_that_slug_alike_are_two_voices_and_replacing_one_keeps_the_other(tmp_path):
    library = VoiceLibrary(tmp_path / "voices")
    first = library.save("Anna (studio mic)", _tone(0.5), RATE, "one", _tone(1.0), RATE)
    second = library.save("anna studio mic", _tone(0.5), RATE, "two", _tone(1.5), RATE)
    assert first.slug != second.slug and {v.name for v in library.list()} == {
        "Anna (studio mic)",
        "anna studio mic",
    }
    with pytest.raises(VoiceExistsError):
        library.save("ANNA  studio mic", _tone(0.5), RATE, "three")
    library.save("anna studio mic", _tone(0.5), RATE, "three", overwrite=True)
    assert (library.folder / first.slug / "original.wav").is_file()  # the other voice is untouched
    assert library.get(first.slug).transcript == "one" and library.get(second.slug).transcript == "three"
    punctuation = [library.save(name, _tone(0.2), RATE).slug for name in ("!!!", "???", "...")]
    assert len(set(punctuation)) == 3
