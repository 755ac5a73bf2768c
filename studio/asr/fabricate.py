"""A random-weight Whisper folder in the official Hugging Face layout (``make-asr-model``), for tests.

Real Whisper weights cannot be downloaded here, so tests use a folder with the same files a hub snapshot
has — ``config.json``, ``generation_config.json``, ``model.safetensors``, ``preprocessor_config.json``,
the tokenizer files — loaded by `WhisperForConditionalGeneration.from_pretrained` and `WhisperProcessor`
like the real one. The tokenizer is a small byte-level BPE with Whisper's special tokens (every language
token, the task tokens, ``<|notimestamps|>``), so language detection and forced decoding run the real
code paths; the weights are random (seeded), so transcripts are gibberish.
"""

from __future__ import annotations

from pathlib import Path

#: model shapes: tiny for tests; full has whisper-large-v3-turbo's (809 M parameters) for GPU timings
SIZES = {
    "tiny": dict(d_model=64, encoder_layers=1, decoder_layers=1, heads=2, ffn=128, mels=80, vocab=None),
    "full": dict(
        d_model=1280, encoder_layers=32, decoder_layers=4, heads=20, ffn=5120, mels=128, vocab=51866
    ),
}
_SAMPLE = (
    "the quick brown fox jumps over the lazy dog. hello, this is a reference voice for the studio. "
    "numbers one two three, names like alice and bob, a calm voice reads a few plain words aloud. "
)


def _language_tokens() -> list[str]:
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    return [f"<|{code}|>" for code in LANGUAGES]


def _special_tokens() -> list[str]:
    return [
        "<|endoftext|>",
        "<|startoftranscript|>",
        *_language_tokens(),
        "<|translate|>",
        "<|transcribe|>",
        "<|startoflm|>",
        "<|startofprev|>",
        "<|nospeech|>",
        "<|notimestamps|>",
    ]


def _write_tokenizer(folder: Path, vocab_size: int) -> tuple[dict[str, int], int]:
    """vocab.json + merges.txt (byte-level BPE) and the tokenizer configs; (special token ids, vocab size)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import WhisperTokenizer

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator([_SAMPLE] * 4, trainer=trainer)
    bpe.model.save(str(folder))
    specials = _special_tokens()
    tokenizer = WhisperTokenizer(
        str(folder / "vocab.json"),
        str(folder / "merges.txt"),
        unk_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    tokenizer.add_special_tokens({"additional_special_tokens": specials[1:]})
    tokenizer.save_pretrained(str(folder))
    return {token: tokenizer.convert_tokens_to_ids(token) for token in specials}, len(tokenizer)


def write_asr_folder(folder: str | Path, size: str = "tiny", seed: int = 0) -> Path:
    """Write a random-weight Whisper folder; returns it. Deterministic for a given seed."""
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
    )

    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, not {size!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shape = SIZES[size]
    ids, vocab = _write_tokenizer(folder, vocab_size=400)
    WhisperFeatureExtractor(feature_size=shape["mels"]).save_pretrained(str(folder))
    config = WhisperConfig(
        vocab_size=shape["vocab"] or vocab,  # the full shape keeps Whisper's embedding size (rows unused)
        num_mel_bins=shape["mels"],
        d_model=shape["d_model"],
        encoder_layers=shape["encoder_layers"],
        decoder_layers=shape["decoder_layers"],
        encoder_attention_heads=shape["heads"],
        decoder_attention_heads=shape["heads"],
        encoder_ffn_dim=shape["ffn"],
        decoder_ffn_dim=shape["ffn"],
        max_source_positions=1500,
        max_target_positions=448,
        pad_token_id=ids["<|endoftext|>"],
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|endoftext|>"],
        decoder_start_token_id=ids["<|startoftranscript|>"],
    )
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config).eval()
    if size == "full":
        model = model.half()  # as the hub ships it; 1.6 GB instead of 3.2
    model.save_pretrained(str(folder))
    generation = GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"],
        eos_token_id=ids["<|endoftext|>"],
        pad_token_id=ids["<|endoftext|>"],
        bos_token_id=ids["<|endoftext|>"],
        max_length=448,
        is_multilingual=True,
        lang_to_id={token: ids[token] for token in _language_tokens()},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        no_timestamps_token_id=ids["<|notimestamps|>"],
        begin_suppress_tokens=[ids["<|endoftext|>"]],
        # like the real models, never *generate* control tokens: random weights then give words, not markup
        suppress_tokens=[i for token, i in ids.items() if token != "<|endoftext|>"]
        + list(
            range(vocab, config.vocab_size)
        ),  # rows past the small tokenizer (full size) decode to nothing
    )
    generation.save_pretrained(str(folder))
    (folder / "README.md").write_text(
        f"Random-weight Whisper folder ({size}) written by cosyvoice-studio make-asr-model: for tests, "
        "its transcripts are gibberish.\n"
    )
    return folder
