"""The studio's tag vocabulary (studio.tags: the text panel's buttons, what names leave out) is the model's:
every tag CosyVoice2's tokenizer knows as one token, and nothing else."""

from __future__ import annotations

from studio.tags import EVENT_TAGS, SPAN_TAGS, strip_tags
from studio.tts.frontend.text import COSYVOICE_SPECIAL_TOKENS


def test_the_tags_are_the_tokenizers_special_tokens():
    tags = {*EVENT_TAGS, *(tag for pair in SPAN_TAGS for tag in pair)}
    control = {token for token in COSYVOICE_SPECIAL_TOKENS if token.startswith("<|")}
    assert tags == set(COSYVOICE_SPECIAL_TOKENS) - control


def test_every_special_token_is_left_out_of_a_name():
    text = " ".join(f"word{index} {token}" for index, token in enumerate(COSYVOICE_SPECIAL_TOKENS))
    assert strip_tags(text) == " ".join(f"word{index}" for index in range(len(COSYVOICE_SPECIAL_TOKENS)))
