"""benchmarks/load_http.py, the HTTP side of issue 34's workload figures, against a running server: each take of
the level is a streamed request whose audio is as long as the workload drew (the server bounds a take by its
text), and the level's JSON keeps the figures and each take's record, named as `bench --workload` names them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from studio import workloads
from tests.serve.conftest import API_KEY, register_voice

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "load_http.py"


def test_a_workload_level_through_the_server_writes_its_takes_as_the_workload_drew_them(server, tmp_path):
    base, _service = server
    voice = register_voice(base, "Load Voice", seconds=3.0)
    out = tmp_path / "http.json"
    command = [sys.executable, str(SCRIPT), "--url", base, "--key", API_KEY, "--voice", voice]
    command += ["--workload", "short", "--clients", "1", "--takes", "2", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (level,) = json.loads(out.read_text())["levels"]
    assert level["errors"] == 0 and level["takes"] == 2
    drawn = workloads.takes("short", 2, voices=1)  # one voice named: every take speaks with it
    assert [record["index"] for record in level["records"]] == [0, 1]
    for record, take in zip(level["records"], drawn, strict=True):
        # the server ran the take to its text's bound: 20 speech tokens a text token, the words and the stop
        assert record["audio_s"] == pytest.approx(take.seconds, abs=20 / workloads.TOKENS_PER_SECOND)
        assert 0 < record["first_audio_s"] and record["voice"] == take.voice
