"""`memtool model init` on a warehouse nobody curated (issue 22, item 2): the draft, unedited, answers
the questions a new user asks first right, or asks; never a wrong number with confidence.

The warehouse is a small airline data set made here, shaped like the public ones users try first:
a declared primary key on ``airlines`` and no foreign key, text join keys, calendar parts and a
flight number stored as numbers, delays below zero, a destination column with more values than
the draft's cap, and data that ended in 2013.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

pytest.importorskip("duckdb")

from memtool.planning.rule_planner import RulePlanner
from memtool.semantic.catalog import Catalog, parse_model
from memtool.semantic.entities import EntityIndex
from memtool.semantic.introspect import draft_model, read_catalog_facts, to_yaml
from memtool.sql.duckdb_warehouse import DuckDBWarehouse

TODAY = date(2026, 12, 2)
CAP = 20


@pytest.fixture(scope="module")
def airline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuckDBWarehouse]:
    import duckdb

    path: Path = tmp_path_factory.mktemp("airline") / "airline.duckdb"
    connection = duckdb.connect(str(path))
    connection.execute("CREATE TABLE airlines (carrier VARCHAR PRIMARY KEY, name VARCHAR)")
    connection.execute("INSERT INTO airlines VALUES ('AA', 'American Airlines'), ('UA', 'United Air Lines'), ('DL', 'Delta Air Lines')")
    connection.execute(
        "CREATE TABLE planes AS SELECT 'N' || i AS tailnum, 1990 + i % 20 AS year, 100 + i AS seats FROM range(30) AS t(i)"
    )
    connection.execute(
        """
        CREATE TABLE flights AS
        SELECT 2013 AS year, 1 + i % 12 AS month, 1 + i % 28 AS day, 500 + i % 1800 AS dep_time,
               CAST(i % 40 - 10 AS DOUBLE) AS dep_delay, CAST(i % 50 - 20 AS DOUBLE) + 0.35 AS arr_delay,
               ['AA', 'UA', 'DL'][1 + i % 3] AS carrier, 100 + i AS flight, 'N' || (i % 30) AS tailnum,
               'D' || LPAD(CAST(i % 60 AS VARCHAR), 2, '0') AS dest, CAST(100 + i % 300 AS DOUBLE) + 0.1 AS distance,
               5 + i % 18 AS hour, TIMESTAMP '2013-01-01 05:00:00' + INTERVAL (i * 29) HOUR AS time_hour
        FROM range(300) AS t(i)
        """
    )
    connection.close()
    warehouse = DuckDBWarehouse(path)
    yield warehouse
    warehouse.close()


@pytest.fixture(scope="module")
def drafted(airline: DuckDBWarehouse) -> tuple[dict[str, object], Catalog]:
    document = draft_model(read_catalog_facts(airline, distinct_cap=CAP), name="airline", max_values=CAP, today=TODAY)
    return document, Catalog.model_validate(document)


def test_the_draft_joins_by_the_keys_names_counts_rows_and_averages_delays(drafted: tuple[dict[str, object], Catalog]) -> None:
    document, model = drafted
    assert {(j.left, j.right, j.on) for j in model.joins} == {("flights", "airlines", ("carrier",)), ("flights", "planes", ("tailnum",))}
    assert model.table("planes").description.endswith("key (tailnum), inferred from unique data")
    flights = {m.name: m.expression for m in model.metrics if m.source == "flights"}
    assert flights == {
        "flights_count": "COUNT(*)",
        "dep_time": "AVG(f.dep_time)",
        "dep_delay": "AVG(f.dep_delay)",
        "arr_delay": "AVG(f.arr_delay)",
        "distance": "SUM(f.distance)",
        "avg_distance": "AVG(f.distance)",  # "average distance": every sum has its average beside it
    }
    assert model.metric("flights_count").en == "number of flights"
    assert model.as_of == date(2013, 12, 29) and model.default_window == "all"
    assert "as_of" in to_yaml(document).split("format:")[0]
    assert parse_model(to_yaml(document)) == model


def ask(warehouse: DuckDBWarehouse, model: Catalog, question: str) -> tuple[str, list[list[object]]]:
    planner = RulePlanner(model, EntityIndex.from_warehouse(warehouse, model), today=TODAY)
    plan = planner.plan(question)
    if plan.status != "planned" or plan.sql is None:
        return plan.status, []
    return plan.status, warehouse.run(plan.sql, max_rows=1000, timeout_seconds=30).rows


@pytest.mark.parametrize(
    ("question", "expected_sql"),
    [
        ("How many flights were there?", "SELECT COUNT(*) FROM flights"),
        ("Number of flights by carrier", "SELECT carrier, COUNT(*) FROM flights GROUP BY carrier"),
        ("What was the average arr delay?", "SELECT ROUND(AVG(arr_delay), 2) FROM flights"),
        ("Total distance by carrier", "SELECT carrier, ROUND(SUM(distance), 2) FROM flights GROUP BY carrier"),
        ("How many flights were there in March 2013?", "SELECT COUNT(*) FROM flights WHERE month(time_hour) = 3"),
    ],
)
def test_the_unedited_draft_answers_plain_questions_right(
    airline: DuckDBWarehouse, drafted: tuple[dict[str, object], Catalog], question: str, expected_sql: str
) -> None:
    from tests.integration.test_tpch_questions import same_in_any_group_order

    status, rows = ask(airline, drafted[1], question)
    expected = airline.run(expected_sql, max_rows=1000, timeout_seconds=30).rows
    assert status == "planned" and same_in_any_group_order(rows, [tuple(r) for r in expected], ordered=False), (rows, expected)
    # a DOUBLE measure is rounded: never 1559.0500000000006
    assert all(len(repr(v).split(".")[-1]) <= 2 for row in rows for v in row if isinstance(v, float))


def test_questions_the_draft_cannot_answer_are_asked_about(airline: DuckDBWarehouse, drafted: tuple[dict[str, object], Catalog]) -> None:
    model = drafted[1]
    # no sum of flight numbers, years or hours: those words name no metric of the draft
    for question in ("What is the total flight number?", "Sum of the years of the flights", "Total hours by carrier", "Average year"):
        assert ask(airline, model, question)[0] == "needs_clarification", question


def test_a_destination_beyond_the_cap_is_a_dimension_the_warehouse_is_asked_about(
    airline: DuckDBWarehouse, drafted: tuple[dict[str, object], Catalog]
) -> None:
    model = drafted[1]
    dest = model.dimension("dest")
    assert dest.max_values == CAP and dest.index_values
    index = EntityIndex.from_warehouse(airline, model)
    assert "dest" in index.capped and len(index.of("dest")) == CAP
    # D59 is past the 20 indexed values: a bound probe finds it, and refuses a value the data lacks
    assert index.holds("dest", "D59") and not index.holds("dest", "D99")
