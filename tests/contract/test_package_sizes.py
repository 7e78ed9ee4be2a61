"""Packaging that deploys: what template.yaml packages stays within Lambda's limits.

bench/package_sizes.py measures the real sizes (it installs the requirements for the Lambda
platform); these tests need no network. They hold the shape that keeps the sizes small (no zip
function with an analysis dependency, the analysis runners as images that carry memtool) and prove
that the size check fails on a function over 250 MB.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from memtool.runtime.template import load_template

ROOT = Path(__file__).resolve().parents[2]
CORE_REQUIREMENTS = ROOT / "layers" / "core" / "requirements.txt"
# Distributions that must never reach a zip function: with the core layer they pass 250 MB.
ANALYSIS_DISTRIBUTIONS = {"e2b", "scikit-learn", "sklearn", "pandas", "scipy", "statsmodels", "matplotlib"}
IMAGE_FUNCTIONS = {
    "AnalyzeFunction": {"e2b", "numpy", "matplotlib"},
    "MlToolsFunction": {"scikit-learn", "scipy", "statsmodels", "pandas", "numpy", "matplotlib"},
}
MB = 1024 * 1024


def _load_package_sizes() -> ModuleType:
    spec = importlib.util.spec_from_file_location("package_sizes", ROOT / "bench" / "package_sizes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


package_sizes = _load_package_sizes()


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")


@pytest.fixture(scope="module")
def plan(template: dict[str, Any]) -> Any:
    return package_sizes.package_plan(template, ROOT)


def test_no_zip_function_has_an_analysis_dependency(plan: Any) -> None:
    assert {f.name for f in plan.zip_functions} == {
        "AskFunction", "FeedbackFunction", "MemoryWriteFunction", "DiagnoseFunction",
        "FlowStepsFunction", "IndexerFunction", "MaintenanceFunction",
    }  # fmt: skip
    for function in plan.zip_functions:
        assert function.layers == ("CoreLayer",), function.name
        shipped: set[str] = set()
        for layer in function.layers:
            requirements = plan.layers[layer].requirements
            shipped |= package_sizes.requirement_names(requirements) if requirements else set()
        if function.requirements:
            shipped |= package_sizes.requirement_names(function.requirements)
        assert not shipped & ANALYSIS_DISTRIBUTIONS, function.name


def test_the_core_layer_names_no_analysis_package() -> None:
    names = package_sizes.requirement_names(CORE_REQUIREMENTS)

    assert not names & (ANALYSIS_DISTRIBUTIONS | {"numpy", "duckdb"})
    assert {"aws-lambda-powertools", "pydantic", "pynamodb", "sqlglot"} <= names


def test_the_analysis_functions_are_images_that_carry_memtool(template: dict[str, Any], plan: Any) -> None:
    images = {image.name: image for image in plan.image_functions}

    assert set(images) == set(IMAGE_FUNCTIONS)
    for name, needed in IMAGE_FUNCTIONS.items():
        image = images[name]
        assert template["Resources"][name]["Properties"]["PackageType"] == "Image"
        assert image.dockerfile.is_file(), image.dockerfile
        dockerfile = image.dockerfile.read_text(encoding="utf-8")
        # Every stage's base image has the function's architecture.
        bases = re.findall(r"^FROM\s+(\S+)", dockerfile, re.MULTILINE)
        assert bases and set(bases) == {f"public.ecr.aws/lambda/python:3.12-{image.architecture}"}, name
        assert ROOT / "layers" / "core" / "memtool" in image.copied, f"{name}'s image does not COPY memtool"
        # memtool comes filtered by the core layer's own code (local-only.txt), never copied whole.
        assert "COPY layers/core/memtool" not in dockerfile, name
        assert "memtool/deploy/sizes.py copy /tmp/core /tmp/package" in dockerfile, name
        assert "COPY --from=package /tmp/package/memtool ${LAMBDA_TASK_ROOT}/memtool" in dockerfile, name
        assert image.dockerfile.parent / "app.py" in image.copied, name
        assert 'CMD ["app.lambda_handler"]' in dockerfile, name
        # The image installs the core layer's requirements and its own.
        assert image.requirements is not None, name
        names = package_sizes.requirement_names(image.requirements)
        assert package_sizes.requirement_names(CORE_REQUIREMENTS) | needed <= names, name
    # Only the code interpreter carries the E2B client.
    assert "e2b" not in package_sizes.requirement_names(images["MlToolsFunction"].requirements)


def test_the_docker_context_leaves_out_what_the_images_do_not_need() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()}

    assert {".git", "tests", "bench", ".memtool", "**/__pycache__", "**/*.duckdb"} <= ignored
    assert not {"layers", "functions", "layers/core", "layers/core/memtool"} & ignored
    # The images' package stage runs the layer's filter: its script and its list reach the build.
    import fnmatch

    patterns = [p for p in ignored if p and not p.startswith("#")]
    for needed in ("layers/core/local-only.txt", "layers/core/memtool/deploy/sizes.py"):
        parts = needed.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        assert not [p for p in patterns for prefix in prefixes if fnmatch.fnmatch(prefix, p.removeprefix("**/"))], needed


def _sparse_file(path: Path, size_bytes: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(size_bytes)  # apparent size without writing the bytes


def _one_function_plan(tmp_path: Path, code_mb: float, layer_mb: float) -> Any:
    layer_dir, code_dir = tmp_path / "layer", tmp_path / "code"
    _sparse_file(layer_dir / "memtool" / "big.bin", int(layer_mb * MB))
    _sparse_file(code_dir / "app.py", int(code_mb * MB))
    _sparse_file(code_dir / "__pycache__" / "app.cpython-312.pyc", 50 * MB)  # not packaged
    return package_sizes.PackagePlan(
        layers={"CoreLayer": package_sizes.LayerPlan("CoreLayer", layer_dir, None, "x86_64")},
        zip_functions=[package_sizes.ZipFunctionPlan("BigFunction", code_dir, None, ("CoreLayer",), "x86_64")],
        image_functions=[],
    )


def test_the_size_check_fails_on_a_function_over_250_mb(tmp_path: Path) -> None:
    # Given a function whose code (1 MB) and layer (250 MB) unzip to 251 MB
    plan = _one_function_plan(tmp_path / "over", code_mb=1, layer_mb=250)

    # When the checker measures it (no requirements: nothing to install)
    sizes, _rows = package_sizes.measure(plan, package_sizes.Installer(tmp_path / "cache"))

    # Then it is over the limit and the run fails
    (size,) = sizes
    assert size.size_bytes == 251 * MB
    assert size.verdict == "OVER"
    assert package_sizes.exit_code(sizes) == 1
    assert "| BigFunction | zip | CoreLayer | 251.0 | 250.0 | OVER |" in package_sizes.render(sizes, _rows)


def test_the_size_check_passes_a_function_under_250_mb(tmp_path: Path) -> None:
    plan = _one_function_plan(tmp_path / "under", code_mb=1, layer_mb=248)

    sizes, _rows = package_sizes.measure(plan, package_sizes.Installer(tmp_path / "cache"))

    assert [s.verdict for s in sizes] == ["OK"]
    assert package_sizes.exit_code(sizes) == 0


def test_the_limit_is_lambdas_byte_count() -> None:
    # Lambda: "Unzipped size must be smaller than 262144000 bytes".
    at_limit = package_sizes.PackageSize("F", "zip", "CoreLayer", 262_144_000)
    below = package_sizes.PackageSize("F", "zip", "CoreLayer", 262_143_999)
    huge_image = package_sizes.PackageSize("I", "image", "Dockerfile", 11 * 1024 * MB)

    assert (at_limit.over, below.over, huge_image.over) == (True, False, True)
    assert package_sizes.exit_code([below, huge_image]) == 1


@pytest.mark.parametrize(
    ("event_file", "tools_of_the_image"),
    [("analyze_tool_call.json", "code_interpreter"), ("ml_tool_call.json", "ml_tools")],
)
def test_the_image_functions_events_are_tool_events_they_serve(event_file: str, tools_of_the_image: str) -> None:
    import json

    from memtool.analysis.code_interpreter import CodeInterpreterInput
    from memtool.analysis.ml.registry import ml_tools
    from memtool.tools.step import ToolEvent

    # `sam local invoke AnalyzeFunction -e events/analyze_tool_call.json` takes the same file.
    event = ToolEvent.model_validate(json.loads((ROOT / "events" / event_file).read_text(encoding="utf-8")))

    if tools_of_the_image == "code_interpreter":
        assert event.tool == "code_interpreter"
        CodeInterpreterInput.model_validate(event.arguments)
    else:
        (tool,) = [t for t in ml_tools() if t.name == event.tool]
        tool.input_model.model_validate(event.arguments)
    assert event.context.tenant and event.context.episode_id


def test_the_code_interpreters_sandbox_can_import_the_image_packages() -> None:
    # The local-process sandbox starts `python -I` with an empty environment: only the
    # interpreter's site-packages are on its sys.path, not ${LAMBDA_TASK_ROOT}.
    dockerfile = (ROOT / "functions" / "analyze" / "Dockerfile").read_text(encoding="utf-8")
    (install,) = [line for line in dockerfile.split("RUN ")[1:] if "pip install" in line]

    assert "-r /tmp/requirements/functions/analyze/requirements.txt" in install
    assert "--target" not in install


def test_the_offline_measure_is_the_one_memtool_aws_check_reports(plan: Any) -> None:
    """`memtool aws check` and `package_sizes.py --offline` measure with the same functions
    (memtool.deploy.sizes): the figures agree byte for byte."""
    from memtool.deploy.check import run_check

    sizes, rows = package_sizes.measure(plan, package_sizes.InstalledDistributions())
    report = run_check(ROOT / "template.yaml")

    by_name = {s.function: s for s in sizes}
    for check in report.functions:
        if check.package == "zip":
            assert check.size_bytes == by_name[check.name].size_bytes, check.name
    assert by_name["AskFunction"].size_bytes < package_sizes.ZIP_LIMIT_BYTES
    (core,) = [row for row in rows if row.name == "CoreLayer"]
    assert core.largest and core.runtime_bytes > 0  # botocore is counted, and said to be in the runtime
