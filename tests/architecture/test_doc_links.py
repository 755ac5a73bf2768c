"""The documentation a newcomer reads: every relative link resolves, the README stays a short page for users
with a picture, and `benchmarks/` holds scripts and one README while results live in `benchmarks/results/`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "benchmarks" / "results").glob("*/README.md")),
]
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMG_SRC = re.compile(r"<img\b[^>]*\bsrc=\"([^\"]+)\"")


def relative_links(markdown: str) -> list[str]:
    """The link and image targets of a Markdown text that point into the repository (no scheme, no bare anchor),
    outside code; a code span as a link's text leaves the link."""
    text = CODE_SPAN.sub("", FENCE.sub("", markdown))
    targets = LINK.findall(text) + IMG_SRC.findall(text)
    return [t for t in targets if not re.match(r"^([a-z][a-z0-9+.-]*:|#)", t)]


def test_relative_links_are_found_outside_code_only():
    markdown = (
        "[a](docs/A.md) ![shot](shots/b.png) [`c.json`](results/c.json#row) [web](https://x.org) [top](#top)\n"
        '`[not](code.md)` <img src="d.png" width="600">\n```\n[fenced](e.md)\n```\n'
    )
    assert relative_links(markdown) == ["docs/A.md", "shots/b.png", "results/c.json#row", "d.png"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_in_the_repository(doc: Path):
    broken = []
    for target in relative_links(doc.read_text(encoding="utf-8")):
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert broken == [], f"{doc.relative_to(ROOT)} links to paths that do not exist"


def test_the_readme_is_a_short_page_with_a_screenshot():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 150, "README.md is for users: move details into docs/"
    shots = [t for t in relative_links(readme) if t.startswith("docs/screenshots/") and t.endswith(".png")]
    assert shots, "README.md shows the studio (a screenshot from docs/screenshots/)"
    for command in ("./scripts/studio", "./scripts/test"):
        assert f"`{command}`" in readme, f"README.md names the setup command {command}"


def test_benchmarks_top_level_holds_scripts_and_one_short_readme():
    top = ROOT / "benchmarks"
    others = sorted(
        p.name
        for p in top.iterdir()
        if not (p.suffix == ".py" or p.name in {"README.md", "results", "probes", "__pycache__"})
    )
    assert others == [], "results go under benchmarks/results/DATE/"
    readme = (top / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 150, "the history goes to docs/perf-history.md"


def test_the_gpu_runner_names_only_files_that_exist():
    """scripts/gpu/run.sh runs on a lent GPU machine, where a renamed test or probe shows only as a lost step."""
    runner = (ROOT / "scripts" / "gpu" / "run.sh").read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w/.-])((?:tests|benchmarks|scripts)/[\w/.-]*\w)", runner))
    named |= {
        f"benchmarks/probes/{check}_check.py"
        for check in re.findall(r"for check in ([\w ]+);", runner)[0].split()
    }
    placeholders = {path for path in named if re.search(r"/[A-Z]+(/|$)", path)}  # benchmarks/results/DATE
    missing = sorted(path for path in named - placeholders if not (ROOT / path).exists())
    assert missing == []
