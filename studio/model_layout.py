"""What a complete model folder holds: the one list the loader, `doctor` and the first-run screen share (no
torch, no Qt), so a folder one of them accepts the others accept too.

The studio runs two families, CosyVoice2-0.5B and Fun-CosyVoice3-0.5B. A folder's yaml names its family;
the family says which files the folder must hold. A folder without either yaml is taken for the default
family (CosyVoice2, the one `download` fetches), so its missing files are listed as that family's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

YAML_FILE = "cosyvoice2.yaml"  # CosyVoice2's; a CosyVoice3 folder holds COSYVOICE3.yaml_file instead
LLM_FILE = "llm.pt"
FLOW_FILE = "flow.pt"
HIFT_FILE = "hift.pt"
CAMPPLUS_FILE = "campplus.onnx"
SPEECH_TOKENIZER_FILE = "speech_tokenizer_v2.onnx"  # CosyVoice2's; COSYVOICE3's is speech_tokenizer_v3.onnx
SPK2INFO_FILE = "spk2info.pt"  # optional: voices saved with the model
BLANKEN_DIR = "CosyVoice-BlankEN"
BLANKEN_FILES = ("config.json", "vocab.json", "merges.txt", "tokenizer_config.json")


@dataclass(frozen=True)
class ModelFamily:
    """One CosyVoice generation: the model it ships as and the files its folder holds.

    A folder belongs to the family whose yaml it holds; the other files keep their names across
    families except the speech tokenizer. ``tokenizer_version`` is the text tokenizer the family's yaml
    names (`get_tokenizer`'s ``version``), ``prompt_mel_fmax`` the top frequency of its prompt mel (the
    official yaml's `feat_extractor` ``fmax``; None: half the sample rate).
    """

    name: str
    model: str
    yaml_file: str
    speech_tokenizer_file: str
    tokenizer_version: str
    prompt_mel_fmax: float | None

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

    @property
    def folder_kind(self) -> str:
        """How the studio names a folder of this family: "CosyVoice3 folder (Fun-CosyVoice3-0.5B)"."""
        return f"{self.name} folder ({self.model})"


COSYVOICE2 = ModelFamily(
    "CosyVoice2", "CosyVoice2-0.5B", YAML_FILE, SPEECH_TOKENIZER_FILE, "cosyvoice2", 8000.0
)
COSYVOICE3 = ModelFamily(
    "CosyVoice3", "Fun-CosyVoice3-0.5B", "cosyvoice3.yaml", "speech_tokenizer_v3.onnx", "cosyvoice3", None
)
#: The families the studio runs, in the order a folder holding several yamls is read as.
FAMILIES = (COSYVOICE2, COSYVOICE3)
#: The family `download` fetches, and the one a folder without a yaml is checked against.
DEFAULT_FAMILY = COSYVOICE2
RUNS = DEFAULT_FAMILY  # the name older callers import

#: Every file (relative path) a complete folder of the default family holds (`missing_files` goes by the
#: folder's own family).
REQUIRED_FILES = DEFAULT_FAMILY.required_files


def folder_family(folder: str | Path | None) -> ModelFamily | None:
    """The family whose yaml ``folder`` holds (the first of `FAMILIES` when several), or None when none."""
    path = Path(folder).expanduser() if folder else None
    if path is None or not path.is_dir():
        return None
    return next((family for family in FAMILIES if (path / family.yaml_file).is_file()), None)


def family_of(folder: str | Path | None) -> ModelFamily:
    """The family ``folder`` is checked and loaded as: its yaml's, else `DEFAULT_FAMILY`."""
    return folder_family(folder) or DEFAULT_FAMILY


def missing_files(folder: str | Path | None) -> list[str]:
    """The files of its family (`family_of`) that ``folder`` lacks, in `ModelFamily.required_files` order
    (all of the default family's when it is no folder)."""
    path = Path(folder).expanduser() if folder else None
    if path is None or not path.is_dir():
        return list(REQUIRED_FILES)
    return [name for name in family_of(path).required_files if not (path / name).is_file()]
