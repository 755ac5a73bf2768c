"""Process trees, Qt-free: the engine's GPU memory is that of its process and all its children."""

from __future__ import annotations

from pathlib import Path


def descendants(pid: int, proc: Path = Path("/proc")) -> set[int]:
    """``pid`` and every process below it (Linux /proc); just ``{pid}`` where /proc is unavailable."""
    children: dict[int, list[int]] = {}
    try:
        entries = list(proc.iterdir())
    except OSError:
        return {pid}
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name (field 2) may hold spaces and parentheses: parse after its last ")"
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = {pid}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found
