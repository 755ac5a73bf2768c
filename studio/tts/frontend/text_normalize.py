"""Offline text normalisation and sentence splitting, following upstream CosyVoice2's `text_normalize`.

Normalisation uses wetext 0.1.8 (its FST resources ship inside the wheel: it works with the network cut
off); then upstream's Chinese clean-ups and its paragraph splitter (`split_paragraph`: sentences merged up to
80 tokens, a tail under 20 merged into the previous piece). English numbers are spelled out by wetext;
upstream's extra inflect pass only catches digits wetext leaves, and is not reproduced.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import unicodedata
from collections.abc import Callable

log = logging.getLogger(__name__)

TOKEN_MAX_N, TOKEN_MIN_N, MERGE_LEN = 80, 60, 20
NORMALIZED_CACHE = 1024  # texts whose normalisation is kept
_CHINESE = re.compile(r"[\u4e00-\u9fff]+")
_ZH_PUNCTUATION = ("。", "？", "！", "；", "：", "、", ".", "?", "!", ";")
_EN_PUNCTUATION = (".", "?", "!", ";", ":")


def contains_chinese(text: str) -> bool:
    return bool(_CHINESE.search(text))


def is_only_punctuation(text: str) -> bool:
    """True for text made only of punctuation and symbols (or nothing), as upstream's `\\p{P}\\p{S}` test."""
    return all(unicodedata.category(c)[0] in "PS" for c in text)


def replace_blank(text: str) -> str:
    """Drop spaces except those between two non-space ASCII characters (upstream, for Chinese text)."""
    kept = []
    for i, c in enumerate(text):
        if c != " ":
            kept.append(c)
        elif 0 < i < len(text) - 1:
            before, after = text[i - 1], text[i + 1]
            if before.isascii() and before != " " and after.isascii() and after != " ":
                kept.append(c)
    return "".join(kept)


def _clean_chinese(text: str) -> str:
    text = text.replace("\n", "")
    text = replace_blank(text)
    text = text.replace("²", "平方").replace("³", "立方")
    text = text.replace(".", "。").replace(" - ", "，")
    for mark in ("（", "）", "【", "】", "`"):
        text = text.replace(mark, "")
    text = text.replace("——", " ")
    return re.sub(r"[，,、]+$", "。", text)


def split_paragraph(
    text: str,
    count_tokens: Callable[[str], int],
    lang: str,
    token_max_n: int = TOKEN_MAX_N,
    token_min_n: int = TOKEN_MIN_N,
    merge_len: int = MERGE_LEN,
) -> list[str]:
    """Cut at sentence punctuation, then pack sentences into pieces of about `token_max_n` (upstream's rule).

    Chinese pieces are measured in characters, others with `count_tokens`.
    """

    def length(piece: str) -> int:
        return len(piece) if lang == "zh" else count_tokens(piece)

    marks = _ZH_PUNCTUATION if lang == "zh" else _EN_PUNCTUATION
    if text[-1] not in marks:
        text += "。" if lang == "zh" else "."
    sentences, start = [], 0
    for i, c in enumerate(text):
        if c not in marks:
            continue
        if i > start:
            sentences.append(text[start:i] + c)
        if i + 1 < len(text) and text[i + 1] in ('"', "”"):
            if sentences:
                sentences[-1] += text[i + 1]
            start = i + 2
        else:
            start = i + 1

    pieces, current = [], ""
    for sentence in sentences:
        if length(current + sentence) > token_max_n and length(current) > token_min_n:
            pieces.append(current)
            current = ""
        current += sentence
    if current:
        if length(current) < merge_len and pieces:
            pieces[-1] += current
        else:
            pieces.append(current)
    return pieces


_SENTENCE = re.compile(r"[^.!?;。！？；]+[.!?;。！？；]*|[.!?;。！？；]+")


def _guarded(normalize: Callable[[str], str], text: str, joiner: str) -> str:
    """``normalize(text)``; where wetext fails (it asserts on "[1]"), each sentence alone, a failing one as written.

    User text must never fail a take: a sentence wetext cannot read is spoken unnormalised, and logged.
    """
    try:
        return normalize(text)
    except Exception:  # noqa: BLE001 - wetext's own asserts and errors on odd input
        pass
    pieces = []
    for sentence in (m.group().strip() for m in _SENTENCE.finditer(text)):
        if not sentence:
            continue
        try:
            pieces.append(normalize(sentence))
        except Exception as exc:  # noqa: BLE001
            log.warning(
                "text normaliser failed on %r (%s); it is spoken as written",
                sentence[:80],
                str(exc) or type(exc).__name__,
            )
            pieces.append(sentence)
    return joiner.join(pieces)


class TextNormalizer:
    """wetext normalisers for zh and en (built on first use; thread-safe) plus upstream's clean-ups."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._zh = self._en = None
        # A voice's transcript comes back with every take, and a line with each take of it: wetext's
        # ~4-8 ms per sentence (under the interpreter lock: 64 takes at once queue for it) is paid once.
        self.normalize = functools.lru_cache(maxsize=NORMALIZED_CACHE)(self._normalize)

    def _models(self):
        with self._lock:
            if self._zh is None:
                from wetext import Normalizer

                self._zh = Normalizer(remove_erhua=False)
                self._en = Normalizer()
            return self._zh, self._en

    def _normalize(self, text: str) -> tuple[str, str]:
        """(normalised text, language 'zh' or 'en') for stripped, non-empty text; `normalize` is it, cached."""
        zh, en = self._models()
        if contains_chinese(text):
            return _clean_chinese(_guarded(zh.normalize, text, "")), "zh"
        return _guarded(en.normalize, text, " "), "en"

    def split(self, text: str, count_tokens: Callable[[str], int]) -> list[str]:
        """Normalise, then cut into upstream's sentence pieces (sized by `count_tokens`); drop bare punctuation."""
        normalized, lang = self.normalize(text)
        if not normalized.strip():
            return []
        pieces = split_paragraph(normalized, count_tokens, lang)
        return [p for p in pieces if not is_only_punctuation(p)]
