"""What each Lambda function unzips to, measured: not a test, a measurement that can fail a build.

Lambda refuses a zip function whose code and layers unzip to more than 250 MB (262,144,000 bytes),
and a container image over 10 GB. moto and cfn-lint know neither limit, so this script installs
what `sam build` would install and adds it up:

* every layer in template.yaml: its requirements.txt installed for the Lambda platform
  (``pip install --platform manylinux2014_<arch> --implementation cp --python-version 3.12
  --only-binary=:all: --target``), plus the files of its ContentUri; for the core layer the memtool
  package less the modules of layers/core/local-only.txt, the files ``memtool.deploy.sizes`` lists
  and layers/core/Makefile copies;
* every zip function: its CodeUri folder (and its requirements.txt, if it has one) plus its layers;
* every image function: the requirements.txt beside its Dockerfile installed the same way, plus
  what the Dockerfile COPYs into ${LAMBDA_TASK_ROOT} (the filtered memtool package of its
  ``package`` stage counts as the core layer's). The base image is not counted.

``--offline`` installs nothing: each requirements set is measured from the distributions installed
in this environment (``memtool.deploy.sizes``, what ``memtool aws check`` uses); those are this
machine's wheels, so arm64 figures may differ slightly.

Functions, layers and architectures come from template.yaml. Wheels are cached in a pip cache and
each installed requirements set in a folder keyed by its text and platform, so a re-run takes
seconds. The exit code is 1 when a zip function is over 250 MB or an image over 10 GB.

    python bench/package_sizes.py [--out bench/results/package_sizes.md] [--cache DIR] [--refresh] [--offline]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORE_LAYER_DIR = ROOT / "layers" / "core"
sys.path.insert(0, str(CORE_LAYER_DIR))
from memtool.deploy import sizes as layer_sizes  # noqa: E402 - the one reader of local-only.txt

MB = 1024 * 1024
ZIP_LIMIT_BYTES = 262_144_000  # "Unzipped size must be smaller than 262144000 bytes" (250 MB)
IMAGE_LIMIT_BYTES = 10 * 1024 * MB  # 10 GB uncompressed image, base image included
PYTHON_VERSION = "3.12"
# What sam build leaves out of a Python function or layer artifact.
EXCLUDED_NAMES = {"__pycache__", ".pytest_cache", ".mypy_cache", ".aws-sam", ".git"}
EXCLUDED_SUFFIXES = (".pyc", ".egg-info")
# manylinux2014 is glibc 2.17; Lambda's python3.12 (Amazon Linux 2023, glibc 2.34) also runs
# manylinux_2_28 wheels, the only ones some releases publish.
PLATFORM_TAGS = {
    "x86_64": ("manylinux2014_x86_64", "manylinux_2_28_x86_64"),
    "arm64": ("manylinux2014_aarch64", "manylinux_2_28_aarch64"),
}
# Distributions the python3.12 runtime already has in /var/runtime; a layer that installs them
# anyway (because a requirement depends on them) ships a second copy, which wins on sys.path.
RUNTIME_DISTRIBUTIONS = ("boto3", "botocore", "s3transfer", "jmespath")


# ---------------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class LayerPlan:
    name: str
    content_dir: Path
    requirements: Path | None
    architecture: str


@dataclass(frozen=True)
class ZipFunctionPlan:
    name: str
    code_dir: Path
    requirements: Path | None
    layers: tuple[str, ...]
    architecture: str


@dataclass(frozen=True)
class ImageFunctionPlan:
    name: str
    dockerfile: Path
    context: Path
    requirements: Path | None
    copied: tuple[Path, ...]  # what the Dockerfile COPYs into ${LAMBDA_TASK_ROOT}
    architecture: str


@dataclass(frozen=True)
class PackagePlan:
    layers: dict[str, LayerPlan]
    zip_functions: list[ZipFunctionPlan]
    image_functions: list[ImageFunctionPlan]


def _architecture(props: dict[str, Any], function_globals: dict[str, Any]) -> str:
    (architecture,) = props.get("Architectures") or function_globals.get("Architectures") or ["x86_64"]
    return architecture


def _ref(value: Any) -> str:
    if isinstance(value, dict) and "Ref" in value:
        return value["Ref"]
    raise ValueError(f"a layer given as {value!r}: only Ref to a layer of this template is measured")


def _requirements_in(folder: Path) -> Path | None:
    path = folder / "requirements.txt"
    return path if path.is_file() else None


def copied_into_task_root(dockerfile: Path, context: Path) -> tuple[Path, ...]:
    """The sources of the Dockerfile's COPY lines whose destination is ${LAMBDA_TASK_ROOT}.

    A ``COPY --from=<stage> .../memtool`` is the filtered package an earlier stage made with
    memtool/deploy/sizes.py: it stands for layers/core/memtool (measured filtered, as shipped)."""
    sources: list[Path] = []
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        words = line.split()
        if not words or words[0].upper() != "COPY":
            continue
        from_stage = any(w.startswith("--from=") for w in words[1:])
        args = [w for w in words[1:] if not w.startswith("--")]
        *srcs, destination = args
        if "LAMBDA_TASK_ROOT" not in destination:
            continue
        for src in srcs:
            if from_stage:
                if Path(src).name != "memtool":
                    raise ValueError(f"{dockerfile}: COPY --from of {src}: only the filtered memtool package is measured")
                sources.append(context / "layers" / "core" / "memtool")
            else:
                sources.append(context / src)
    return tuple(sources)


def shipped_bytes(path: Path) -> int:
    """A copied path's size as shipped: the core memtool package without its local-only modules."""
    if path.resolve() == (CORE_LAYER_DIR / "memtool").resolve():
        return layer_sizes.layer_package_bytes(CORE_LAYER_DIR)
    return tree_bytes(path)


