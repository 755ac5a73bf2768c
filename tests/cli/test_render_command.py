"""``cosyvoice-studio render`` on the tiny model: per-line files, a joined file of the right length, subtitles
timed from the files, --resume, formats and loudness, and what bad input gets."""

from __future__ import annotations

import json
import re

import numpy as np
import pyloudnorm
import pytest
import soundfile as sf

from studio.cli import main
from studio.runtime.warmup import synthetic_voice

SCRIPT = """[Alice] Good morning, this is the first line.
[Bob] And this is Bob answering her.
He keeps the voice of the line before.

[Alice|Speak slowly and softly] A new paragraph, said slowly.
"""


@pytest.fixture
def voices(tmp_path):
    alice, bob = tmp_path / "alice.wav", tmp_path / "bob.wav"
    sf.write(alice, 0.4 * synthetic_voice(16000, 4.0), 16000)
    sf.write(bob, 0.3 * synthetic_voice(22050, 3.0), 22050)
    return ["--voice", f"Alice={alice}:A calm voice reads a few words.", "--voice", f"Bob={bob}"]


def _render(tmp_path, tiny_model_dir, voices, script_text, *extra, out="out"):
    script = tmp_path / "script.txt"
    script.write_text(script_text, encoding="utf-8")
    code = main(["render", str(script), "--model", str(tiny_model_dir), "--out", str(tmp_path / out),
                 *voices, "--seed", "7", "--concurrency", "2", *extra])  # fmt: skip
    manifest = tmp_path / out / "script.json"
    return code, json.loads(manifest.read_text()) if manifest.is_file() else None


def _srt_times(text: str) -> list[tuple[float, float]]:
    stamp = r"(\d\d):(\d\d):(\d\d),(\d\d\d)"
    found = re.findall(stamp + " --> " + stamp, text)
    seconds = [int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000 for h, m, s, ms in
               (found_part for cue in found for found_part in (cue[:4], cue[4:]))]  # fmt: skip
    return list(zip(seconds[::2], seconds[1::2], strict=True))


def test_a_two_voice_script_renders_lines_a_joined_file_and_subtitles(
    tmp_path, tiny_model_dir, voices, capsys
):
    code, manifest = _render(tmp_path, tiny_model_dir, voices, SCRIPT, "--srt", "--gap-ms", "300",
                             "--paragraph-ms", "900")  # fmt: skip
    assert code == 0, capsys.readouterr().err
    out = tmp_path / "out"
    lines = manifest["lines"]
    assert [(x["number"], x["voice"], x["instruction"], x["status"]) for x in lines] == [
        (1, "Alice", "", "rendered"), (2, "Bob", "", "rendered"), (3, "Bob", "", "rendered"),
        (4, "Alice", "Speak slowly and softly", "rendered"),
    ]  # fmt: skip
    frames = [sf.info(out / x["file"]).frames for x in lines]
    assert [x["file"] for x in lines] == ["001.wav", "002.wav", "003.wav", "004.wav"] and min(frames) > 0
    joined = sf.info(out / "joined.wav")
    rate = joined.samplerate
    assert rate == 24000
    assert joined.frames == sum(frames) + 2 * int(0.3 * rate) + int(0.9 * rate)  # the lines plus the gaps
    cues = _srt_times((out / "joined.srt").read_text())
    position = 0
    for (start, end), count, gap in zip(cues, frames, [0, 0.3, 0.3, 0.9], strict=True):
        position += int(gap * rate)
        assert start == pytest.approx(position / rate, abs=0.0011)
        assert end == pytest.approx((position + count) / rate, abs=0.0011)
        position += count
    joined_audio, _ = sf.read(out / "joined.wav", dtype="float32")
    first = sf.read(out / "001.wav", dtype="float32")[0]
    assert np.array_equal(joined_audio[240 : frames[0] - 240], first[240 : frames[0] - 240])
    assert "<v Bob>And this is Bob answering her." in (out / "joined.vtt").read_text()
    assert "lines/min" in capsys.readouterr().out


def _rendered_once(tmp_path, tiny_model_dir, voices):
    """The script rendered into ``out``: (that folder, each line's file bytes by its text)."""
    code, manifest = _render(tmp_path, tiny_model_dir, voices, SCRIPT)
    assert code == 0
    out = tmp_path / "out"
    return out, {x["text"]: (out / x["file"]).read_bytes() for x in manifest["lines"]}


