"""The studio's engine process is easy to find: ``ps aux``, ``ps -o args`` and System Monitor show its
command line, ``ps -o comm`` and ``top`` its short name; both read ``cosyvoice-studio engine``."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.engine.client import EngineClient

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux /proc")


def test_the_engine_process_is_named_on_its_command_line(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_TEST_TAG", "named-engine")
    with EngineClient(log_path=tmp_path / "engine.log") as client:
        pid = client.pid
        assert pid is not None and client.is_alive()
        proc = Path(f"/proc/{pid}")
        cmdline = (proc / "cmdline").read_bytes().rstrip(b"\0").replace(b"\0", b" ")
        comm = (proc / "comm").read_text().strip()
        environ = (proc / "environ").read_bytes().split(b"\0")
    assert cmdline.decode() == "cosyvoice-studio engine"
    assert comm == "cosyvoice-studio engine"[:15]  # the kernel keeps 15 bytes of a process's short name
    # the new name fits where the old command line was: the environment (which tests scan) stays readable
    assert b"STUDIO_TEST_TAG=named-engine" in environ
