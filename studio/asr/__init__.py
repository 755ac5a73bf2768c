"""Automatic transcripts of reference voices (Whisper through transformers).

This package's top holds only names (no torch): the GUI and settings may read them. The model code is
`studio.asr.transcriber` (engine process, CLI); `studio.asr.fabricate` writes random test folders.
"""

#: The model the studio uses by default (a hub id, downloaded once) and smaller ones for slow machines.
DEFAULT_ASR_MODEL = "openai/whisper-large-v3-turbo"
SMALLER_ASR_MODELS = ("openai/whisper-small", "openai/whisper-base", "openai/whisper-tiny")
