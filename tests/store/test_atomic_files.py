"""Atomic writes: the target holds the old bytes or the new ones, never a part, and no temp file stays."""

from __future__ import annotations

import pytest

from studio.atomic_files import atomic_path, atomic_write_bytes


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "settings.json"
    target.write_bytes(b"old")
    with pytest.raises(OSError, match="disk full"):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half of the new")
            raise OSError("disk full")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json"]


def test_a_write_replaces_the_file_and_keeps_the_suffix_writers_need(tmp_path):
    target = tmp_path / "take.wav"
    atomic_write_bytes(target, b"first")
    with atomic_path(target, suffix=".wav") as tmp:
        assert tmp.suffix == ".wav" and tmp.parent == tmp_path and tmp != target
        tmp.write_bytes(b"second")
    assert target.read_bytes() == b"second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["take.wav"]
