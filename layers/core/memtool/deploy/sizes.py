"""What the core layer ships and how big each function unzips to, measured offline.

Two jobs, one list:

* **The layer's memtool package.** ``layers/core/local-only.txt`` names the modules only the command
  line and the local runtime use; :func:`layer_files` is memtool without them. ``layers/core/Makefile``
  (``sam build``'s ``build-CoreLayer``) and the analysis images' Dockerfiles copy exactly those files
  by running this file as a script, and ``bench/package_sizes.py`` and ``memtool aws check`` measure
  them, so what is measured is what is shipped::

      python memtool/deploy/sizes.py copy LAYER_DIR DEST     # DEST/memtool, filtered

* **Sizes without a network.** :func:`requirement_closure` follows a requirements file through the
  distributions installed in the current environment (``importlib.metadata``), with the markers of
  Lambda's python3.12 on arm64, and :func:`distribution_bytes` adds up their ``RECORD`` files. The
  wheels pip would download for arm64 may differ slightly from the installed ones (another platform's
  binaries); ``bench/package_sizes.py`` installs the real arm64 wheels for the README's figures.

Standard library only at import time: the Makefile runs this file on a build host that may have
nothing but Python and pip. Deploy tooling: never shipped (it is in local-only.txt itself).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

LAYER_DIR = Path(__file__).resolve().parents[2]  # layers/core
LOCAL_ONLY_FILE = "local-only.txt"
PACKAGE = "memtool"
MB = 1024 * 1024
ZIP_LIMIT_BYTES = 262_144_000  # "Unzipped size must be smaller than 262144000 bytes" (250 MB)
IMAGE_LIMIT_BYTES = 10 * 1024 * MB  # 10 GB, base image included
# What sam build leaves out of a Python function or layer artifact.
EXCLUDED_NAMES = {"__pycache__", ".pytest_cache", ".mypy_cache", ".aws-sam", ".git"}
EXCLUDED_SUFFIXES = (".pyc", ".egg-info")
# Lambda's python3.12 runtime on Graviton, for requirement markers.
LAMBDA_MARKERS = {
    "python_version": "3.12",
    "python_full_version": "3.12.0",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "aarch64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}
WHEELS_MAY_DIFFER = (
    "sizes measured from the distributions installed here; the arm64 wheels sam build installs may "
    "differ slightly (bench/package_sizes.py installs them)"
)


# ---------------------------------------------------------------------------------- the package


def local_only_patterns(layer_dir: Path = LAYER_DIR) -> list[str]:
    """The globs of layers/core/local-only.txt (comments and blank lines dropped)."""
    lines = (layer_dir / LOCAL_ONLY_FILE).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def is_local_only(relative: str, patterns: Iterable[str]) -> bool:
    """Whether a path relative to the layer folder (memtool/runtime/local.py) is left out."""
    for pattern in patterns:
        if pattern.endswith("/"):
            if relative.startswith(pattern):
                return True
        elif fnmatch.fnmatchcase(relative, pattern):
            return True
    return False


def _packaged(names: Iterable[str]) -> list[str]:
    return [n for n in names if n not in EXCLUDED_NAMES and not n.endswith(EXCLUDED_SUFFIXES)]


def layer_files(layer_dir: Path = LAYER_DIR) -> list[str]:
    """The memtool files the layer ships, relative to the layer folder, sorted."""
    patterns = local_only_patterns(layer_dir)
    files = []
    for folder, dirnames, filenames in os.walk(layer_dir / PACKAGE):
        dirnames[:] = sorted(_packaged(dirnames))
        for filename in _packaged(filenames):
            relative = (Path(folder) / filename).relative_to(layer_dir).as_posix()
            if not is_local_only(relative, patterns):
                files.append(relative)
    return sorted(files)


def left_out_files(layer_dir: Path = LAYER_DIR) -> list[str]:
    """The memtool source files local-only.txt leaves out (what the layer does not ship)."""
    shipped = set(layer_files(layer_dir))
    every = []
    for folder, dirnames, filenames in os.walk(layer_dir / PACKAGE):
        dirnames[:] = _packaged(dirnames)
        every += [(Path(folder) / f).relative_to(layer_dir).as_posix() for f in _packaged(filenames)]
    return sorted(set(every) - shipped)


def copy_layer_package(layer_dir: Path, destination: Path) -> list[str]:
    """Copy the filtered memtool package into destination (destination/memtool/...)."""
    files = layer_files(layer_dir)
    for relative in files:
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(layer_dir / relative, target)
    return files


def layer_package_bytes(layer_dir: Path = LAYER_DIR) -> int:
    return sum((layer_dir / relative).stat().st_size for relative in layer_files(layer_dir))


def tree_bytes(path: Path) -> int:
    """Apparent size of a file or folder as sam build would package it (no bytecode caches)."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for folder, dirnames, filenames in os.walk(path):
        dirnames[:] = _packaged(dirnames)
        total += sum((Path(folder) / f).lstat().st_size for f in _packaged(filenames))
    return total