def test_resume_renders_only_the_lines_that_changed(tmp_path, tiny_model_dir, voices):
    out, before = _rendered_once(tmp_path, tiny_model_dir, voices)
    edited = SCRIPT.replace("He keeps the voice of the line before.", "He says something else now.")
    edited = edited.replace("[Bob] And this", "[Alice] An inserted line.\n[Bob] And this")
    code, second = _render(tmp_path, tiny_model_dir, voices, edited, "--resume")
    assert code == 0
    status = {x["text"]: (x["status"], x["file"]) for x in second["lines"]}
    assert status == {
        "Good morning, this is the first line.": ("reused", "001.wav"),
        "An inserted line.": ("rendered", "002.wav"),
        "And this is Bob answering her.": ("reused", "003.wav"),  # moved down one place, not re-rendered
        "He says something else now.": ("rendered", "004.wav"),
        "A new paragraph, said slowly.": ("reused", "005.wav"),
    }
    for text, (state, name) in status.items():
        if state == "reused":
            assert (out / name).read_bytes() == before[text]
    code, third = _render(tmp_path, tiny_model_dir, voices, edited, "--resume", "--speed", "1.2")
    assert code == 0 and {x["status"] for x in third["lines"]} == {"rendered"}  # a setting that shapes audio


def test_formats_rates_and_loudness(tmp_path, tiny_model_dir, voices):
    code, manifest = _render(tmp_path, tiny_model_dir, voices, SCRIPT, "--format", "flac", "--loudness", "-24",
                             "--sample-rate", "48000")  # fmt: skip
    assert code == 0
    out = tmp_path / "out"
    meter = pyloudnorm.Meter(48000)
    for name in [x["file"] for x in manifest["lines"]] + ["joined.flac"]:
        audio, rate = sf.read(out / name, dtype="float64")
        assert rate == 48000 and sf.info(out / name).format == "FLAC"
        assert abs(meter.integrated_loudness(audio) + 24) < 0.5, name
    code, manifest = _render(tmp_path, tiny_model_dir, voices, "[Bob] Short.\n[Bob] Opus too.\n", "--format",
                             "opus", out="opus")  # fmt: skip
    assert code == 0 and sf.info(tmp_path / "opus" / "joined.opus").subtype == "OPUS"


def test_an_unknown_voice_or_an_empty_script_fails_before_the_model_loads(tmp_path, tiny_model_dir, voices,
                                                                          capsys):  # fmt: skip
    code, _ = _render(tmp_path, tiny_model_dir, voices, "[Alice] Hi.\n[Carol] Who am I?\n")
    err = capsys.readouterr().err
    assert code == 2 and "unknown voice Carol" in err and "known: Alice, Bob" in err
    assert not (tmp_path / "out").exists()
    code, _ = _render(tmp_path, tiny_model_dir, voices, "\n\n   \n")
    assert code == 2 and "has no lines" in capsys.readouterr().err


def test_a_line_that_fails_does_not_stop_the_others(tmp_path, tiny_model_dir, voices, capsys, monkeypatch):
    from studio.runtime import runner
    from studio.tts.errors import SynthesisError

    real = runner.run_take

    def out_of_memory_on_one_line(model, request, **kwargs):  # the card ran out of memory on that line
        if "second" in request.text:
            raise SynthesisError("CUDA out of memory while making this take")
        return real(model, request, **kwargs)

    monkeypatch.setattr(runner, "run_take", out_of_memory_on_one_line)
    script = "[Alice] The first line.\n[Alice] The second line.\n[Bob] The third line.\n"
    code, manifest = _render(tmp_path, tiny_model_dir, voices, script)
    err = capsys.readouterr().err
    assert code == 1
    assert [x["status"] for x in manifest["lines"]] == ["rendered", "failed", "rendered"]
    assert (
        "1 line(s) failed: 2 (script line 2: SynthesisError: CUDA out of memory" in err and "--resume" in err
    )
    assert not (tmp_path / "out" / "joined.wav").exists() and manifest["joined"] is None
    monkeypatch.setattr(runner, "run_take", real)
    code, manifest = _render(tmp_path, tiny_model_dir, voices, script, "--resume")
    assert code == 0 and [x["status"] for x in manifest["lines"]] == ["reused", "rendered", "reused"]
    assert (tmp_path / "out" / "joined.wav").is_file()


