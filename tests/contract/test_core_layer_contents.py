"""The core layer (and the analysis images' memtool) ships no local-only code, and no handler needs it.

layers/core/local-only.txt names what only the command line and the local runtime use. These tests
walk every deployed handler's imports (``ast``, from functions/*/app.py through memtool): the
imports a module runs when it is imported, and the lazy ones inside functions, except the few
branches the AWS settings never take (:data:`LOCAL_BRANCHES`, each with the setting that rules it
out). No module reached may be one the layer leaves out. They also prove that the Makefile, the
Dockerfiles and bench/package_sizes.py filter through the same list and code.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from memtool.deploy import sizes
from memtool.runtime.template import load_template

ROOT = Path(__file__).resolve().parents[2]
LAYER = ROOT / "layers" / "core"

# Lazy imports the AWS runtime never runs, as (importer, imported): each sits in a branch that
# settings Settings refuses in a Lambda (`_aws_reads_no_local_path`) or that only `runtime=local` takes.
LOCAL_BRANCHES: dict[tuple[str, str], str] = {
    ("memtool.runtime.container", "memtool.memory.sqlite_store"): "MEMTOOL_STORE=sqlite (refused in AWS)",
    ("memtool.runtime.container", "memtool.runtime.sqlite_idempotency"): "MEMTOOL_STORE=sqlite (refused in AWS)",
    ("memtool.runtime.container", "memtool.retrieval.embedded_index"): "MEMTOOL_VECTOR_INDEX=embedded (refused in AWS)",
    ("memtool.runtime.container", "memtool.sql.duckdb_warehouse"): "MEMTOOL_WAREHOUSE=duckdb (refused in AWS)",
    ("memtool.runtime.container", "memtool.sql.urls"): "MEMTOOL_WAREHOUSE=duckdb with a URL, or MEMTOOL_TENANTS_FILE (refused in AWS)",
    ("memtool.runtime.container", "memtool.runtime.local_flows"): "flow_runner() when settings.is_local",
    ("memtool.runtime.budget", "memtool.memory.sqlite_store"): "MEMTOOL_STORE=sqlite (refused in AWS)",
}


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    lazy: bool  # inside a function: runs when called, not when the module is imported
    line: int


def module_files(layer: Path = LAYER) -> dict[str, Path]:
    """Every memtool module (dotted name) and its file."""
    found = {}
    for path in (layer / "memtool").rglob("*.py"):
        parts = list(path.relative_to(layer).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


_PARSED: dict[tuple[Path, str, int], list[Import]] = {}


def imports_in(path: Path, module: str, known: dict[str, Path]) -> list[Import]:
    """The memtool modules a file imports (a `from package import name` counts the submodule),
    skipping `if TYPE_CHECKING:` blocks. Parsed once per file."""
    key = (path, module, id(known))
    if key not in _PARSED:
        _PARSED[key] = _imports_in(path, module, known)
    return _PARSED[key]


def _imports_in(path: Path, module: str, known: dict[str, Path]) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def add(target: str, lazy: bool, line: int) -> None:
        if target in known:
            found.append(Import(module, target, lazy, line))

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for orelse in child.orelse:
                    visit(orelse, lazy)
                continue
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name, inner, child.lineno)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join(anchor + ([child.module] if child.module else []))
                add(base, inner, child.lineno)
                for alias in child.names:
                    add(f"{base}.{alias.name}", inner, child.lineno)
            visit(child, inner)

    visit(tree, False)
    return found


def handler_files(template: dict) -> dict[str, Path]:
    """Each deployed function's handler module file (zip: CodeUri; image: beside its Dockerfile)."""
    files = {}
    for name, resource in template["Resources"].items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        props = resource["Properties"]
        if props.get("PackageType") == "Image":
            metadata = resource["Metadata"]
            folder = (ROOT / metadata["DockerContext"] / metadata["Dockerfile"]).parent
            files[name] = folder / "app.py"
        else:
            files[name] = ROOT / props["CodeUri"] / f"{props['Handler'].split('.')[0]}.py"
    return files