def layer_content_bytes(content_dir: Path) -> int:
    """A layer's own files: for the core layer (it has local-only.txt) the filtered memtool package,
    which is all its Makefile copies besides the requirements."""
    if (content_dir / layer_sizes.LOCAL_ONLY_FILE).is_file():
        return layer_sizes.layer_package_bytes(content_dir)
    return tree_bytes(content_dir)


def package_plan(template: dict[str, Any], root: Path) -> PackagePlan:
    """Which layers, zip functions and image functions template.yaml deploys, and from where."""
    function_globals = template.get("Globals", {}).get("Function", {})
    layers: dict[str, LayerPlan] = {}
    zips: list[ZipFunctionPlan] = []
    images: list[ImageFunctionPlan] = []
    for name, resource in template["Resources"].items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::Serverless::LayerVersion":
            content = root / props["ContentUri"]
            build_architecture = resource.get("Metadata", {}).get("BuildArchitecture")
            architecture = build_architecture or (props.get("CompatibleArchitectures") or ["x86_64"])[0]
            layers[name] = LayerPlan(name, content, _requirements_in(content), architecture)
        elif resource["Type"] == "AWS::Serverless::Function":
            architecture = _architecture(props, function_globals)
            if props.get("PackageType", "Zip") == "Image":
                metadata = resource.get("Metadata", {})
                context = root / metadata.get("DockerContext", ".")
                dockerfile = context / metadata.get("Dockerfile", "Dockerfile")
                images.append(
                    ImageFunctionPlan(
                        name,
                        dockerfile,
                        context,
                        _requirements_in(dockerfile.parent),
                        copied_into_task_root(dockerfile, context),
                        architecture,
                    )
                )
            else:
                code = root / props["CodeUri"]
                layer_refs = props.get("Layers", function_globals.get("Layers", []))
                zips.append(
                    ZipFunctionPlan(name, code, _requirements_in(code), tuple(_ref(v) for v in layer_refs), architecture)
                )
    return PackagePlan(layers, zips, images)


