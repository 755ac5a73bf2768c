"""What a complete CosyVoice2-0.5B folder holds: the one list the loader, `doctor` and the first-run screen
share (no torch, no Qt), so a folder one of them accepts the others accept too."""

from __future__ import annotations

from pathlib import Path

YAML_FILE = "cosyvoice2.yaml"
LLM_FILE = "llm.pt"
FLOW_FILE = "flow.pt"
HIFT_FILE = "hift.pt"
CAMPPLUS_FILE = "campplus.onnx"
SPEECH_TOKENIZER_FILE = "speech_tokenizer_v2.onnx"
SPK2INFO_FILE = "spk2info.pt"  # optional: voices saved with the model
BLANKEN_DIR = "CosyVoice-BlankEN"
BLANKEN_FILES = ("config.json", "vocab.json", "merges.txt", "tokenizer_config.json")

#: Every file (relative path) the runtime reads; a folder lacking any of them does not load.
REQUIRED_FILES = (
    YAML_FILE,
    LLM_FILE,
    FLOW_FILE,
    HIFT_FILE,
    CAMPPLUS_FILE,
    SPEECH_TOKENIZER_FILE,
    *(f"{BLANKEN_DIR}/{name}" for name in BLANKEN_FILES),
)


def missing_files(folder: str | Path | None) -> list[str]:
    """The required files ``folder`` lacks, in `REQUIRED_FILES` order (all of them when it is no folder)."""
    path = Path(folder).expanduser() if folder else None
    if path is None or not path.is_dir():
        return list(REQUIRED_FILES)
    return [name for name in REQUIRED_FILES if not (path / name).is_file()]