# ---------------------------------------------------------------------------------- distributions


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines(requirements: Path) -> list[str]:
    """The requirement specifiers of a requirements file, following -r includes; continuation
    lines joined and per-requirement options (``--hash``) dropped, as pip reads a lock export."""
    found: list[str] = []
    text = requirements.read_text(encoding="utf-8").replace("\\\n", " ")
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        if line.startswith(("-r ", "--requirement ")):
            found += requirement_lines(requirements.parent / line.split(None, 1)[1].strip())
        elif not line.startswith("-"):
            found.append(re.split(r"\s+--?[a-z]", line, maxsplit=1)[0].strip())
    return found


@dataclass
class Closure:
    """The distributions a requirements file installs, as found in this environment."""

    distributions: dict[str, metadata.Distribution] = field(default_factory=dict)  # normalised name ->
    missing: list[str] = field(default_factory=list)  # required but not installed here

    @property
    def bytes(self) -> int:
        return sum(distribution_bytes(d) for d in self.distributions.values())

    def largest(self, top: int = 6) -> list[tuple[str, int]]:
        sizes = [(name, distribution_bytes(d)) for name, d in self.distributions.items()]
        return sorted(sizes, key=lambda pair: -pair[1])[:top]


def requirement_closure(requirements: Path) -> Closure:
    """Every distribution the requirements pull in on Lambda (markers for python3.12, arm64)."""
    from packaging.requirements import Requirement

    closure = Closure()
    pending: list[tuple[str, frozenset[str]]] = []
    for line in requirement_lines(requirements):
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({**LAMBDA_MARKERS, "extra": ""}):
            pending.append((requirement.name, frozenset(requirement.extras)))
    seen: set[tuple[str, frozenset[str]]] = set()
    while pending:
        name, extras = pending.pop()
        key = (_normalised(name), extras)
        if key in seen:
            continue
        seen.add(key)
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            if _normalised(name) not in closure.missing:
                closure.missing.append(_normalised(name))
            continue
        closure.distributions[_normalised(name)] = distribution
        for text in distribution.requires or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not any(
                requirement.marker.evaluate({**LAMBDA_MARKERS, "extra": extra}) for extra in (extras or {""})
            ):
                continue
            pending.append((requirement.name, frozenset(requirement.extras)))
    closure.missing.sort()
    return closure


# Installed sizes already added up in this process, by metadata folder (``name-version.dist-info``):
# a check measures the same some 200 distributions for each of its functions, and an installed
# distribution does not change under it.
_measured: dict[str, int] = {}


def distribution_bytes(distribution: metadata.Distribution) -> int:
    """The installed size of a distribution from its RECORD (bytecode caches and scripts outside
    site-packages left out: a layer has neither)."""
    where = getattr(distribution, "_path", None)  # a PathDistribution's folder; others are measured each time
    if where is None:
        return _record_bytes(distribution)
    if str(where) not in _measured:
        _measured[str(where)] = _record_bytes(distribution)
    return _measured[str(where)]


def _record_bytes(distribution: metadata.Distribution) -> int:
    total = 0
    for file in distribution.files or []:
        path = file.as_posix() if hasattr(file, "as_posix") else str(file)
        if path.startswith("..") or path.endswith(".pyc") or "__pycache__" in path:
            continue
        if file.size is not None:
            total += file.size
        else:  # RECORD itself and files pip wrote without a size
            located = Path(str(file.locate()))
            if located.is_file():
                total += located.stat().st_size
    return total


# ---------------------------------------------------------------------------------- function sizes


@dataclass(frozen=True)
class LayerSize:
    name: str
    requirements_bytes: int
    package_bytes: int
    missing: tuple[str, ...]  # distributions this environment does not have (not counted)
    largest: tuple[tuple[str, int], ...]

    @property
    def bytes(self) -> int:
        return self.requirements_bytes + self.package_bytes


def measure_layer(name: str, content_dir: Path) -> LayerSize:
    """A layer as its build ships it: its requirements' closure plus its memtool package."""
    requirements = content_dir / "requirements.txt"
    closure = requirement_closure(requirements) if requirements.is_file() else Closure()
    package = layer_package_bytes(content_dir) if (content_dir / LOCAL_ONLY_FILE).is_file() else tree_bytes(content_dir / PACKAGE)
    return LayerSize(name, closure.bytes, package, tuple(closure.missing), tuple(closure.largest()))


def _main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "copy":
        files = copy_layer_package(Path(argv[1]).resolve(), Path(argv[2]).resolve())
        print(f"copied {len(files)} memtool files (without {LOCAL_ONLY_FILE}'s) to {argv[2]}")
        return 0
    if len(argv) == 2 and argv[0] == "list":
        print("\n".join(layer_files(Path(argv[1]).resolve())))
        return 0
    print("usage: sizes.py copy LAYER_DIR DEST | sizes.py list LAYER_DIR", file=sys.stderr)
    return 2


def main() -> int:
    return _main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
