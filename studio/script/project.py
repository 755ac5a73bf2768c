"""A script project: a folder holding the script (``script.txt``, in the script format) and its render
(line files, ``script.json``): the studio's Script view works in one, and
``cosyvoice-studio render FOLDER/script.txt --out FOLDER --resume`` continues the same render.

Exporting copies the render out in the chosen format, rate and loudness, with the joined file and subtitles.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from studio.atomic_files import atomic_write_bytes, ensure_folder
from studio.script.manifest import LineRecord, RenderSettings, VoicePrompt
from studio.script.parse import ScriptLine, read_script
from studio.script.render import JoinResult, ScriptRender

SCRIPT_NAME = "script.txt"


def format_script(lines: Iterable[ScriptLine]) -> str:
    """The script text of ``lines``: each with its voice (and instruction), a blank line before paragraphs."""
    out = []
    for line in lines:
        if line.paragraph_before and out:
            out.append("")
        prefix = f"[{line.voice}|{line.instruction}]" if line.instruction else f"[{line.voice}]"
        out.append(f"{prefix} {line.text}")
    return "\n".join(out) + ("\n" if out else "")


def save_script(folder: Path, lines: Iterable[ScriptLine]) -> Path:
    ensure_folder(folder)
    target = folder / SCRIPT_NAME
    atomic_write_bytes(target, format_script(lines).encode("utf-8"))
    return target


def load_script(folder: Path) -> list[ScriptLine]:
    path = folder / SCRIPT_NAME
    return list(read_script(path)) if path.is_file() else []


def export_render(
    project: ScriptRender,
    records: list[LineRecord],
    target: Path,
    settings: RenderSettings,
    subtitles: bool = True,
) -> JoinResult:
    """The project's rendered lines re-encoded into ``target`` (``settings``: format, rate, loudness, gaps),
    joined, with subtitles and a manifest; the project itself is left as it is."""
    import soundfile as sf

    ensure_folder(target)
    out = ScriptRender(target, project.voices, settings, project.rate)
    out.lines = dict(project.lines)
    copies = []
    for record in records:
        copy = LineRecord(**{**record.__dict__, "notes": []})
        copy.file = out.file_name(record.number, len(records))
        audio, rate = sf.read(project.folder / record.file, dtype="float32")
        out.finish_line(copy, audio, rate)
        copies.append(copy)
    joined = out.join(copies, subtitles=subtitles)
    out.save(copies, joined=joined.path.name if joined.path else None)
    return joined


def voices_for(names: Iterable[str], library) -> dict[str, VoicePrompt]:
    from studio.script.voices import load_voices

    return load_voices(
        names, [], library, advice="save {them} in the voice panel, or give those lines a saved voice"
    )
