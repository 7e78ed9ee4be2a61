"""A semantic model's problems, each at its place: structure (pydantic and references), the
warehouse (every metric alone and by each dimension, run as LIMIT 0), and YAML lines."""

from __future__ import annotations

import copy
from importlib import resources
from typing import Any

import pytest

from memtool.semantic.catalog import Catalog, load_catalog
from memtool.semantic.validation import (
    ModelProblem,
    ModelRejected,
    line_of,
    path_of,
    problem_of,
    structural_problems,
    warehouse_problems,
    with_lines,
)

DEMO_YAML = resources.files("memtool.sql").joinpath("demo_model.yaml").read_text(encoding="utf-8")


def demo() -> dict[str, Any]:
    return copy.deepcopy(load_catalog().model_dump(mode="json"))


def index_of(document: dict[str, Any], kind: str, name: str) -> int:
    return next(i for i, item in enumerate(document[kind]) if item["name"] == name)


# ---- structure ----------------------------------------------------------------------------------


def test_the_demo_model_has_no_structural_problem() -> None:
    assert structural_problems(demo()) == []


def test_a_field_error_names_its_place_as_a_path() -> None:
    document = demo()
    document["metrics"][3]["kind"] = "weight"
    del document["dimensions"][1]["zh"]
    document["tables"][0]["colour"] = "red"

    problems = structural_problems(document)

    assert {p.path for p in problems} == {"metrics[3].kind", "dimensions[1].zh", "tables[0].colour"}
    assert next(p for p in problems if p.path == "tables[0].colour").message == "unknown field"


def test_every_dangling_reference_is_its_own_problem() -> None:
    document = demo()
    net = index_of(document, "metrics", "net_revenue")
    units = index_of(document, "metrics", "units")
    document["metrics"][net]["dimensions"] = [*document["metrics"][net]["dimensions"], "colour"]
    document["metrics"][units]["source"] = "nowhere"

    problems = structural_problems(document)

    assert ModelProblem(f"metrics[{net}].dimensions", "net_revenue: unknown dimensions ['colour']") in problems
    assert ModelProblem(f"metrics[{units}].source", "units: unknown source 'nowhere'") in problems
    assert len(problems) == 2


def test_two_sources_of_one_name_are_a_problem() -> None:
    document = demo()
    assert document["sources"], "the demo model has sources"
    document["sources"].append(copy.deepcopy(document["sources"][0]))  # a second "orders": metrics would read the last

    problems = structural_problems(document)

    name = document["sources"][0]["name"]
    assert f"source names are repeated: [{name!r}]" in [p.message for p in problems]  # (and its details' aliases)


def test_not_a_mapping_is_one_problem_of_the_whole_model() -> None:
    assert structural_problems(["metrics"]) == [ModelProblem("", "a semantic model is a mapping, not list")]


def test_pydantic_locations_and_model_problem_strings_become_paths() -> None:
    assert path_of(("metrics", 3, "expression")) == "metrics[3].expression"
    assert path_of(("dimensions", 0, "function-after[_complete(), DimensionSpec]")) == "dimensions[0]"
    assert problem_of("sources[1].details[0].table: unknown table 'x'") == ModelProblem("sources[1].details[0].table", "unknown table 'x'")
    assert problem_of("joins[2] names unknown table 'x'") == ModelProblem("joins[2]", "names unknown table 'x'")
    assert problem_of("metric names are repeated: ['a']") == ModelProblem("metrics", "metric names are repeated: ['a']")
    assert problem_of("clarify_dimensions: unknown dimension 'x'") == ModelProblem("clarify_dimensions", "unknown dimension 'x'")


def test_a_refusal_carries_every_problem_in_its_body() -> None:
    refusal = ModelRejected([ModelProblem("metrics[0].kind", "bad"), ModelProblem("", "too big")])
    body = refusal.to_body()
    assert body["error"] == "model_invalid"
    assert body["problems"] == [{"path": "metrics[0].kind", "message": "bad"}, {"path": "", "message": "too big"}]
    assert "metrics[0].kind: bad (and 1 more)" in body["message"]


# ---- YAML lines ----------------------------------------------------------------------------------


def expected_line(text: str, list_name: str, index: int, key: str) -> int:
    """Found by reading the lines, not by composing YAML: the index-th '- name:' item after the
    top-level list, then that item's key."""
    lines = text.splitlines()
    start = lines.index(f"{list_name}:")
    items = [n for n in range(start + 1, len(lines)) if lines[n].startswith("- ")]
    item = items[index]
    following = items[index + 1] if index + 1 < len(items) else len(lines)
    return next(n for n in range(item, following) if lines[n].lstrip("- ").startswith(f"{key}:")) + 1


