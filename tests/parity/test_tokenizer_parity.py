"""Parity of our tokenizer folder and TextFrontend with the reference's get_qwen_tokenizer and split_paragraph."""

from __future__ import annotations

import pytest

from studio.tts.fabricate.tokenizer import write_tokenizer_folder
from studio.tts.frontend.text import COSYVOICE_SPECIAL_TOKENS, TextFrontend
from studio.tts.frontend.text_normalize import is_only_punctuation, split_paragraph

pytestmark = pytest.mark.parity

TAGS = [
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
    "<strong>",
    "</strong>",
    "<laughter>",
    "</laughter>",
    "<|endofprompt|>",
]
TEXTS = [
    "Hello there, this is a plain English sentence with numbers 12 and 345.",
    "在他讲述那个荒诞故事的过程中，他突然[laughter]停下来，因为他自己也被逗笑了[laughter]。",
    "Speak <strong>slowly</strong> and happily<|endofprompt|>We <laughter>won</laughter> the game [breath] today!",
    " ".join(TAGS),
    "".join(TAGS) + "mixed 中文 and English [mn][lipsmack]",
]


@pytest.fixture(scope="module")
def tokenizers(reference, tmp_path_factory):
    from cosyvoice.tokenizer.tokenizer import get_qwen_tokenizer

    folder = tmp_path_factory.mktemp("model") / "CosyVoice-BlankEN"
    total = write_tokenizer_folder(folder, vocab_size=800)
    theirs = get_qwen_tokenizer(str(folder), skip_special_tokens=True, add_additional_specials=True)
    return TextFrontend(folder), theirs, total


def test_builder_reports_the_id_count_the_frontend_uses(tokenizers):
    ours, _, total = tokenizers
    assert len(ours) == total
    assert max(id_ for text in TEXTS for id_ in ours.encode(text)) < total


@pytest.mark.parametrize("text", TEXTS)
def test_ids_equal_reference_and_tags_are_single_tokens(tokenizers, text):
    ours, theirs, _ = tokenizers
    ids = ours.encode(text)
    assert ids == theirs.encode(text)
    assert ours.decode(ids) == theirs.decode(ids)
    for tag in TAGS:
        if tag in text:
            assert len(ours.encode(tag)) == 1, tag


def test_every_cosyvoice_special_token_is_one_distinct_id(tokenizers):
    ours, _, _ = tokenizers
    ids = [ours.encode(token) for token in COSYVOICE_SPECIAL_TOKENS]
    assert all(len(i) == 1 for i in ids) and len({i[0] for i in ids}) == len(ids)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_split_paragraph_matches_reference(reference, tokenizers, lang):
    from cosyvoice.utils.frontend_utils import is_only_punctuation as their_punct_only
    from cosyvoice.utils.frontend_utils import split_paragraph as their_split

    ours, theirs, _ = tokenizers
    if lang == "en":
        text = (
            " ".join(f"Sentence number {i} is here, and it is somewhat long!" for i in range(15)) + ' "Yes."'
        )
    else:
        text = "".join(f"这是第{i}个比较长的句子，我们继续说下去吧。" for i in range(15)) + "好"
    mine = split_paragraph(text, lambda s: len(ours.encode(s)), lang, 80, 60, 20)
    assert mine == their_split(text, theirs.encode, lang, token_max_n=80, token_min_n=60, merge_len=20)
    assert len(mine) > 1
    for piece in ["...", "!?", "，。", "a.", "好"]:
        assert is_only_punctuation(piece) == their_punct_only(piece)
