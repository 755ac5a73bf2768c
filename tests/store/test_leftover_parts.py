"""A writer killed mid-export (SIGKILL) leaves a hidden ``.part`` file; the next start removes it, and never a
file a live writer is still filling."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import soundfile as sf

from studio.atomic_files import UNOWNED_PART_AGE_S, remove_leftover_parts

KILLED_MID_EXPORT = """
import os, signal, sys
import numpy as np
from studio.audio.export import ExportFormat
from studio.audio.stream_writer import StreamingAudioWriter
with StreamingAudioWriter(sys.argv[1], 24000, ExportFormat.parse("wav16")) as out:
    out.write(np.zeros(24000, np.float32))
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _killed_export(folder) -> list:
    target = folder / "take.wav"
    done = subprocess.run([sys.executable, "-c", KILLED_MID_EXPORT, str(target)], timeout=120)
    assert done.returncode == -signal.SIGKILL
    parts = sorted(folder.glob(".*.part"))
    assert parts and not target.exists()
    return parts


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_the_next_start_removes_what_a_killed_export_left(tmp_path):
    from studio.takes import TakeStore

    _killed_export(tmp_path)
    live = tmp_path / f".other.wav.{os.getpid()}-abcdefgh.part"  # this process is still writing it
    live.write_bytes(b"RIFF")
    TakeStore(tmp_path)  # the studio opens its takes folder at start
    assert sorted(tmp_path.glob(".*.part")) == [live]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_the_clean_command_removes_what_a_killed_export_left(tmp_path):
    from studio.cli import main
    from studio.runtime.warmup import synthetic_voice

    _killed_export(tmp_path)
    recording = tmp_path / "voice.wav"
    sf.write(recording, 0.4 * synthetic_voice(16000, 4.0), 16000)
    assert main(["clean", str(recording), str(tmp_path / "prompt.wav")]) == 0
    assert not list(tmp_path.glob(".*.part"))


def test_unowned_parts_go_only_when_old(tmp_path):
    old, new = tmp_path / ".a.wav.k3j9x0ab.part", tmp_path / ".b.wav.k3j9x0ac.part"
    for path in (old, new):
        path.write_bytes(b"")
    past = time.time() - UNOWNED_PART_AGE_S - 60
    os.utime(old, (past, past))
    (tmp_path / ".hidden-user-file.part").write_bytes(b"")  # not a writer's name: kept
    assert remove_leftover_parts(tmp_path) == [old]
    assert remove_leftover_parts(tmp_path / "missing") == []
    np.testing.assert_equal(
        sorted(p.name for p in tmp_path.iterdir()), sorted([new.name, ".hidden-user-file.part"])
    )
