"""The demo questions give the same numbers on PostgreSQL as on DuckDB.

Given the small demo warehouse in DuckDB and the same file loaded into a real PostgreSQL server,
every question of test_questions_by_value is planned once (Redshift-dialect SQL from the rule
planner over the DuckDB warehouse) and run by both adapters; the rows must agree, in order where
the question orders them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from memtool.planning.rule_planner import RulePlanner
from memtool.semantic.catalog import load_catalog
from memtool.semantic.entities import EntityIndex
from memtool.sql.demo_warehouse import build_demo_warehouse
from memtool.sql.duckdb_warehouse import DuckDBWarehouse
from memtool.sql.postgres_load import copy_duckdb_into_postgres
from memtool.sql.postgres_warehouse import PostgresWarehouse
from tests.integration.test_questions_by_value import ANCHOR, CASES, Case, same_rows

pytestmark = pytest.mark.slow


@dataclass
class Engines:
    planner: RulePlanner
    duckdb: DuckDBWarehouse
    postgres: PostgresWarehouse


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory, postgres_database: str) -> Iterator[Engines]:
    path = tmp_path_factory.mktemp("warehouse") / "demo.duckdb"
    build_demo_warehouse(path, seed=7, scale=0.05, anchor=ANCHOR)
    copy_duckdb_into_postgres(path, postgres_database)
    duck = DuckDBWarehouse(path)
    postgres = PostgresWarehouse.from_url(postgres_database)
    catalog = load_catalog()
    try:
        yield Engines(RulePlanner(catalog, EntityIndex.from_warehouse(duck, catalog), ANCHOR), duck, postgres)
    finally:
        postgres.close()
        duck.close()


@pytest.mark.parametrize("item", CASES, ids=str)
def test_question_rows_on_postgresql_equal_duckdbs(engines: Engines, item: Case) -> None:
    plan = engines.planner.plan(item.question)
    assert plan.status == "planned" and plan.sql is not None, f"{item.question!r}: {plan.clarification or plan.notes}"

    on_duckdb = engines.duckdb.run(plan.sql, max_rows=5000, timeout_seconds=20)
    on_postgres = engines.postgres.run(plan.sql, max_rows=5000, timeout_seconds=20)

    assert on_duckdb.rows, f"{item.question!r} returned no rows: the comparison would prove nothing"
    assert not on_duckdb.truncated and not on_postgres.truncated
    assert on_postgres.columns == on_duckdb.columns
    assert same_rows(on_postgres.rows, [tuple(row) for row in on_duckdb.rows], ordered=item.ordered), (
        f"{item.question!r}\nplanned SQL:\n{plan.sql}\npostgres {on_postgres.rows}\nduckdb   {on_duckdb.rows}"
    )
    # beyond same_rows' tolerance: the very same JSON values, rounding included
    assert _in_order(on_postgres.rows, item.ordered) == _in_order(on_duckdb.rows, item.ordered)


def _in_order(rows: list[list[object]], ordered: bool) -> list[list[object]]:
    return rows if ordered else sorted(rows, key=lambda row: [str(value) for value in row])

