"""The layering rules of docs/architecture.md (Layers): imports point down, never up.

Every module of the library (and every Lambda handler) is read with ``ast``, imports inside
functions included, and each import of a memtool module is checked against the levels below.
Modules of one level may import each other (the domain packages share types); a module whose
package has no level fails the test, so a new package has to be placed before it can be used.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "layers" / "core" / "memtool"

ENTRY, RUNTIME, API, FLOWS, DOMAIN, GROUND = 1, 2, 3, 4, 5, 6
LEVELS: dict[str, int] = {
    # 1. entry points: the Lambda handlers (functions/*/app.py), the CLI, the demo, the MCP server,
    #    and the deploy rehearsal that `memtool aws check` runs
    "cli": ENTRY,
    "demo": ENTRY,
    "mcp": ENTRY,
    "deploy": ENTRY,
    "commands": ENTRY,
    # 2. the composition root, AWS clients, the local runtime
    "runtime": RUNTIME,
    # 3. HTTP models, identity from the request, errors -> HTTP
    "api": API,
    # 4. one application service per flow, taking domain commands
    "flows": FLOWS,
    # 5. the domain packages: they receive ports and know no flow, no API model, no composition root
    **dict.fromkeys(
        ("memory", "retrieval", "semantic", "planning", "sql", "viz", "tools", "analysis", "cache", "diagnosis", "feedback", "datasets", "lifecycle", "knowledge"),
        DOMAIN,
    ),
    # 6. the ground floor (``memtool`` itself holds only the version)
    **dict.fromkeys(("settings", "clock", "errors", "constants", "bedrock", "identity", "observability", "memtool"), GROUND),
}
NAMES = {ENTRY: "entry points", RUNTIME: "runtime", API: "api", FLOWS: "flows", DOMAIN: "the domain", GROUND: "the ground floor"}


@dataclass(frozen=True)
class Violation:
    module: str
    line: int
    imported: str

    def __str__(self) -> str:
        layers = f"{NAMES[level(self.module)]} -> {NAMES[level(self.imported)]}"
        return f"{self.module}:{self.line} imports {self.imported}, which is above it ({layers})"


def unit(module: str) -> str | None:
    """The package a module belongs to, as LEVELS names it; None for a module outside memtool."""
    parts = module.split(".")
    if parts[0] == "functions":
        return "functions"
    if parts[0] != "memtool":
        return None
    return parts[1] if len(parts) > 1 else "memtool"


def level(module: str) -> int:
    name = unit(module)
    if name == "functions":
        return ENTRY
    assert name is not None
    if name not in LEVELS:
        raise KeyError(f"{module}: the package memtool.{name} has no level in docs/architecture.md, Layers (add it to LEVELS)")
    return LEVELS[name]


def imports(module: str, source: str, *, package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in ``source``, at any depth, relative ones resolved."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if package else base[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target == "memtool":  # `from memtool import x`: x is a module, or a name in memtool/__init__
                for alias in node.names:
                    yield node.lineno, f"memtool.{alias.name}" if alias.name in LEVELS else "memtool"
            else:
                yield node.lineno, target


def violations(sources: Iterable[tuple[str, str, bool]]) -> list[Violation]:
    """Imports pointing up, for (module, source, is a package's __init__) triples."""
    found: list[Violation] = []
    for module, source, package in sources:
        mine = level(module)
        for line, imported in imports(module, source, package=package):
            if unit(imported) is None:
                continue
            if level(imported) < mine:
                found.append(Violation(module, line, imported))
    return found


def project_sources() -> list[tuple[str, str, bool]]:
    sources = []
    for path in sorted(LIBRARY.rglob("*.py")):
        relative = path.relative_to(LIBRARY.parent).with_suffix("")
        module = ".".join(relative.parts).removesuffix(".__init__")
        sources.append((module, path.read_text(encoding="utf-8"), path.name == "__init__.py"))
    for path in sorted((ROOT / "functions").glob("*/app.py")):
        sources.append((f"functions.{path.parent.name}.app", path.read_text(encoding="utf-8"), False))
    return sources


def test_every_import_points_down_the_layers():
    sources = project_sources()
    assert len(sources) > 100 and any(module.startswith("functions.") for module, _, _ in sources)

    found = violations(sources)

    assert found == [], "imports that point up the layers of docs/architecture.md:\n" + "\n".join(map(str, found))


def test_every_package_has_a_level():
    packages = {unit(module) for module, _, _ in project_sources()} - {"functions"}
    assert packages <= set(LEVELS), f"packages without a level: {sorted(packages - set(LEVELS))}"


# ---- the check itself fails on what it must catch ------------------------------------------------


@pytest.mark.parametrize(
    ("module", "source", "imported"),
    [
        # a domain package reading the flow state (planning.context once did)
        ("memtool.planning.context", "from memtool.flows.ask.state import AskState\n", "memtool.flows.ask.state"),
        # a flow importing an API request model, inside a function
        ("memtool.flows.ask", "def f():\n    from memtool.api.ask import AskBody\n", "memtool.api.ask"),
        # the API reaching into the composition root, as a plain import
        ("memtool.api.openapi", "import memtool.runtime.handlers\n", "memtool.runtime.handlers"),
        # a relative import out of the domain into runtime
        ("memtool.sql.warehouse", "from ..runtime import container\n", "memtool.runtime"),
        # the ground floor importing a domain package, through `from memtool import ...`
        ("memtool.settings", "from memtool import retrieval\n", "memtool.retrieval"),
        # a package __init__'s relative import
        ("memtool.tools", "from ..flows import ask\n", "memtool.flows"),
    ],
)
def test_a_planted_upward_import_is_caught(module, source, imported):
    found = violations([(module, source, module == "memtool.tools")])
    assert [(v.module, v.imported) for v in found] == [(module, imported)]
    assert str(found[0]).startswith(f"{module}:")


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("memtool.flows.ask", "from memtool.planning.plan import Plan\nfrom memtool.identity import Identity\n"),  # down
        ("memtool.planning.context", "from memtool.semantic.parser import TermMapping\n"),  # same level: domain to domain
        ("functions.ask.app", "from memtool.runtime import container\nfrom memtool.api.ask import AskBody\n"),  # an entry point
        ("memtool.cache.sql_cache", "import json\nfrom pydantic import BaseModel\n"),  # outside memtool
    ],
)
def test_imports_that_point_down_or_across_pass(module, source):
    assert violations([(module, source, False)]) == []


def test_a_package_without_a_level_is_refused():
    with pytest.raises(KeyError, match="memtool.newthing has no level"):
        violations([("memtool.newthing.x", "import os\n", False)])
