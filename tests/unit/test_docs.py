"""The docs say what the code does: every link in README.md, docs/ and bench/README.md resolves
inside the repository (anchors included), every command they show exists (a `memtool` subcommand
and its options in the CLI's parser, a `python -m` module, a script, a file they name), the
configuration page is what its generator writes from the settings model, and the tables that
restate a source (stack parameters, recall budgets, memory kinds, the guardrail attack count)
match it."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType

import pytest

from memtool.cli import build_parser
from memtool.memory.policy import KIND_POLICIES
from memtool.memory.records import MemoryScope
from memtool.runtime.template import load_template
from memtool.settings import DEFAULT_RECALL_BUDGETS, Settings

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")])
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SPAN = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def prose(page: str) -> str:
    """The page without its fenced code blocks (links and headings in code are not links)."""
    return FENCE.sub("", page)


def section(page: str, title: str) -> str:
    start = page.index(f"\n## {title}\n")
    following = page.find("\n## ", start + 1)
    return page[start : following if following != -1 else None]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchors(page: str) -> set[str]:
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", prose(page), re.M):
        anchor, n = slug(heading), 1
        while anchor in found:
            anchor, n = f"{slug(heading)}-{n}", n + 1
        found.add(anchor)
    return found


def links(path: Path) -> Iterator[str]:
    body = SPAN.sub("", prose(text(path)))
    yield from re.findall(r"\]\(([^)\s]+)\)", body)


@pytest.mark.parametrize("page", PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_link_resolves_inside_the_repository(page: Path) -> None:
    broken = []
    for target in links(page):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        resolved = (page.parent / file).resolve() if file else page
        missing = not resolved.is_relative_to(ROOT) or not resolved.exists()
        if missing or (anchor and resolved.suffix == ".md" and anchor not in anchors(text(resolved))):
            broken.append(target)
    assert broken == []


# --- commands -----------------------------------------------------------------------------------


def commands() -> Iterator[tuple[str, list[str]]]:
    """(page, tokens) for every command line in a shell block or an inline code span."""
    for page in PAGES:
        name = str(page.relative_to(ROOT))
        body = text(page)
        snippets = [block for lang, block in FENCE.findall(body) if lang in ("bash", "sh", "shell")]
        snippets += [" ".join(span.split()) for span in SPAN.findall(prose(body))]
        for snippet in snippets:
            for line in snippet.replace("\\\n", " ").splitlines():
                line = re.sub(r"(^|\s)#.*", "", line)
                for command in re.split(r"&&|;|\s\|\s|\|\||\$\(", line):
                    try:
                        tokens = shlex.split(command)
                    except ValueError:
                        tokens = command.split()
                    while tokens and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", tokens[0]):
                        tokens.pop(0)  # VAR=value before the command
                    if tokens:
                        yield name, tokens


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def memtool_problems(tokens: list[str]) -> list[str]:
    parser, path = build_parser(), ["memtool"]
    words = [token.strip("[]").removesuffix("...").removesuffix("…") for token in tokens[1:]]
    for word in words:
        choices = subcommands(parser)
        if not choices:
            break
        if word.startswith("-"):
            continue
        if word not in choices:
            return [f"{' '.join(path)} has no subcommand {word!r}"]
        parser, path = choices[word], [*path, word]
    if subcommands(parser):
        return []  # `memtool model` alone names the group
    known = options(parser)
    flags = [word.split("=", 1)[0] for word in words if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", word)]
    return [f"{' '.join(path)} has no option {flag}" for flag in flags if flag not in known]


def test_every_memtool_command_in_the_docs_is_in_the_cli() -> None:
    problems, seen = [], 0
    for page, tokens in commands():
        if tokens[0] == "memtool" and len(tokens) > 1:
            seen += 1
            problems += [f"{page}: {' '.join(tokens)}: {problem}" for problem in memtool_problems(tokens)]
    assert seen > 30, "the command scan found too few memtool commands to trust"
    assert problems == []


def test_every_python_command_in_the_docs_runs_something_that_exists() -> None:
    missing = []
    for page, tokens in commands():
        if tokens[0] not in ("python", "python3") or len(tokens) < 2:
            continue
        if tokens[1] == "-m" and len(tokens) > 2:
            module = tokens[2]
            if module.startswith("memtool") and importlib.util.find_spec(module) is None:
                missing.append(f"{page}: python -m {module}")
        elif tokens[1].endswith(".py") and not (ROOT / tokens[1]).exists():
            missing.append(f"{page}: python {tokens[1]}")
    assert missing == []


REPOSITORY_PATH = re.compile(
    r"(?:tests|bench|events|statemachines|functions|layers|examples|requirements|docs|\.ci)/[\w./-]+"
    r"|template\.yaml|openapi\.json|pyproject\.toml|ruff\.toml|mypy\.ini"
)


def test_every_repository_path_the_docs_name_exists() -> None:
    missing = []
    for page in PAGES:
        for span in SPAN.findall(prose(text(page))):
            for token in span.split():
                token = token.strip("(),;:")
                if REPOSITORY_PATH.fullmatch(token) and not (ROOT / token).exists():
                    missing.append(f"{page.relative_to(ROOT)}: {token}")
    assert missing == []


# --- the configuration page ---------------------------------------------------------------------


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_configuration", ROOT / "docs" / "generate_configuration.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_page_is_what_its_generator_writes() -> None:
    assert text(ROOT / "docs" / "configuration.md") == generator().render(), (
        "docs/configuration.md is stale: run python docs/generate_configuration.py"
    )


def test_every_setting_has_its_row_on_the_configuration_page() -> None:
    page = text(ROOT / "docs" / "configuration.md")
    rows = re.findall(r"^\| `([A-Z0-9_]+)`", page, re.M)
    assert sorted(rows) == sorted(
        "AWS_LAMBDA_FUNCTION_NAME" if name == "lambda_function_name" else f"MEMTOOL_{name.upper()}" for name in Settings.model_fields
    )


def test_the_generator_refuses_a_setting_without_a_meaning(monkeypatch: pytest.MonkeyPatch) -> None:
    module = generator()
    meanings = dict(module.MEANINGS)
    del meanings["planner"]
    monkeypatch.setattr(module, "MEANINGS", meanings)
    with pytest.raises(SystemExit, match="planner"):
        module.render()


# --- tables that restate a source ----------------------------------------------------------------


def test_every_stack_parameter_is_in_the_deploy_table_with_its_default() -> None:
    parameters = load_template(ROOT / "template.yaml")["Parameters"]
    rows = {
        match.group(1): match.group(2)
        for match in re.finditer(r"^\| `(\w+)` \| ([^|]+) \|", section(text(ROOT / "docs" / "deploying.md"), "Parameters"), re.M)
    }
    assert set(rows) == set(parameters)
    for name, spec in parameters.items():
        default = spec.get("Default")
        if default is None:
            assert rows[name].strip() == "(required)", name
        elif default == "":
            assert rows[name].strip() == "empty", name
        else:
            assert rows[name].strip() == f"`{default}`", name


def test_the_guardrail_attack_count_is_the_tests() -> None:
    from tests.unit.test_guardrails import ATTACKS

    (stated,) = re.findall(r"(\d+) attacks are in the tests", text(ROOT / "docs" / "asking.md"))
    assert int(stated) == len(ATTACKS)


def table(page: str, header: str) -> list[list[str]]:
    """The rows of the markdown table whose header row starts with ``header``."""
    lines = [line.strip() for line in page.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_recall_budget_table_is_the_default_budgets() -> None:
    rows = table(section(text(ROOT / "docs" / "memory.md"), "Recall"), "| route |")
    header = ["profile", "episodic", "correction", "knowledge", "causal"]
    stated = {row[0]: dict(zip(header, map(int, row[1:]), strict=True)) for row in rows}
    assert stated == DEFAULT_RECALL_BUDGETS


def test_the_memory_kinds_table_is_the_kind_policy() -> None:
    rows = table(text(ROOT / "docs" / "architecture.md"), "| kind | scope |")
    stated = {row[0]: row[1:] for row in rows}
    assert set(stated) == {kind.value for kind in KIND_POLICIES}
    units = {"day": timedelta(days=1), "days": timedelta(days=1), "minutes": timedelta(minutes=1)}
    for kind, policy in KIND_POLICIES.items():
        scope, ttl, statuses = stated[kind.value]
        assert {MemoryScope(word) for word in re.findall(r"\b(user|tenant)\b", scope)} == set(policy.allowed_scopes), kind
        if policy.ttl is None:
            assert ttl == "none", kind
        else:
            number, unit = re.match(r"(\d+) (\w+)", ttl).groups()  # type: ignore[union-attr]
            assert int(number) * units[unit] == policy.ttl, kind
        named = set(re.findall(r"\b(active|pending_review|approved|rejected|archived|superseded)\b", statuses))
        assert named == {status.value for status in policy.allowed_statuses}, kind


def test_no_file_cites_a_design_document_the_repository_does_not_have() -> None:
    missing = "DESIGN" + ".md"
    assert not (ROOT / missing).exists()
    citing = [
        str(path.relative_to(ROOT))
        for folder in ("layers", "functions", "tests", "statemachines", "docs", "bench")
        for path in (ROOT / folder).rglob("*")
        if path.suffix in (".py", ".json", ".md", ".yaml") and missing in path.read_text(encoding="utf-8", errors="replace")
    ]
    citing += [name for name in ("openapi.json", "template.yaml", "README.md") if missing in text(ROOT / name)]
    assert citing == []
