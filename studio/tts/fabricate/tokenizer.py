"""Write a small Qwen2-style tokenizer folder (CosyVoice-BlankEN layout) for random-weight model folders.

Qwen's real vocabulary cannot be downloaded here, so we train a byte-level BPE with the `tokenizers` library
on a built-in English/Chinese sample, with exactly Qwen2's normaliser (NFC) and pre-tokeniser (its split regex
+ byte-level), and save it as `vocab.json`, `merges.txt` and `tokenizer_config.json` (`Qwen2Tokenizer`), the
files `AutoTokenizer` and upstream's `get_qwen_tokenizer` read. Training is deterministic: same arguments,
same files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from studio.tts.frontend.special_tokens import COSYVOICE2_SPECIAL_TOKENS

# Qwen2's special tokens follow the BPE vocabulary, in this order (as in the real BlankEN folder).
QWEN_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

_SAMPLE_TEXT = """
The quick brown fox jumps over the lazy dog. She sells sea shells by the sea shore, and the shells she sells
are surely seashells. Hello, this is a test of the voice studio! How are you today? I am fine, thank you.
It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.
Please read the following sentence slowly and clearly; then repeat it with a happy voice: "Good morning!"
Numbers like one hundred and twenty three, dates like the first of May, and names like Alice and Bob.
In the middle of a long paragraph, the speaker paused for breath, laughed quietly, and went on talking.
收到好友从远方寄来的生日礼物，那份意外的惊喜与深深的祝福让我心中充满了甜蜜的快乐，笑容如花儿般绽放。
希望你以后能够做的比我还好呦。今天天气很好，我们一起去公园散步吧。他在旧书店找到一本泛黄的笔记本。
在他讲述那个荒诞故事的过程中，他突然停下来，因为他自己也被逗笑了。请用开心的语气说这句话。
我们走的每一步，都是我们策略的一部分；你看到的所有一切，包括我此刻与你交谈，所做的一切，所说的每一句话，都有深远的含义。
"""


def _sample_lines() -> list[str]:
    """The training sample's lines, with the benchmark workloads' words (each after a space, and capitalised
    at a line's start as a sentence's first word): Qwen's vocabulary holds each as one token, so a workload's text of
    N words is N text tokens here too, as `studio.workloads` counts them."""
    from studio.workloads import WORDS

    words = sorted(set(WORDS))
    sample = [line for line in _SAMPLE_TEXT.strip().splitlines() if line]
    capitalised = [word.capitalize() for word in words]  # each a line's first word: no space before it
    return sample + [" " + " ".join(words)] + capitalised


def _qwen2_pipeline():
    """A BPE tokenizer with Qwen2's normaliser, pre-tokeniser and decoder (as transformers' Qwen2Tokenizer)."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    split_regex = (
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"""
        r"""\s+(?!\S)|\s+"""
    )
    tokenizer = Tokenizer(
        BPE(
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split_regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _added_token(content: str) -> dict:
    return {
        "content": content,
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": True,
    }


def write_tokenizer_folder(
    directory: str | Path,
    vocab_size: int = 1000,
    special_tokens: Sequence[str] = COSYVOICE2_SPECIAL_TOKENS,
) -> int:
    """Write vocab.json, merges.txt and tokenizer_config.json into `directory` (created if missing).

    `vocab_size` is the BPE vocabulary size (at least 256 + a few merges); the built-in sample may end
    training a little below it. Returns the number of token ids the frontend uses once the family's
    `special_tokens` are added: the Qwen2 backbone's `vocab_size` must be at least this.
    """
    from tokenizers import pre_tokenizers, trainers

    if vocab_size < 300:
        raise ValueError(f"vocab_size must be >= 300 (256 byte symbols + merges), got {vocab_size}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = _qwen2_pipeline()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tokenizer.train_from_iterator(_sample_lines(), trainer=trainer)
    tokenizer.model.save(str(directory))
    base = tokenizer.get_vocab_size()

    added = {str(base + i): _added_token(token) for i, token in enumerate(QWEN_SPECIAL_TOKENS)}
    config = {
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": list(QWEN_SPECIAL_TOKENS[1:]),
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    extra = [t for t in special_tokens if t not in QWEN_SPECIAL_TOKENS]
    return base + len(QWEN_SPECIAL_TOKENS) + len(extra)
