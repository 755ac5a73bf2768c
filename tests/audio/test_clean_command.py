"""`cosyvoice-studio clean IN OUT [--denoise] [--json REPORT]`: prints the report, errors without tracebacks."""

from __future__ import annotations

import json

import pytest
import soundfile as sf

from studio.cli import main


@pytest.fixture
def recording(tmp_path, padded_speech):
    path = tmp_path / "my voice.wav"
    sf.write(path, padded_speech.samples, padded_speech.sample_rate, subtype="PCM_24")
    return path


def test_clean_prints_the_report_and_writes_json(tmp_path, recording, capsys):
    out, report = tmp_path / "prompt.wav", tmp_path / "report.json"
    assert main(["clean", str(recording), str(out), "--json", str(report)]) == 0
    printed = capsys.readouterr().out
    for step in ("clipping", "dc", "resample", "trim", "normalise"):
        assert step in printed
    assert "peak -3.00 dBFS" in printed
    data = json.loads(report.read_text())
    assert data["after"]["sample_rate"] == 16000 and data["output_path"] == str(out)
    assert sf.info(out).samplerate == 16000 and sf.info(out).channels == 1


def test_clean_with_denoise_and_refusal_to_overwrite(tmp_path, recording, capsys):
    out = tmp_path / "prompt.flac"
    assert main(["clean", str(recording), str(out), "--denoise"]) == 0
    assert "denoise" in capsys.readouterr().out
    stamp = out.read_bytes()
    assert main(["clean", str(recording), str(out)]) == 1
    assert "already exists" in capsys.readouterr().err
    assert out.read_bytes() == stamp
    assert main(["clean", str(recording), str(out), "--force"]) == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "does not exist"), (b"", "empty"), (b"hello, not audio" * 10, "not an audio file")],
)
def test_clean_reports_bad_input_as_one_line(tmp_path, capsys, content, message):
    source = tmp_path / "input.wav"
    if content is not None:
        source.write_bytes(content)
    assert main(["clean", str(source), str(tmp_path / "out.wav")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert not (tmp_path / "out.wav").exists()


def test_cut_option_is_validated(tmp_path, recording, capsys):
    with pytest.raises(SystemExit):
        main(["clean", str(recording), str(tmp_path / "o.wav"), "--cut", "soon"])
    assert "--cut takes 'auto' or seconds" in capsys.readouterr().err


def test_clean_json_onto_a_full_disk_leaves_no_file_and_says_so(tmp_path, recording, capsys, small_disk):
    disk = small_disk(64, full=True)
    rc = main(["clean", str(recording), str(tmp_path / "prompt.wav"), "--json", str(disk / "report.json")])
    err = capsys.readouterr().err
    assert rc == 1 and "report was not written" in err and "full" in err
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]
