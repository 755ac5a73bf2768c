"""How this installation starts itself again: the command line of ``cosyvoice-studio ARGUMENTS``.

The window runs helper commands (``doctor``, ``download``, ``make-model``) as child processes through
``studio_command``; it lives here, not in ``studio.cli``, so nothing but ``python -m studio`` imports the CLI.
"""

from __future__ import annotations

import sys


def studio_command(*arguments: str) -> list[str]:
    """The command line that runs ``cosyvoice-studio ARGUMENTS`` from this installation (frozen or not)."""
    if getattr(sys, "frozen", False):  # PyInstaller: the executable is the studio's command line itself
        return [sys.executable, *arguments]
    return [sys.executable, "-m", "studio", *arguments]
