"""A value named alone, past a dimension's cap (issue 22, item 2: "How many polls did Ipsos conduct?").

A dimension with more values than its ``max_values`` keeps only that many in the index. A name the
question writes as a name (capitalised, or in Latin letters inside Chinese) with no noun or role
word beside it is looked up in every such dimension, with the same bound, cached probe the role
words use: one dimension holds it, it is that dimension's value; several hold it (one airports
table in two roles), it is asked about; none does, the word is asked about. Answers are compared
with hand-written SQL on a copy of the warehouse.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memtool.planning.rule_planner import RulePlanner
from memtool.semantic.catalog import Catalog
from memtool.semantic.entities import EntityIndex
from memtool.sql.duckdb_warehouse import DuckDBWarehouse
from tests.integration.test_roles_by_preposition import TODAY as FLIGHTS_TODAY
from tests.integration.test_roles_by_preposition import build_flights, flights_model
from tests.integration.test_which_date import TODAY, build_polls, polls_model


def capped_polls() -> Catalog:
    document = polls_model(other_dates=False).model_dump(mode="json")
    for dimension in document["dimensions"]:
        if dimension["name"] == "pollster":
            dimension["max_values"] = 1  # the index keeps one of the three pollsters
    return Catalog.model_validate(document)


class Counting:
    """The index's warehouse probe, counted: which (dimension, value) pairs a question asked about."""

    def __init__(self, index: EntityIndex) -> None:
        assert index.probe is not None
        self.inner, self.asked = index.probe, []
        index.probe = self

    def __call__(self, dimension: str, value: str) -> bool:
        self.asked.append((dimension, value))
        return self.inner(dimension, value)


@pytest.fixture(scope="module")
def polls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RulePlanner, Counting, DuckDBWarehouse, Any]]:
    import duckdb

    root = tmp_path_factory.mktemp("bare-names")
    build_polls(root / "polls.duckdb")
    shutil.copyfile(root / "polls.duckdb", root / "reference.duckdb")
    warehouse = DuckDBWarehouse(root / "polls.duckdb")
    reference = duckdb.connect(str(root / "reference.duckdb"), read_only=True)
    model = capped_polls()
    index = EntityIndex.from_warehouse(warehouse, model)
    assert index.needs_probe("pollster") and len(index.of("pollster")) == 1
    counting = Counting(index)
    try:
        yield RulePlanner(model, index, today=TODAY), counting, warehouse, reference
    finally:
        reference.close()
        warehouse.close()


def run(warehouse: DuckDBWarehouse, sql: str | None) -> list[tuple[Any, ...]]:
    assert sql is not None
    return [tuple(row) for row in warehouse.run(sql, max_rows=100, timeout_seconds=30).rows]


@pytest.mark.parametrize("question", ["How many polls did YouGov conduct?", "YouGov的民调数是多少？"])
def test_a_name_past_the_cap_is_looked_up(polls: tuple[RulePlanner, Counting, DuckDBWarehouse, Any], question: str) -> None:
    planner, _, warehouse, reference = polls
    indexed = planner.entities.of("pollster")[0].value
    assert indexed != "YouGov"  # past the cap: only the warehouse knows it
    plan = planner.plan(question)
    assert plan.status == "planned" and plan.intent is not None, (plan.clarification, plan.notes)
    assert [(f.dimension, f.values) for f in plan.intent.filters] == [("pollster", ("YouGov",))]
    assert run(warehouse, plan.sql) == [tuple(r) for r in reference.execute("SELECT COUNT(*) FROM polls WHERE pollster = 'YouGov'").fetchall()]


def test_a_name_nobody_holds_is_asked_about(polls: tuple[RulePlanner, Counting, DuckDBWarehouse, Any]) -> None:
    planner, counting, _, _ = polls
    plan = planner.plan("How many polls did Acme conduct?")
    assert plan.status == "needs_clarification" and plan.sql is None
    assert plan.clarification is not None and plan.clarification.term == "Acme"
    assert ("pollster", "Acme") in counting.asked


def test_lower_case_words_and_the_first_word_are_not_looked_up(polls: tuple[RulePlanner, Counting, DuckDBWarehouse, Any]) -> None:
    planner, counting, warehouse, reference = polls
    counting.asked.clear()
    plan = planner.plan("How many polls were there?")
    assert run(warehouse, plan.sql) == [tuple(r) for r in reference.execute("SELECT COUNT(*) FROM polls").fetchall()]
    assert counting.asked == []


def test_a_name_two_roles_hold_is_asked_about(tmp_path: Path) -> None:
    build_flights(tmp_path / "flights.duckdb")
    warehouse = DuckDBWarehouse(tmp_path / "flights.duckdb")
    try:
        model = flights_model(5)
        planner = RulePlanner(model, EntityIndex.from_warehouse(warehouse, model), today=FLIGHTS_TODAY)
        plan = planner.plan("How many flights did JFK have?")  # an origin, and a destination too
        assert plan.status == "needs_clarification" and plan.sql is None, plan.notes
        assert plan.clarification is not None and plan.clarification.reason == "ambiguous_value"
        assert {t.get("dimension") for t in plan.clarification.targets} == {"origin", "dest"}
        from_jfk = planner.plan("How many flights from JFK?")  # a role word settles it
        assert from_jfk.intent is not None and [(f.dimension, f.values) for f in from_jfk.intent.filters] == [("origin", ("JFK",))]
    finally:
        warehouse.close()