def test_a_path_is_found_at_its_line_in_the_yaml_file() -> None:
    assert line_of(DEMO_YAML, "metrics[2].expression") == expected_line(DEMO_YAML, "metrics", 2, "expression")
    assert line_of(DEMO_YAML, "dimensions[4].column") == expected_line(DEMO_YAML, "dimensions", 4, "column")
    # a label and a second place after it do not change the line of the first
    assert line_of(DEMO_YAML, "metrics[2] (refund_amount) × dimensions[4] (brand)") == expected_line(DEMO_YAML, "metrics", 2, "name")
    # a path deeper than the file goes: the deepest part it has
    assert line_of(DEMO_YAML, "metrics[2].no_such_key") == expected_line(DEMO_YAML, "metrics", 2, "name")
    assert line_of(DEMO_YAML, "") is None
    assert line_of("metrics: [unclosed", "metrics[0]") is None


def test_with_lines_gives_each_problem_its_line_and_none_to_the_whole_model() -> None:
    placed = with_lines([ModelProblem("metrics[0].kind", "x"), ModelProblem("", "too big")], DEMO_YAML)
    assert placed[0].line == expected_line(DEMO_YAML, "metrics", 0, "kind")
    assert placed[1].line is None


# ---- the warehouse --------------------------------------------------------------------------------


class RecordingWarehouse:
    """Refuses any SQL that reads a column named in ``missing``; records every statement."""

    dialect = "duckdb"

    def __init__(self, *missing: str) -> None:
        self.missing = missing
        self.statements: list[tuple[str, int, float]] = []

    def run(self, sql: str, *, max_rows: int, timeout_seconds: float, params: Any = None) -> Any:
        self.statements.append((sql, max_rows, timeout_seconds))
        for column in self.missing:
            if column in sql:
                raise RuntimeError(f'Binder Error: column "{column}" not found\nLINE 3: ...')
        return None

    def describe(self, *, refresh: bool = False) -> Any:
        raise NotImplementedError


def test_every_metric_runs_wrapped_in_limit_0_with_one_row_and_a_timeout() -> None:
    warehouse = RecordingWarehouse()
    model = load_catalog()

    assert warehouse_problems(model, warehouse, query_seconds=7) == []

    # each metric alone, then with all its dimensions: the common case costs two queries a metric
    assert len(warehouse.statements) == 2 * len(model.metrics)
    for sql, max_rows, timeout in warehouse.statements:
        assert sql.startswith("SELECT * FROM (") and sql.endswith(") AS q LIMIT 0")
        assert (max_rows, timeout) == (1, 7)


def test_a_missing_column_in_an_expression_is_named_at_the_metric() -> None:
    document = demo()
    net = index_of(document, "metrics", "net_revenue")
    document["metrics"][net]["expression"] = "SUM(ol.net_amount_gone)"
    model = Catalog.model_validate(document)

    problems = warehouse_problems(model, RecordingWarehouse("net_amount_gone"))

    assert [p.path for p in problems] == [f"metrics[{net}].expression"]
    assert problems[0].message.startswith(f"metrics[{net}] (net_revenue): the warehouse refused it: Binder Error")
    assert "LINE 3" not in problems[0].message  # the database's first line only


def test_a_dimension_failing_with_one_metric_is_named_at_that_pair() -> None:
    document = demo()
    rx = index_of(document, "metrics", "rx_volume")
    brand = index_of(document, "dimensions", "brand")
    k = document["metrics"][rx]["dimensions"].index("brand")
    model = Catalog.model_validate(document)

    class OnlyRxByBrand(RecordingWarehouse):
        def run(self, sql: str, **kwargs: Any) -> Any:
            if "fp." in sql and "dp.brand" in sql:
                raise RuntimeError("permission denied for fact_prescription.brand")
            return super().run(sql, **kwargs)

    problems = warehouse_problems(model, OnlyRxByBrand())

    assert problems == [
        ModelProblem(
            f"metrics[{rx}].dimensions[{k}]",
            f"metrics[{rx}] (rx_volume) × dimensions[{brand}] (brand): the warehouse refused it: "
            "permission denied for fact_prescription.brand",
        )
    ]


def test_a_dimension_failing_with_several_metrics_is_reported_once_at_the_dimension() -> None:
    document = demo()
    brand = index_of(document, "dimensions", "brand")
    document["dimensions"][brand]["column"] = "brand_gone"
    model = Catalog.model_validate(document)

    problems = warehouse_problems(model, RecordingWarehouse("brand_gone"))

    assert [p.path for p in problems] == [f"dimensions[{brand}]"]
    assert problems[0].message.startswith(f"dimensions[{brand}] (brand) with metrics gross_revenue, net_revenue")


def test_out_of_time_refuses_rather_than_passing_an_unchecked_model() -> None:
    problems = warehouse_problems(load_catalog(), RecordingWarehouse(), budget_seconds=0)
    assert len(problems) == 1 and problems[0].path == "" and "ran out of its 0 s" in problems[0].message


@pytest.mark.parametrize("path", ["metrics[0]", "metrics[0].expression"])
def test_problem_text_puts_the_path_first(path: str) -> None:
    assert str(ModelProblem(path, "bad")) == f"{path}: bad"
