"""The engine's raw output (engine.out): kept across starts, and read back into a crash report."""

from __future__ import annotations

from studio.engine.client import EngineClient
from studio.engine.raw_output import (
    OUTPUT_LINES,
    REPORT_WIDTH,
    clip,
    output_excerpt,
    output_header,
    output_of,
    rotate_output,
)


def start(path, pid, body=""):
    """What an engine start does to engine.out: rotate, then write its header (and what it prints)."""
    mode = "w" if rotate_output(path) else "a"
    with open(path, mode, encoding="utf-8") as handle:
        handle.write(output_header(pid) + "\n" + body)


def test_starts_keep_two_earlier_runs_and_a_silent_run_is_not_worth_one(tmp_path):
    out = tmp_path / "engine.out"
    start(out, 100, "Fatal Python error: Segmentation fault\n")  # the crash
    start(out, 101)  # a start that died before printing anything: replaced, not kept
    start(out, 102, "Traceback (most recent call last):\nImportError: boom\n")  # a start that failed
    assert output_of(tmp_path / "engine.log", 100) == tmp_path / "engine.out.1"
    start(out, 103)
    assert "Fatal Python error" in (tmp_path / "engine.out.2").read_text()  # still on disk
    assert "ImportError" in (tmp_path / "engine.out.1").read_text()
    start(out, 104)  # 103 printed nothing: the crash is not pushed out
    assert output_of(tmp_path / "engine.log", 100) == tmp_path / "engine.out.2"
    assert output_of(tmp_path / "engine.log", 104) == out
    assert output_of(tmp_path / "engine.log", 999) == out and output_of(tmp_path / "engine.log", None) == out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["engine.out", "engine.out.1", "engine.out.2"]


def frames(name, count):
    return [f'  File "/site-packages/torch/{name}_{i}.py", line {i} in f{i}' for i in range(count)]


def test_a_long_dump_keeps_the_crashing_threads_stack_and_cuts_the_module_list(tmp_path):
    dump = ["Fatal Python error: Segmentation fault", ""]
    for thread in range(6):
        dump += [f"Thread 0x{thread:016x} (most recent call first):", *frames(f"t{thread}", 20), ""]
        if thread == 3:
            dump += ["Current thread 0x00007f00 (most recent call first):", *frames("crash", 25), ""]
    dump.append("Extension modules: " + ", ".join(f"module{i}" for i in range(600)) + " (total: 600)")
    before = [f"warning {i}" for i in range(50)] + ["", "progress  10%\rprogress 100%"]
    out = tmp_path / "engine.out"
    out.write_text(output_header(7) + "\n" + "\n".join(before + dump) + "\n")

    excerpt = output_excerpt(out)
    assert len(excerpt) == OUTPUT_LINES and all(line.strip() for line in excerpt)
    last = ["warning 46", "warning 47", "warning 48", "warning 49", "progress 100%"]  # no empty line
    assert excerpt[:6] == [*last, "Fatal Python error: Segmentation fault"]
    crash = excerpt.index("Current thread 0x00007f00 (most recent call first):")
    assert excerpt[crash + 1 : crash + 26] == frames("crash", 25)  # the whole stack, most recent first
    assert excerpt[-2].startswith("Extension modules: module0, ")
    assert excerpt[-1].startswith("[") and str(out) in excerpt[-1] and "more lines" in excerpt[-1]
    assert "Thread 0x0000000000000000 (most recent call first):" in excerpt  # others as room allows

    report = EngineClient(tmp_path / "engine.log").crash_report(7)
    assert max(len(line) for line in report.splitlines()) <= REPORT_WIDTH
    assert "Extension modules: module0" in report and "[... cut: the line has" in report


def test_output_without_a_dump_shows_its_last_meaningful_lines(tmp_path):
    out = tmp_path / "engine.out"
    out.write_text(output_header(8) + "\n" + "\n\n".join(f"line {i}" for i in range(100)) + "\n\n")
    assert output_excerpt(out) == [f"line {i}" for i in range(100 - OUTPUT_LINES, 100)]
    assert output_excerpt(tmp_path / "missing.out") == []
    assert clip("x" * 50, 40) == "xx [... cut: the line has 50 characters]"
    assert len(clip("x" * 5000)) == REPORT_WIDTH and clip("short") == "short"
