"""What a complete model folder holds: the one list the loader, `doctor` and the first-run screen share (no
torch, no Qt), so a folder one of them accepts the others accept too.

The studio runs CosyVoice2-0.5B. It also knows the other family's layout, Fun-CosyVoice3-0.5B, so that a
CosyVoice3 folder is named as such (`foreign_family_problem`) instead of being reported as a broken
CosyVoice2 folder."""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class ModelFamily:
    """One CosyVoice generation: the model it ships as and the files its folder holds.

    A folder belongs to the family whose yaml it holds; the other files keep their names across
    families except the speech tokenizer.
    """

    name: str
    model: str
    yaml_file: str
    speech_tokenizer_file: str

    @property
    def required_files(self) -> tuple[str, ...]:
        """Every file (relative path) a complete folder of this family holds."""
        return (
            self.yaml_file,
            LLM_FILE,
            FLOW_FILE,
            HIFT_FILE,
            CAMPPLUS_FILE,
            self.speech_tokenizer_file,
            *(f"{BLANKEN_DIR}/{name}" for name in BLANKEN_FILES),
        )


COSYVOICE2 = ModelFamily("CosyVoice2", "CosyVoice2-0.5B", YAML_FILE, SPEECH_TOKENIZER_FILE)
COSYVOICE3 = ModelFamily("CosyVoice3", "Fun-CosyVoice3-0.5B", "cosyvoice3.yaml", "speech_tokenizer_v3.onnx")
#: The families the studio knows, the one it runs first.
FAMILIES = (COSYVOICE2, COSYVOICE3)
#: The family this version of the studio loads.
RUNS = COSYVOICE2

#: Every file (relative path) the runtime reads; a folder lacking any of them does not load.
REQUIRED_FILES = RUNS.required_files


def missing_files(folder: str | Path | None) -> list[str]:
    """The required files ``folder`` lacks, in `REQUIRED_FILES` order (all of them when it is no folder)."""
    path = Path(folder).expanduser() if folder else None
    if path is None or not path.is_dir():
        return list(REQUIRED_FILES)
    return [name for name in REQUIRED_FILES if not (path / name).is_file()]


def folder_family(folder: str | Path | None) -> ModelFamily | None:
    """The family whose yaml ``folder`` holds (the runnable one first), or None when it holds none."""
    path = Path(folder).expanduser() if folder else None
    if path is None or not path.is_dir():
        return None
    return next((family for family in FAMILIES if (path / family.yaml_file).is_file()), None)


def foreign_family_problem(folder: str | Path | None) -> str | None:
    """Why ``folder`` cannot run here when it is a folder of another family (None otherwise).

    The one sentence the loader, `doctor` and the first-run screen all show for such a folder.
    """
    family = folder_family(folder)
    if family is None or family == RUNS:
        return None
    return (
        f"This is a {family.name} folder ({family.model}, with {family.yaml_file}); this version of the "
        f"studio runs {RUNS.model} folders only. Choose a {RUNS.model} folder "
        f"(cosyvoice-studio download fetches one)."
    )