def requirement_names(requirements: Path) -> set[str]:
    """The normalised project names a requirements file asks for, following -r includes."""
    names: set[str] = set()
    for raw in requirements.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith(("-r ", "--requirement ")):
            names |= requirement_names(requirements.parent / line.split(None, 1)[1])
            continue
        if line.startswith("-"):
            continue
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
        if match:
            names.add(re.sub(r"[-_.]+", "-", match.group(0)).lower())
    return names


# ---------------------------------------------------------------------------------- measuring


def tree_bytes(path: Path) -> int:
    """Apparent size of a file or folder as sam build would package it (no bytecode caches)."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for folder, dirnames, filenames in os.walk(path):
        dirnames[:] = [d for d in dirnames if d not in EXCLUDED_NAMES and not d.endswith(EXCLUDED_SUFFIXES)]
        for filename in filenames:
            if not filename.endswith(EXCLUDED_SUFFIXES):
                total += (Path(folder) / filename).lstat().st_size
    return total


def _requirements_text(requirements: Path) -> str:
    """The requirements with every -r include inlined: the cache key of an install."""
    lines = []
    for raw in requirements.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            lines.append(_requirements_text(requirements.parent / line.split(None, 1)[1]))
        elif line:
            lines.append(line)
    return "\n".join(lines)


@dataclass
class Installer:
    """pip install --target for the Lambda platform, each requirements set installed once."""

    cache: Path
    refresh: bool = False
    installed: dict[str, Path] = field(default_factory=dict)

    def install(self, requirements: Path, architecture: str) -> Path:
        platforms = PLATFORM_TAGS[architecture]
        key_text = "\n".join([_requirements_text(requirements), *platforms, PYTHON_VERSION])
        key = hashlib.sha256(key_text.encode("utf-8")).hexdigest()[:16]
        target = self.cache / "installs" / key
        done = target / ".installed"
        if self.refresh and key not in self.installed and target.exists():
            shutil.rmtree(target)
        if not done.exists():
            if target.exists():
                shutil.rmtree(target)
            command = [
                sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-warn-conflicts",
                *(arg for tag in platforms for arg in ("--platform", tag)),
                "--implementation", "cp", "--python-version", PYTHON_VERSION, "--only-binary=:all:",
                # pip checks Requires-Python against this interpreter, not --python-version, on an
                # install --target; the cp312 tags and the lock's pins already choose for 3.12.
                "--ignore-requires-python",
                "--cache-dir", str(self.cache / "pip"), "--target", str(target), "-r", str(requirements),
            ]  # fmt: skip
            print(f"installing {requirements.relative_to(ROOT)} for {architecture} ...", file=sys.stderr)
            # PyPI as sam build sees it: no local pip configuration (extra indexes, find-links).
            env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_ROOT_USER_ACTION": "ignore"}
            env.pop("PIP_FIND_LINKS", None)
            subprocess.run(command, check=True, env=env)
            done.write_text(key_text, encoding="utf-8")
        self.installed[key] = target
        return target

    def installed_bytes(self, requirements: Path | None, architecture: str) -> int:
        if requirements is None:
            return 0
        target = self.install(requirements, architecture)
        return tree_bytes(target) - (target / ".installed").stat().st_size

    def content(self, name: str, size_bytes: int, requirements: Path | None, architecture: str) -> ContentRow:
        installed = self.install(requirements, architecture) if requirements else None
        return content_row(name, size_bytes, installed)


@dataclass
class InstalledDistributions:
    """--offline: each requirements set measured from the distributions installed here (RECORD
    sizes, Lambda's markers), without a download. This machine's wheels, not arm64's: close, not equal."""

    closures: dict[Path, layer_sizes.Closure] = field(default_factory=dict)

    def closure(self, requirements: Path) -> layer_sizes.Closure:
        if requirements not in self.closures:
            self.closures[requirements] = layer_sizes.requirement_closure(requirements)
        return self.closures[requirements]

    def installed_bytes(self, requirements: Path | None, architecture: str) -> int:
        return self.closure(requirements).bytes if requirements else 0

    def content(self, name: str, size_bytes: int, requirements: Path | None, architecture: str) -> ContentRow:
        if requirements is None:
            return ContentRow(name, size_bytes, [], 0, [])
        closure = self.closure(requirements)
        runtime = sum(
            layer_sizes.distribution_bytes(d) for n, d in closure.distributions.items() if n in RUNTIME_DISTRIBUTIONS
        )
        missing = [f"not installed here: {', '.join(closure.missing)}"] if closure.missing else []
        return ContentRow(name, size_bytes, closure.largest(), runtime, missing)


def largest_packages(folder: Path, top: int = 6) -> list[tuple[str, int]]:
    sizes = [(entry.name, tree_bytes(entry)) for entry in folder.iterdir() if not entry.name.endswith(".dist-info") and entry.name != ".installed"]
    return sorted(sizes, key=lambda pair: -pair[1])[:top]


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_duplicates(folder: Path) -> tuple[int, list[str]]:
    """Bytes of the runtime's own distributions in an install, and which others require them."""
    duplicated = 0
    requirers: set[str] = set()
    for dist_info in folder.glob("*.dist-info"):
        name = _normalised(dist_info.name.removesuffix(".dist-info").rsplit("-", 1)[0])
        if name in RUNTIME_DISTRIBUTIONS:
            record = dist_info / "RECORD"
            for line in record.read_text(encoding="utf-8").splitlines():
                path = folder / line.split(",", 1)[0]
                if path.is_file() and not path.name.endswith(".pyc"):
                    duplicated += path.stat().st_size
            continue
        metadata = (dist_info / "METADATA").read_text(encoding="utf-8", errors="replace")
        for requirement in re.findall(r"^Requires-Dist: ([A-Za-z0-9._-]+)([^\n]*)$", metadata, re.MULTILINE):
            if _normalised(requirement[0]) in ("boto3", "botocore") and "extra ==" not in requirement[1]:
                requirers.add(name)
    return duplicated, sorted(requirers)


# ---------------------------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class PackageSize:
    function: str
    kind: str  # "zip" or "image"
    parts: str  # the layers of a zip function, the Dockerfile of an image
    size_bytes: int

    @property
    def limit_bytes(self) -> int:
        return ZIP_LIMIT_BYTES if self.kind == "zip" else IMAGE_LIMIT_BYTES

    @property
    def over(self) -> bool:
        return self.size_bytes >= self.limit_bytes if self.kind == "zip" else self.size_bytes > self.limit_bytes

    @property
    def verdict(self) -> str:
        return "OVER" if self.over else "OK"


def zip_function_sizes(plan: PackagePlan, layer_bytes: dict[str, int], code_bytes: dict[str, int]) -> list[PackageSize]:
    """Each zip function's unzipped size: its own code (and requirements) plus all its layers."""
    return [
        PackageSize(
            function.name,
            "zip",
            ", ".join(function.layers) or "-",
            code_bytes[function.name] + sum(layer_bytes[layer] for layer in function.layers),
        )
        for function in plan.zip_functions
    ]


def exit_code(sizes: Iterable[PackageSize]) -> int:
    return 1 if any(size.over for size in sizes) else 0


def _mb(size_bytes: int) -> str:
    return f"{size_bytes / MB:,.1f}"


@dataclass(frozen=True)
class ContentRow:
    """What a layer or an image payload is made of."""

    name: str
    size_bytes: int
    largest: list[tuple[str, int]]
    runtime_bytes: int
    runtime_requirers: list[str]


def content_row(name: str, size_bytes: int, installed: Path | None) -> ContentRow:
    if installed is None:
        return ContentRow(name, size_bytes, [], 0, [])
    return ContentRow(name, size_bytes, largest_packages(installed), *runtime_duplicates(installed))


def render(sizes: Sequence[PackageSize], layer_rows: Sequence[ContentRow]) -> str:
    lines = [
        "| function | package | layers / image | unzipped MB | limit MB | verdict |",
        "| --- | --- | --- | ---: | ---: | --- |",
    ]
    for size in sizes:
        lines.append(
            f"| {size.function} | {size.kind} | {size.parts} | {_mb(size.size_bytes)} | "
            f"{_mb(size.limit_bytes)} | {size.verdict} |"
        )
    lines += [
        "",
        f"| layer or image | unzipped MB | largest entries (MB) | {'/'.join(RUNTIME_DISTRIBUTIONS)} MB (in the runtime already) | required by |",
        "| --- | ---: | --- | ---: | --- |",
    ]
    for row in layer_rows:
        largest = ", ".join(f"{n} {_mb(b)}" for n, b in row.largest)
        lines.append(
            f"| {row.name} | {_mb(row.size_bytes)} | {largest} | {_mb(row.runtime_bytes)} | {', '.join(row.runtime_requirers) or '-'} |"
        )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- main


def measure(plan: PackagePlan, installer: Installer | InstalledDistributions) -> tuple[list[PackageSize], list[ContentRow]]:
    layer_bytes: dict[str, int] = {}
    layer_rows = []
    for name, layer in plan.layers.items():
        requirements_bytes = installer.installed_bytes(layer.requirements, layer.architecture)
        layer_bytes[name] = requirements_bytes + layer_content_bytes(layer.content_dir)
        layer_rows.append(installer.content(name, layer_bytes[name], layer.requirements, layer.architecture))
    code_bytes = {
        function.name: tree_bytes(function.code_dir) + installer.installed_bytes(function.requirements, function.architecture)
        for function in plan.zip_functions
    }
    sizes = zip_function_sizes(plan, layer_bytes, code_bytes)
    for image in plan.image_functions:
        payload = installer.installed_bytes(image.requirements, image.architecture) + sum(shipped_bytes(p) for p in image.copied)
        sizes.append(PackageSize(image.name, "image", str(image.dockerfile.relative_to(ROOT)), payload))
        layer_rows.append(installer.content(f"{image.name} image payload", payload, image.requirements, image.architecture))
    return sizes, layer_rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--template", type=Path, default=ROOT / "template.yaml")
    parser.add_argument("--out", type=Path, help="write the tables as Markdown")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "memtool-package-sizes")
    parser.add_argument("--refresh", action="store_true", help="reinstall every requirements set")
    parser.add_argument(
        "--offline", action="store_true", help="measure the distributions installed here instead of installing wheels"
    )
    args = parser.parse_args(argv)

    from memtool.runtime.template import load_template

    template = load_template(args.template.resolve())
    plan = package_plan(template, args.template.resolve().parent)
    installer = InstalledDistributions() if args.offline else Installer(args.cache, refresh=args.refresh)
    sizes, layer_rows = measure(plan, installer)
    table = render(sizes, layer_rows)
    print(table)
    if args.offline:
        print(f"Offline: {layer_sizes.WHEELS_MAY_DIFFER}.")
    if args.out:
        architectures = sorted({f.architecture for f in plan.zip_functions} | {f.architecture for f in plan.image_functions})
        header = (
            "# Package sizes\n\n"
            f"`python bench/package_sizes.py --out {args.out}`: each requirements set installed with pip for "
            f"CPython {PYTHON_VERSION} on {', '.join(architectures)} "
            f"({', '.join(t for a in architectures for t in PLATFORM_TAGS[a])}, binary wheels only), "
            "sizes as unzipped on Lambda (MB = 2^20 bytes; the zip limit is 262,144,000 bytes = 250 MB, "
            "function code and all its layers together). An image's figure is its payload above the "
            "base image (public.ecr.aws/lambda/python:3.12), against the 10 GB image limit. memtool is "
            "counted as shipped: without the modules of layers/core/local-only.txt. "
            "`memtool aws check` measures the same offline, from the distributions installed where it runs.\n\n"
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(header + table, encoding="utf-8")
    return exit_code(sizes)


if __name__ == "__main__":
    sys.exit(main())
