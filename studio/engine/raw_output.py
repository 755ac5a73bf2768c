"""The engine's raw output file (``engine.out``: vLLM's prints, C++ errors, faulthandler's native crash
dumps), written by the engine process and read by the client for crash reports. Each run starts with a
header naming its process; the two runs before are kept as ``engine.out.1`` and ``.2`` (by renames, so a
crash's dump survives the restart that follows it)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

OUTPUT_GENERATIONS = 2  # engine.out.1 and engine.out.2: the runs before the current one
OUTPUT_LINES = 40  # lines of raw output in a crash report (empty lines not counted)
REPORT_WIDTH = 200  # longer lines of a crash report (faulthandler's "Extension modules") are cut
_HEADER = re.compile(r"^=== engine process (\d+), started ")
_FAULT = ("Fatal Python error", "Windows fatal exception")  # the first line of a faulthandler dump
_THREAD = re.compile(r"^(Thread 0x|Current thread 0x|Stack \(most recent call first\))")


def output_path(log_path: Path) -> Path:
    """Where the engine's raw stdout/stderr go (``engine.log`` -> ``engine.out``)."""
    return log_path.with_suffix(".out")


def output_generation(path: Path, generation: int) -> Path:
    """``engine.out`` (0), ``engine.out.1`` (the run before), ``engine.out.2``."""
    return path.with_name(f"{path.name}.{generation}") if generation else path


def output_header(pid: int) -> str:
    """The first line of an engine run's raw output, naming its process."""
    return f"=== engine process {pid}, started {time.strftime('%Y-%m-%d %H:%M:%S')} ==="


def output_pid(line: str) -> int | None:
    """The process an ``output_header`` line names, else None."""
    match = _HEADER.match(line)
    return int(match.group(1)) if match else None


def output_of(log_path: Path, pid: int | None) -> Path:
    """The raw-output file of engine process ``pid`` (current or kept generation), else the current one."""
    path = output_path(log_path)
    for generation in range(OUTPUT_GENERATIONS + 1):
        candidate = output_generation(path, generation)
        try:
            with open(candidate, encoding="utf-8", errors="replace") as handle:
                if pid is not None and output_pid(handle.readline()) == pid:
                    return candidate
        except OSError:
            continue
    return path


def clip(line: str, width: int = REPORT_WIDTH) -> str:
    """``line`` cut to ``width`` characters with a note saying how long it was."""
    if len(line) <= width:
        return line
    note = f" [... cut: the line has {len(line)} characters]"
    return line[: max(0, width - len(note))] + note


def output_excerpt(path: Path, count: int = OUTPUT_LINES) -> list[str]:
    """The meaningful lines of a raw-output file: its last lines, and the fault handler's dump when
    there is one: its first line ("Fatal Python error: ..."), the crashing thread's stack, then the
    other threads' as room allows. Empty lines and the header are skipped; progress bars shown as their
    last state."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, 2) - 512_000))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    lines = [line.rsplit("\r", 1)[-1].rstrip() for line in text.split("\n")]
    lines = [line for line in lines if line.strip() and output_pid(line) is None]
    start = max((i for i, line in enumerate(lines) if line.startswith(_FAULT)), default=len(lines))
    before, dump = lines[:start], lines[start:]
    chosen = _dump_lines(dump, count - min(len(before), 5)) if dump else set()
    left_out = len(dump) - len(chosen)
    room = count - len(chosen) - (1 if left_out else 0)
    excerpt = before[max(0, len(before) - room) :] + [dump[i] for i in sorted(chosen)]
    if left_out:
        excerpt.append(f"[{left_out} more lines of the fault handler's dump are in {path}]")
    return excerpt


def _dump_lines(dump: list[str], count: int) -> set[int]:
    """Which lines of a faulthandler dump to show, at most ``count``: its header, the current thread's
    stack (most recent call first), the "Extension modules" line, then the other threads' stacks."""
    blocks: list[list[int]] = [[]]
    for index, line in enumerate(dump):
        after_modules = index > 0 and dump[index - 1].startswith("Extension modules")
        if _THREAD.match(line) or line.startswith("Extension modules") or after_modules:
            blocks.append([])  # a thread's stack; the modules line; what other processes wrote after
        blocks[-1].append(index)
    header, threads = blocks[0], blocks[1:]
    first = [b for b in threads if dump[b[0]].startswith(("Current thread", "Stack", "Extension"))]
    chosen: set[int] = set()
    for block in [header, *first, *(b for b in threads if b not in first)]:
        for index in block:
            if len(chosen) >= count - 1:  # one line is left for the note of what was left out
                return chosen
            chosen.add(index)
    return chosen


# ---------------------------------------------------------------- the writer's side (engine process)
def rotate_output(path: Path) -> bool:
    """``engine.out`` -> ``engine.out.1`` -> ``engine.out.2``, by renames (nothing is copied or truncated,
    so a crash's dump survives the next start even when that one fails). A file holding nothing but its
    header line is not worth a generation and is overwritten. False when a rename failed (e.g. Windows,
    a file still open elsewhere): the caller then appends instead of truncating."""
    if not _has_output(path):
        return True
    try:
        for generation in range(OUTPUT_GENERATIONS, 0, -1):
            older = output_generation(path, generation - 1)
            if older.exists():
                os.replace(older, output_generation(path, generation))
    except OSError:
        return False
    return True


def _has_output(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            first = handle.readline()
            return bool(handle.read(1)) or bool(first.strip() and output_pid(first) is None)
    except OSError:
        return False
