"""CosyVoice2's fine-grained control tags: what the text panel offers, what a take's name leaves out.

A tag shapes how the text is said ([laughter], <strong>word</strong>); it belongs in the text a take is
made from, not in the take's name or the file it is exported to. No Qt, no torch.
"""

from __future__ import annotations

import re

#: Single-token event tags (inserted at the cursor), as the model's tokenizer spells them.
EVENT_TAGS = (
    "[breath]",
    "[laughter]",
    "[cough]",
    "[noise]",
    "[sigh]",
    "[quick_breath]",
    "[clucking]",
    "[accent]",
    "[hissing]",
    "[vocalized-noise]",
    "[lipsmack]",
    "[mn]",
)
#: Paired tags that wrap the words they shape.
SPAN_TAGS = (("<strong>", "</strong>"), ("<laughter>", "</laughter>"))

_SPAN = re.compile("|".join(re.escape(tag) for pair in SPAN_TAGS for tag in pair))
#: event tags and the model's control tokens (<|endofprompt|>, ...): each stands between words
_EVENT = re.compile("|".join(re.escape(tag) for tag in EVENT_TAGS) + r"|<\|[a-z_]+\|>")


def strip_tags(text: str) -> str:
    """``text`` without its tags, in single spaces: "<strong>Hi</strong>[breath]there" -> "Hi there";
    a text without tags comes back as it was.

    A span tag goes without a trace (it may sit inside a word), an event tag leaves a word break."""
    plain = _EVENT.sub(" ", _SPAN.sub("", text))
    return text if plain == text else " ".join(plain.split())


def name_from_text(text: str, words: int = 6) -> str:
    """A take's name from the text it was made from: its first ``words`` spoken words (tags left out)."""
    return " ".join(strip_tags(text).split()[:words])