def test_a_full_disk_fails_the_lines_it_refuses_and_keeps_those_written(tmp_path, tiny_model_dir, voices, capsys,
                                                                       small_disk):  # fmt: skip
    disk = small_disk(900)  # room for a line or two of the tiny model's babble, not for four
    script = tmp_path / "script.txt"
    script.write_text(SCRIPT, encoding="utf-8")
    code = main(["render", str(script), "--model", str(tiny_model_dir), "--out", str(disk / "out"), *voices,
                 "--seed", "7", "--concurrency", "1"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert "full" in err and ("failed" in err or "--resume" in err)
    written = sorted(p.name for p in (disk / "out").glob("0*.wav"))
    assert written and all(sf.info(disk / "out" / name).frames > 0 for name in written)  # whole files only
    assert not list((disk / "out").glob("*.part"))  # no half-written file left behind


def test_a_line_put_back_as_it_was_gets_its_take_back_from_superseded(tmp_path, tiny_model_dir, voices):
    out, takes = _rendered_once(tmp_path, tiny_model_dir, voices)
    shorter = SCRIPT.replace("He keeps the voice of the line before.\n", "")
    code, second = _render(tmp_path, tiny_model_dir, voices, shorter, "--resume")
    assert code == 0 and not (out / "004.wav").exists()  # the shorter script leaves no stale file
    assert len(list((out / ".superseded").glob("*.wav"))) == 1  # the removed line's take, set aside
    (out / ".resume").mkdir()  # as a render killed while moving files leaves it
    (out / "002.wav").rename(out / ".resume" / "002.wav")
    code, third = _render(tmp_path, tiny_model_dir, voices, SCRIPT, "--resume")  # the line is back
    assert code == 0 and {x["status"] for x in third["lines"]} == {"reused"}
    assert {x["text"]: (out / x["file"]).read_bytes() for x in third["lines"]} == takes


def test_a_manifest_that_cannot_be_saved_stops_nothing_and_resume_keeps_the_lines_written(
    tmp_path, tiny_model_dir, voices, capsys, monkeypatch
):
    import errno

    from studio.script import manifest, render

    real_save, real_write = manifest.atomic_write_bytes, render.write_audio
    saves = []

    def full_after_the_plan(target, payload):  # the disk fills once the render starts
        saves.append(target)
        if len(saves) > 1:
            raise OSError(errno.ENOSPC, "No space left on device", str(target))
        real_save(target, payload)

    def no_room_for_the_third_line(path, *args, **kwargs):
        if path.name == "003.wav":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_write(path, *args, **kwargs)

    monkeypatch.setattr(manifest, "atomic_write_bytes", full_after_the_plan)
    monkeypatch.setattr(render, "write_audio", no_room_for_the_third_line)
    script = tmp_path / "script.txt"
    script.write_text(SCRIPT, encoding="utf-8")
    out = tmp_path / "out"
    code = main(["render", str(script), "--model", str(tiny_model_dir), "--out", str(out), *voices,
                 "--seed", "7", "--concurrency", "1"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and "could not be saved" in err
    assert sorted(p.name for p in out.glob("0*.wav")) == [
        "001.wav",
        "002.wav",
        "004.wav",
    ]  # every line was tried
    takes = {name: (out / name).read_bytes() for name in ("001.wav", "002.wav", "004.wav")}

    monkeypatch.setattr(manifest, "atomic_write_bytes", real_save)
    monkeypatch.setattr(render, "write_audio", real_write)
    code, second = _render(tmp_path, tiny_model_dir, voices, SCRIPT, "--resume", "--concurrency", "1")
    assert code == 0 and "3 unchanged, 1 to render" in capsys.readouterr().out
    assert [x["status"] for x in second["lines"]] == ["reused", "reused", "rendered", "reused"]
    assert all((out / name).read_bytes() == take for name, take in takes.items())
    assert all(x["seconds"] > 0 for x in second["lines"])


def test_a_file_at_a_line_name_that_fails_is_not_left_for_resume_to_trust(
    tmp_path, tiny_model_dir, voices, monkeypatch
):
    from studio.runtime import runner
    from studio.tts.errors import SynthesisError

    out = tmp_path / "out"
    out.mkdir()
    sf.write(out / "002.wav", np.full(2400, 0.1, np.float32), 24000)  # another script's take
    real = runner.run_take

    def fails_on_bob(model, request, **kwargs):
        if "Bob" in request.text:
            raise SynthesisError("CUDA out of memory while making this take")
        return real(model, request, **kwargs)

    monkeypatch.setattr(runner, "run_take", fails_on_bob)
    code, manifest = _render(tmp_path, tiny_model_dir, voices, SCRIPT)
    assert code == 1 and manifest["lines"][1]["status"] == "failed"
    assert not (out / "002.wav").exists()  # a later --resume would have taken it for line 2's take


def test_a_line_waiting_for_gpu_memory_says_so_once_and_renders(
    tmp_path, tiny_model_dir, voices, capsys, monkeypatch
):
    """A take gate with room for one take at a time (issue 34): of two lines rendered together, the second
    waits for memory; the render says so, once for that line, and both lines render."""
    from studio.commands import render as render_command
    from studio.tts.take_gate import TakeGate

    real_load, gates = render_command._load, []

    def load_with_a_tiny_gate(args):
        loaded = real_load(args)
        gates.append(TakeGate(1))  # one byte: a second take waits until the first has finished
        loaded.model.take_gate = gates[-1]
        return loaded

    monkeypatch.setattr(render_command, "_load", load_with_a_tiny_gate)
    script = "[Alice] Good morning, this is the first line.\n[Bob] And this is Bob answering her.\n"
    code, manifest = _render(tmp_path, tiny_model_dir, voices, script)
    err = capsys.readouterr().err
    assert code == 0, err
    assert [x["status"] for x in manifest["lines"]] == ["rendered", "rendered"]
    assert gates[0].queued_total >= 1
    assert err.count("waiting for GPU memory…") == gates[0].queued_total, err
