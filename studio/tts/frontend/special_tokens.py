"""The special tokens each family's text tokenizer adds to the Qwen2 vocabulary, in the official order.

Order decides ids: the tokenizer gives each token not already in the vocabulary the next free id, so with
the real Qwen2 vocabulary (151643 BPE tokens, then ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``)
``<|endofprompt|>`` becomes id 151646 for both families, as upstream's LM expects. CosyVoice3's list is
CosyVoice2's followed by ``<|endofsystem|>``, English phones and pinyin finals.
"""

from __future__ import annotations

#: CosyVoice2's added special tokens (upstream's `CosyVoice2Tokenizer`), each one token id.
COSYVOICE2_SPECIAL_TOKENS = (
    "<|im_start|>",
    "<|im_end|>",
    "<|endofprompt|>",
    "[breath]",
    "<strong>",
    "</strong>",
    "[noise]",
    "[laughter]",
    "[cough]",
    "[clucking]",
    "[accent]",
    "[quick_breath]",
    "<laughter>",
    "</laughter>",
    "[hissing]",
    "[sigh]",
    "[vocalized-noise]",
    "[lipsmack]",
    "[mn]",
)

_ARPABET_VOWELS = "AA AE AH AO AW AY EH ER EY IH IY OW OY UH UW".split()
_ARPABET_CONSONANTS = "B CH D DH F G HH JH K L M N NG P R S SH T TH V W Y Z ZH".split()
#: English phones (CMU ARPAbet) in alphabetical order, each vowel followed by its stress forms 0, 1 and 2.
ENGLISH_PHONE_TOKENS = tuple(
    token
    for phone in sorted(_ARPABET_VOWELS + _ARPABET_CONSONANTS)
    for token in (
        [f"[{phone}]", *(f"[{phone}{stress}]" for stress in range(3))]
        if phone in _ARPABET_VOWELS
        else [f"[{phone}]"]
    )
)

#: Pinyin initials and finals (with tone marks) in code point order.
PINYIN_TOKENS = tuple(
    f"[{syllable}]"
    for syllable in """
a ai an ang ao b c ch d e ei en eng f g h i ian in ing iu ià iàn iàng iào iá ián iáng iáo iè ié
iòng ióng iù iú iā iān iāng iāo iē iě iōng iū iǎ iǎn iǎng iǎo iǒng iǔ j k l m n o ong ou p q r s sh
t u uang ue un uo uà uài uàn uàng uá uái uán uáng uè ué uì uí uò uó uā uāi uān uāng uē uě uī uō uǎ
uǎi uǎn uǎng uǐ uǒ vè w x y z zh à ài àn àng ào á ái án áng áo è èi èn èng èr é éi én éng ér ì ìn
ìng í ín íng ò òng òu ó óng óu ù ùn ú ún ā āi ān āng āo ē ēi ēn ēng ě ěi ěn ěng ěr ī īn īng ō ōng
ōu ū ūn ǎ ǎi ǎn ǎng ǎo ǐ ǐn ǐng ǒ ǒng ǒu ǔ ǔn ǘ ǚ ǜ
""".split()
)

#: CosyVoice3's added special tokens (upstream's `CosyVoice3Tokenizer`), each one token id.
COSYVOICE3_SPECIAL_TOKENS = (
    *COSYVOICE2_SPECIAL_TOKENS,
    "<|endofsystem|>",
    *ENGLISH_PHONE_TOKENS,
    *PINYIN_TOKENS,
)

#: The yaml's `get_tokenizer` ``version`` -> the tokens that tokenizer adds.
SPECIAL_TOKENS_BY_VERSION = {
    "cosyvoice2": COSYVOICE2_SPECIAL_TOKENS,
    "cosyvoice3": COSYVOICE3_SPECIAL_TOKENS,
}


def special_tokens_for(version: str) -> tuple[str, ...]:
    """The special tokens of the tokenizer a yaml's `get_tokenizer` ``version`` names; ValueError otherwise."""
    try:
        return SPECIAL_TOKENS_BY_VERSION[version]
    except KeyError:
        known = ", ".join(sorted(SPECIAL_TOKENS_BY_VERSION))
        raise ValueError(f"unknown tokenizer version {version!r} (known: {known})") from None