def closure(entry: Path, known: dict[str, Path], skip: Iterable[tuple[str, str]] = LOCAL_BRANCHES) -> dict[str, list[str]]:
    """Every memtool module a handler may import in AWS, with the chain that reaches it."""
    skipped = set(skip)
    reached: dict[str, list[str]] = {}
    frontier = [(i.target, [entry.parent.name, i.target]) for i in imports_in(entry, "__handler__", known)]
    while frontier:
        module, chain = frontier.pop()
        if module in reached:
            continue
        reached[module] = chain
        # importing a.b.c imports a and a.b first
        parts = module.split(".")
        frontier += [(".".join(parts[:n]), chain) for n in range(1, len(parts)) if ".".join(parts[:n]) not in reached]
        for found in imports_in(known[module], module, known):
            if (found.importer, found.target) not in skipped:
                frontier.append((found.target, [*chain, found.target]))
    return reached


def excluded_modules(known: dict[str, Path]) -> set[str]:
    left_out = set(sizes.left_out_files(LAYER))
    return {m for m, p in known.items() if p.relative_to(LAYER).as_posix() in left_out}


@pytest.fixture(scope="module")
def known() -> dict[str, Path]:
    return module_files()


def test_no_handler_needs_a_module_the_layer_leaves_out(known: dict[str, Path]) -> None:
    excluded = excluded_modules(known)
    handlers = handler_files(load_template(ROOT / "template.yaml"))

    assert {"memtool.cli", "memtool.runtime.local", "memtool.sql.demo_warehouse", "memtool.demo"} <= excluded
    assert len(handlers) == 9
    for function, entry in handlers.items():
        reached = closure(entry, known)
        needed = {m: " -> ".join(reached[m]) for m in reached if m in excluded}
        assert needed == {}, f"{function} needs modules the layer leaves out: {needed}"
        assert "memtool.runtime.container" in reached or function == "MaintenanceFunction", function


def test_the_local_branches_are_lazy_and_lead_only_to_left_out_modules(known: dict[str, Path]) -> None:
    excluded = excluded_modules(known)
    edges = {(i.importer, i.target): i for m, p in known.items() for i in imports_in(p, m, known)}

    for (importer, target), reason in LOCAL_BRANCHES.items():
        assert (importer, target) in edges, f"{importer} no longer imports {target}: drop it from LOCAL_BRANCHES"
        assert edges[(importer, target)].lazy, f"{importer} imports {target} at import time ({reason})"
        assert target in excluded, f"{target} is skipped as local-only ({reason}) but the layer ships it"


def test_the_walk_finds_a_local_only_import(known: dict[str, Path], tmp_path: Path) -> None:
    # Given a handler that imports the local runtime when it is loaded, and one that reaches it
    # through a lazy import in a branch the AWS settings do take
    direct = tmp_path / "direct" / "app.py"
    direct.parent.mkdir()
    direct.write_text("from memtool.runtime import container\nfrom memtool.runtime.local import LocalRuntime\n")
    via_branch = tmp_path / "branch" / "app.py"
    via_branch.parent.mkdir()
    via_branch.write_text("from memtool.runtime import container\n")

    # When walked, Then the first is caught at import time, the second only without LOCAL_BRANCHES
    assert "memtool.runtime.local" in closure(direct, known)
    assert "memtool.runtime.local_flows" not in closure(via_branch, known)
    assert "memtool.runtime.local_flows" in closure(via_branch, known, skip=())


