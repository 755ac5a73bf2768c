"""The house rules of the code base, as checks: module sizes, the runtime's top level, one source per fact."""

from __future__ import annotations

import re
import tokenize
from pathlib import Path

from studio import envs

ROOT = Path(__file__).resolve().parents[2]
STUDIO = ROOT / "studio"
MAX_LINES = 450
MAX_TTS_TOP_MODULES = 10


def test_no_module_is_over_450_lines():
    long = {
        str(path.relative_to(ROOT)): n
        for path in STUDIO.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these modules (over {MAX_LINES} lines): {long}"


def test_the_runtime_top_level_holds_only_the_pipeline():
    top = sorted(p.name for p in (STUDIO / "tts").glob("*.py"))
    assert len(top) <= MAX_TTS_TOP_MODULES, top
    for package in ("llm", "llm/vllm", "flow", "flow/streaming", "hift", "frontend", "device", "fabricate"):
        assert (STUDIO / "tts" / package / "__init__.py").is_file(), package


def _code_tokens(path: Path):
    """The file's names, numbers and strings (comments and docstrings included as strings)."""
    with path.open("rb") as handle:
        for token in tokenize.tokenize(handle.readline):
            if token.type in (tokenize.NAME, tokenize.NUMBER, tokenize.STRING, tokenize.COMMENT):
                yield token


def test_the_gui_names_no_sample_rate():
    """Audio reaches the GUI with its rate; no widget may assume CosyVoice2's 24 kHz."""
    pattern = re.compile(r"^24_?000$|SAMPLE_RATE|24\s?kHz")
    found = [
        f"{path.relative_to(ROOT)}:{token.start[0]}: {token.string}"
        for path in sorted((STUDIO / "gui").rglob("*.py"))
        for token in _code_tokens(path)
        if pattern.search(token.string)
    ]
    assert found == []


def test_every_studio_variable_read_anywhere_is_declared_in_envs():
    declared = {var.name for var in envs.ALL}
    used = set()
    sources = [*STUDIO.rglob("*.py"), *(ROOT / "scripts").rglob("*"), ROOT / ".ci" / "run"]
    for path in sources:
        if path.is_file():
            used |= set(
                re.findall(r"\bSTUDIO_[A-Z0-9_]+\b", path.read_text(encoding="utf-8", errors="replace"))
            )
    assert used - declared == set(), "declare these in studio/envs.py"
    assert declared - used == set(), "studio/envs.py declares variables nothing reads"


def test_only_envs_reads_studio_variables_from_the_environment():
    offenders = []
    for path in STUDIO.rglob("*.py"):
        if path.name == "envs.py":
            continue
        text = path.read_text(encoding="utf-8")
        if re.search(r"environ(\.get)?\(\s*[\"']STUDIO_|getenv\(\s*[\"']STUDIO_", text):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_the_performance_doc_switch_table_is_the_one_envs_generates():
    performance = (ROOT / "docs" / "PERFORMANCE.md").read_text(encoding="utf-8")
    section = performance.split("\n## Switches\n", 1)[1].split("\n## ", 1)[0]
    assert envs.speed_table() in section, (
        "paste studio.envs.speed_table() into docs/PERFORMANCE.md's Switches section"
    )
