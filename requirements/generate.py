"""Each Lambda artefact's requirements, generated from the one lock file.

requirements/lambda.lock pins every package the Lambda layer and the analysis images install (with
hashes), for Python 3.12 on arm64 Linux. Each artefact needs only part of it: the closure of its
top-level packages, followed through the lock's ``# via`` annotations. This script writes those
subsets; ``--check`` (run by tests/contract/test_lock.py) fails when a file differs from what the
lock gives. No network: regenerate the lock itself with the command in its header.

    python requirements/generate.py          # write the three files
    python requirements/generate.py --check  # exit 1 when one is stale
"""

from __future__ import annotations

import re
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lambda.lock"

# What each artefact imports at top level (pyproject.toml's core dependencies plus the `aws` extra
# for the layer; plus the analysis libraries for the images). boto3 is pinned too, rather than
# taken from the Lambda runtime, so that botocore (which pynamodb needs) matches it.
CORE = [
    "aws-lambda-powertools",
    "aws-xray-sdk",  # aws-lambda-powertools[tracer]
    "boto3",
    "pydantic",
    "pydantic-settings",
    "pynamodb",
    "sqlglot",
    "opensearch-py",
    "redshift-connector",
]
TARGETS: dict[str, tuple[str, list[str]]] = {
    "layers/core/requirements.txt": (
        "The core layer: what the zip functions (ask, feedback, memory_write, diagnose, flow_steps, "
        "indexer, maintenance) import.",
        CORE,
    ),
    "functions/analyze/requirements.txt": (
        "AnalyzeFunction's image: the core packages, the E2B client and what the local-process "
        "sandbox's templated scripts import.",
        [*CORE, "e2b", "numpy", "matplotlib"],
    ),
    "functions/ml_tools/requirements.txt": (
        "MlToolsFunction's image: the core packages and the ML tools' libraries.",
        [*CORE, "scikit-learn", "scipy", "statsmodels", "pandas", "numpy", "matplotlib"],
    ),
}


@dataclass
class Pin:
    name: str
    version: str
    lines: list[str]  # the requirement line and its hash lines, as the lock has them
    via: list[str] = field(default_factory=list)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(text: str) -> dict[str, Pin]:
    pins: dict[str, Pin] = {}
    current: Pin | None = None
    for line in text.splitlines():
        requirement = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s\\;]+)", line)
        if requirement:
            current = Pin(canonical(requirement.group(1)), requirement.group(3), [line.rstrip()])
            pins[current.name] = current
        elif current is not None and line.strip().startswith("--hash="):
            current.lines.append(line.rstrip())
        elif current is not None and line.strip().startswith("# via"):
            current.via = [canonical(part.split("(")[0].strip()) for part in line.split("# via", 1)[1].split(",") if part.strip()]
    if not pins:
        raise ValueError("the lock file holds no pinned requirement")
    return pins


def closure(pins: dict[str, Pin], roots: list[str]) -> list[Pin]:
    children: dict[str, list[str]] = {}
    for pin in pins.values():
        for parent in pin.via:
            children.setdefault(parent, []).append(pin.name)
    missing = [root for root in roots if canonical(root) not in pins]
    if missing:
        raise ValueError(f"not in the lock file: {', '.join(missing)} (regenerate it: see its header)")
    seen: set[str] = set()
    queue = deque(canonical(root) for root in roots)
    while queue:
        name = queue.popleft()
        if name in seen:
            continue
        seen.add(name)
        queue.extend(children.get(name, []))
    return [pins[name] for name in sorted(seen)]


def render(target: str, purpose: str, roots: list[str], pins: dict[str, Pin]) -> str:
    lines = [
        f"# {purpose}",
        "# Generated from requirements/lambda.lock by `python requirements/generate.py`: do not edit.",
        f"# Top level: {', '.join(roots)}.",
    ]
    for pin in closure(pins, roots):
        lines.extend(pin.lines)
    return "\n".join(lines) + "\n"


def expected() -> dict[str, str]:
    pins = read_lock(LOCK.read_text(encoding="utf-8"))
    return {target: render(target, purpose, roots, pins) for target, (purpose, roots) in TARGETS.items()}


def main(argv: list[str]) -> int:
    stale = []
    for target, text in expected().items():
        path = ROOT / target
        if "--check" in argv:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(target)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {target}")
    if stale:
        print(f"stale (run `python requirements/generate.py`): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
