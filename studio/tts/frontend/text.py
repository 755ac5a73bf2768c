"""The text frontend: Qwen2 tokenizer with a family's special tokens, offline normalisation, sentences."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from studio.tts.frontend.special_tokens import COSYVOICE2_SPECIAL_TOKENS
from studio.tts.frontend.text_normalize import TextNormalizer

#: CosyVoice2's special tokens under the name the builder and the tests import.
COSYVOICE_SPECIAL_TOKENS = COSYVOICE2_SPECIAL_TOKENS


class TextFrontend:
    """Qwen2 tokenizer with CosyVoice's special tokens, plus upstream's normalisation and sentence splitting.

    ``special_tokens`` are the family's (`studio.tts.frontend.special_tokens`), added in their order after
    the folder's own vocabulary; CosyVoice2's by default.
    """

    def __init__(
        self, tokenizer_dir: str | Path, special_tokens: Sequence[str] = COSYVOICE2_SPECIAL_TOKENS
    ) -> None:
        from transformers import AutoTokenizer

        tokenizer_dir = Path(tokenizer_dir)
        if not (tokenizer_dir / "tokenizer_config.json").is_file():
            raise FileNotFoundError(f"tokenizer folder {tokenizer_dir} has no tokenizer_config.json")
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        except (OSError, ValueError) as error:
            raise ValueError(f"cannot load the tokenizer in {tokenizer_dir}: {error}") from error
        self._tokenizer.add_special_tokens(
            {
                "eos_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
                "additional_special_tokens": list(special_tokens),
            }
        )
        self.special_tokens = tuple(special_tokens)
        self._normalizer = TextNormalizer()

    def __len__(self) -> int:
        return len(self._tokenizer)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; every fine-grained tag ([breath], <strong>, <|endofprompt|>, ...) is one id."""
        return list(self._tokenizer(text)["input_ids"])

    def token_id(self, token: str) -> int:
        """The one id of a special token (``<|endofprompt|>``: 151646 with the official vocabulary)."""
        found = self._tokenizer.convert_tokens_to_ids(token)
        if found is None or found == self._tokenizer.unk_token_id:
            raise KeyError(f"{token!r} is not one token of this tokenizer")
        return int(found)

    def decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=True)

    def split(self, text: str, text_frontend: bool = True) -> list[str]:
        """Normalise offline and cut into sentences of at most ~80 tokens (upstream's `text_normalize`).

        With `text_frontend=False`, or text holding `<|...|>` markup, the text is returned whole, as upstream.
        """
        text = _require_text(text)
        if not text_frontend or ("<|" in text and "|>" in text):
            return [text]
        pieces = self._normalizer.split(text, lambda piece: len(self.encode(piece)))
        if not pieces:
            raise ValueError(f"text has nothing to speak after normalisation (only punctuation?): {text!r}")
        return pieces

    def normalize(self, text: str, text_frontend: bool = True) -> str:
        """Normalise without splitting (upstream's `split=False`, used for prompt and instruction text)."""
        text = _require_text(text)
        if not text_frontend or ("<|" in text and "|>" in text):
            return text
        return self._normalizer.normalize(text)[0]


def _require_text(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("text is empty: give at least one word to synthesise")
    return text.strip()
