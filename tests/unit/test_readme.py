"""The README stands alone and stays short: at most 200 lines, with the two commands a clone runs
first (the second is what `.ci/run` runs verbatim), links only inside the repository, and a link
to every topic in docs/. The topics' tables are checked against their sources in test_docs.py."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")

DEMO = 'pip install -e ".[local]" && memtool demo'
SUITE = 'pip install -e ".[dev]" && python -m pytest'


def test_the_readme_is_at_most_200_lines() -> None:
    assert len(README.splitlines()) <= 200


def test_the_readme_gives_the_demo_and_the_suite_commands_as_ci_runs_them() -> None:
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    assert f"{DEMO}\n" in blocks
    assert f"{SUITE}\n" in blocks
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert any(line.startswith(f"{SUITE} ") or line == SUITE for line in ci.splitlines()), ".ci/run must run the README's command verbatim"


def test_the_readme_links_and_names_nothing_outside_the_repository() -> None:
    assert "../" not in README
    assert not re.search(r"\b(DESIGN|STYLE)\.md\b", README)
    for target in re.findall(r"\]\(([^)#]+)\)", README):  # markdown links to files must exist here
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), target


def test_the_readme_links_every_doc() -> None:
    linked = set(re.findall(r"\]\(([^)#]+)", README))
    docs = {f"docs/{path.name}" for path in (ROOT / "docs").glob("*.md")}
    assert docs - linked == set()
    assert "bench/README.md" in linked
