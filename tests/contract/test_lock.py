"""The lock file and the requirements generated from it (requirements/generate.py).

requirements/lambda.lock pins, with hashes, every package the Lambda layer and the analysis images
install; each artefact's requirements file is the closure of its top-level packages in that lock.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_requirements", ROOT / "requirements" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


GENERATE = generator()
PINS = GENERATE.read_lock(GENERATE.LOCK.read_text(encoding="utf-8"))


def pinned(path: str) -> dict[str, str]:
    text = (ROOT / path).read_text(encoding="utf-8")
    return {GENERATE.canonical(name): version for name, version in re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", text, re.M)}


def test_every_generated_requirements_file_is_what_the_lock_gives() -> None:
    for target, text in GENERATE.expected().items():
        assert (ROOT / target).read_text(encoding="utf-8") == text, f"{target} is stale: run `python requirements/generate.py`"


def test_the_check_fails_on_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for target in GENERATE.TARGETS:
        copy = tmp_path / target
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text((ROOT / target).read_text(encoding="utf-8").replace("pydantic==", "pydantic==0.0.1 #", 1), encoding="utf-8")
    monkeypatch.setattr(GENERATE, "ROOT", tmp_path)
    assert GENERATE.main(["--check"]) == 1


def test_the_lock_satisfies_every_range_in_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    ranges = [*project["dependencies"], *project["optional-dependencies"]["aws"], *project["optional-dependencies"]["analysis"]]
    for line in ranges:
        requirement = Requirement(line)
        name = GENERATE.canonical(requirement.name)
        assert name in PINS, f"{name} is in pyproject.toml but not in the lock"
        assert requirement.specifier.contains(PINS[name].version, prereleases=True), f"{name}=={PINS[name].version} breaks {line}"


def test_every_pin_is_exact_and_hashed() -> None:
    for pin in PINS.values():
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", pin.version), pin.lines[0]
        assert any(line.strip().startswith("--hash=sha256:") for line in pin.lines[1:]), f"{pin.name} has no hash"


def test_each_artefact_gets_exactly_its_closure() -> None:
    layer, analyze, ml_tools = (pinned(target) for target in GENERATE.TARGETS)
    # the layer: the AWS clients, no analysis library and nothing local-only
    assert {"opensearch-py", "redshift-connector", "pynamodb", "aws-xray-sdk", "botocore"} <= layer.keys()
    assert not {"numpy", "pandas", "scikit-learn", "matplotlib", "e2b", "duckdb", "moto", "pyyaml"} & layer.keys()
    # the images: the layer's packages at the same versions, plus their own
    assert layer.items() <= analyze.items() and layer.items() <= ml_tools.items()
    assert {"e2b", "numpy", "matplotlib"} <= analyze.keys() and "scikit-learn" not in analyze
    assert {"scikit-learn", "scipy", "statsmodels", "pandas"} <= ml_tools.keys() and "e2b" not in ml_tools
    # a package's own dependencies come along (followed through the lock's "# via")
    assert "pydantic-core" in layer and "scramp" in layer and "joblib" in ml_tools


def test_a_root_missing_from_the_lock_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not in the lock file: no-such-package"):
        GENERATE.closure(PINS, ["pydantic", "no-such-package"])
