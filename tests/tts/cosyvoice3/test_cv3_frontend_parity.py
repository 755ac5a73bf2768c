"""Our CosyVoice3 text tokenizer against the reference's (vllm-omni's `cosyvoice3/tokenizer.py`, a port of
upstream's `CosyVoice3Tokenizer`): the same special tokens in the same order, the same ids for any text.

One departure of the reference from upstream: where upstream (ace7c47, since it added the list) has the
ARPAbet vowel IY (``[IY]``, ``[IY0]``, ``[IY1]``, ``[IY2]``), vllm-omni has ``[IT]``... at the same four
positions. We follow upstream, whose tokenizer the official model was trained with; the four ids are the
same, only their text differs.

The reference module needs only torch and transformers, so it is loaded from its file in the parity folder
(`scripts/install-parity-reference` installs it, as the parity fixtures do) without vllm-omni's package."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

from studio.tts.fabricate.tokenizer import write_tokenizer_folder
from studio.tts.frontend.special_tokens import COSYVOICE2_SPECIAL_TOKENS, COSYVOICE3_SPECIAL_TOKENS
from studio.tts.frontend.text import TextFrontend

pytestmark = pytest.mark.parity

REPO = Path(__file__).resolve().parents[3]
REFERENCE_DIR = Path(os.environ.get("PARITY_REFERENCE_DIR") or REPO / ".cache" / "parity-ref")
REFERENCE_TOKENIZER = "vllm_omni/model_executor/models/cosyvoice3/tokenizer.py"
#: Upstream's token -> the reference's at the same position (the one place the two lists differ).
REFERENCE_SPELLING = {f"[IY{stress}]": f"[IT{stress}]" for stress in ("", "0", "1", "2")}
#: Texts without the four tokens spelled differently: their ids must be equal.
TEXTS = [
    "You are a helpful assistant.<|endofprompt|>Hello there, this is a plain sentence with 12 and 345.",
    "You are a helpful assistant. 请用广东话表达。<|endofprompt|>今天天气很好[breath]，我们一起去公园散步吧。",
    "<|endofsystem|>[AA1][B][ER0] [ǐng][uǎng] <strong>slowly</strong> [laughter] [vocalized-noise]",
    "".join(t for t in COSYVOICE3_SPECIAL_TOKENS[::3] if t not in REFERENCE_SPELLING) + " mixed 中文 [mn]",
]


@pytest.fixture(scope="module")
def reference_tokenizers():
    """The reference's tokenizer module, loaded from its file."""
    path = REFERENCE_DIR / REFERENCE_TOKENIZER
    if not path.is_file():
        subprocess.run([str(REPO / "scripts" / "install-parity-reference"), str(REFERENCE_DIR)], check=True)
    spec = importlib.util.spec_from_file_location("reference_cosyvoice3_tokenizer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def blanken(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model") / "CosyVoice-BlankEN"
    write_tokenizer_folder(folder, vocab_size=800, special_tokens=COSYVOICE3_SPECIAL_TOKENS)
    return folder


def test_our_special_token_lists_equal_the_references(reference_tokenizers, blanken):
    theirs3 = reference_tokenizers.get_qwen_tokenizer(str(blanken), True, version="cosyvoice3")
    theirs2 = reference_tokenizers.get_qwen_tokenizer(str(blanken), True, version="cosyvoice2")
    assert type(theirs3).__name__ == "CosyVoice3Tokenizer"
    ours_as_the_reference_spells_them = tuple(REFERENCE_SPELLING.get(t, t) for t in COSYVOICE3_SPECIAL_TOKENS)
    assert tuple(theirs3.special_tokens["additional_special_tokens"]) == ours_as_the_reference_spells_them
    assert tuple(theirs2.special_tokens["additional_special_tokens"]) == COSYVOICE2_SPECIAL_TOKENS


def test_the_iy_tokens_take_the_ids_the_reference_gives_its_it_tokens(reference_tokenizers, blanken):
    ours = TextFrontend(blanken, special_tokens=COSYVOICE3_SPECIAL_TOKENS)
    theirs = reference_tokenizers.CosyVoice3Tokenizer(str(blanken))
    for upstream_token, reference_token in REFERENCE_SPELLING.items():
        assert (
            ours.encode(upstream_token) == theirs.encode(reference_token) == [ours.token_id(upstream_token)]
        )


@pytest.mark.parametrize("text", TEXTS)
def test_ids_equal_the_references(reference_tokenizers, blanken, text):
    ours = TextFrontend(blanken, special_tokens=COSYVOICE3_SPECIAL_TOKENS)
    theirs = reference_tokenizers.CosyVoice3Tokenizer(str(blanken))
    ids = ours.encode(text)
    assert ids == theirs.encode(text)
    assert ours.decode(ids) == theirs.decode(ids)
    assert ours.token_id("<|endofprompt|>") == theirs.tokenizer.convert_tokens_to_ids("<|endofprompt|>")