def test_zip_handlers_import_only_what_the_layer_installs(known: dict[str, Path]) -> None:
    """Third-party modules a zip handler imports when loaded come from the layer's requirements."""
    from importlib.metadata import packages_distributions

    provided = {"memtool", *sys.stdlib_module_names}
    distributions = sizes.requirement_closure(LAYER / "requirements.txt").distributions
    for top, names in packages_distributions().items():
        if any(sizes._normalised(n) in distributions for n in names):
            provided.add(top)
    template = load_template(ROOT / "template.yaml")
    for function, entry in handler_files(template).items():
        if template["Resources"][function]["Properties"].get("PackageType") == "Image":
            continue
        modules = [entry, *(known[m] for m in closure(entry, known))]
        for path in modules:
            tree = _module_tree(path)
            for node in tree.body:  # module level only: what runs at cold start
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and not node.level:
                    names = [node.module or ""]
                for name in names:
                    assert name.split(".")[0] in provided, f"{function}: {path.relative_to(ROOT)} imports {name}, not in the layer"


_TREES: dict[Path, ast.Module] = {}


def _module_tree(path: Path) -> ast.Module:
    if path not in _TREES:
        _TREES[path] = ast.parse(path.read_text(encoding="utf-8"))
    return _TREES[path]


# ---------------------------------------------------------------------------------- one list


def test_the_makefile_copies_exactly_the_listed_files(tmp_path: Path) -> None:
    makefile = (LAYER / "Makefile").read_text(encoding="utf-8")
    assert 'memtool/deploy/sizes.py" copy' in makefile
    assert "--platform manylinux2014_aarch64" in makefile  # the template's BuildArchitecture
    template = load_template(ROOT / "template.yaml")
    metadata = template["Resources"]["CoreLayer"]["Metadata"]
    assert (metadata["BuildMethod"], metadata["BuildArchitecture"]) == ("makefile", "arm64")

    # sam build runs `make build-CoreLayer` with ARTIFACTS_DIR; the copy half needs no network.
    result = subprocess.run(
        ["make", "-s", "-f", str(LAYER / "Makefile"), "copy-memtool", f"ARTIFACTS_DIR={tmp_path}"],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    copied = sorted(p.relative_to(tmp_path / "python").as_posix() for p in (tmp_path / "python").rglob("*") if p.is_file())
    assert copied == sizes.layer_files(LAYER)
    assert "memtool/cli.py" not in copied and "memtool/runtime/container.py" in copied
    assert not [p for p in copied if p.endswith(".pyc")]


def test_the_list_reaches_every_consumer() -> None:
    patterns = sizes.local_only_patterns(LAYER)
    left_out = sizes.left_out_files(LAYER)

    # Every pattern leaves something out (a stale line is an error), and nothing else is dropped.
    for pattern in patterns:
        assert any(sizes.is_local_only(f, [pattern]) for f in left_out), f"{pattern} matches nothing"
    assert set(left_out) | set(sizes.layer_files(LAYER)) >= {p.relative_to(LAYER).as_posix() for p in (LAYER / "memtool").rglob("*.py")}
    # bench/package_sizes.py measures the core layer's package through the same function.
    spec = importlib.util.spec_from_file_location("package_sizes_for_list", ROOT / "bench" / "package_sizes.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    assert bench.layer_content_bytes(LAYER) == sizes.layer_package_bytes(LAYER)
    assert bench.shipped_bytes(LAYER / "memtool") == sizes.layer_package_bytes(LAYER)
    assert sizes.layer_package_bytes(LAYER) < sizes.tree_bytes(LAYER / "memtool")
    # The images filter with the same script.
    for name in ("analyze", "ml_tools"):
        dockerfile = (ROOT / "functions" / name / "Dockerfile").read_text(encoding="utf-8")
        assert "RUN python3 /tmp/core/memtool/deploy/sizes.py copy /tmp/core /tmp/package" in dockerfile, name


def test_the_copy_script_runs_with_the_standard_library_only(tmp_path: Path) -> None:
    # The Makefile and the Dockerfiles run sizes.py as a script, before anything is installed.
    result = subprocess.run(
        [sys.executable, "-I", "-S", str(LAYER / "memtool" / "deploy" / "sizes.py"), "copy", str(LAYER), str(tmp_path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "memtool" / "settings.py").is_file()
    assert not (tmp_path / "memtool" / "runtime" / "local.py").exists()
