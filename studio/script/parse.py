"""The script format: plain UTF-8 text, one utterance per line.

``[Voice] text`` names the voice (a saved voice, or one mapped on the command line); ``[Voice|instruction]
text`` adds an instruction for that line (instruct mode). A line without a prefix keeps the voice of the
line before (the first ones take the default voice). A blank line is a paragraph pause before the next line.
The engine splits long lines at sentences itself. Lines are read lazily: a 100,000-line script streams.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

PREFIX = re.compile(r"^\s*\[([^\]|]*)(?:\|([^\]]*))?\]\s*")
MAX_LINE_CHARS = 4096


class ScriptError(ValueError):
    """A script that cannot be rendered; names the line (1-based, as an editor shows it)."""

    def __init__(self, message: str, source_line: int | None = None):
        super().__init__(f"line {source_line}: {message}" if source_line else message)
        self.source_line = source_line


@dataclass(frozen=True)
class ScriptLine:
    number: int  # 1-based utterance number: 001.wav is the first
    source_line: int  # where it is in the file
    voice: str  # the voice's name as written (matched case-insensitively)
    text: str
    instruction: str = ""
    paragraph_before: bool = False  # a blank line came before it


def parse_lines(lines: Iterable[str], default_voice: str = "") -> Iterator[ScriptLine]:
    """The utterances of ``lines`` (a file object, a list of strings) one by one."""
    voice, number, blank = default_voice, 0, False
    for source_line, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n").lstrip("\ufeff")
        if not line.strip():
            blank = number > 0
            continue
        instruction = ""
        match = PREFIX.match(line)
        if match:
            named, instruction = match.group(1).strip(), (match.group(2) or "").strip()
            voice = named or voice
            line = line[match.end() :]
        text = " ".join(line.split())
        if not text:
            raise ScriptError("a voice prefix with nothing to say", source_line)
        if len(text) > MAX_LINE_CHARS:
            raise ScriptError(
                f"{len(text)} characters; at most {MAX_LINE_CHARS} on one line: split it", source_line
            )
        if not voice:
            raise ScriptError("no voice: start the line with [Voice] or give a default voice", source_line)
        number += 1
        yield ScriptLine(number, source_line, voice, text, instruction, blank)
        blank = False


def read_script(path: str | Path, default_voice: str = "") -> Iterator[ScriptLine]:
    """`parse_lines` over a file, read as it goes; a file that is not UTF-8 text is a ScriptError."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as handle:
            yield from parse_lines(handle, default_voice)
    except UnicodeDecodeError as exc:
        raise ScriptError(f"{path.name} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except FileNotFoundError:
        raise ScriptError(f"no script at {path}") from None


def script_summary(lines: Iterable[ScriptLine]) -> tuple[int, dict[str, int]]:
    """(number of lines, lines per voice) in one pass; a voice is named as first written (any case matches)."""
    count, voices, spelling = 0, {}, {}
    for line in lines:
        count += 1
        name = spelling.setdefault(line.voice.casefold(), line.voice)
        voices[name] = voices.get(name, 0) + 1
    return count, voices
