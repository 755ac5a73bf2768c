"""Messages as the studio shows them: the core words its errors to follow a colon ("no saved voice 'x'"),
the GUI shows them as sentences, with a capital first letter and a full stop."""

from __future__ import annotations


def capitalised(text: str) -> str:
    """``text`` with a capital first letter."""
    return text[:1].upper() + text[1:]


def sentence(text: str) -> str:
    """``text`` as a sentence: a capital first letter and a closing full stop (unless it has one)."""
    text = capitalised(text.strip())
    return text if not text or text[-1] in ".!?…" else f"{text}."
