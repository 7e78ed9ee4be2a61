"""The embedded DuckDB warehouse: Redshift SQL in, capped JSON-friendly rows out, errors classified."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from memtool.sql.demo_warehouse import WarehouseSummary, build_demo_warehouse
from memtool.sql.duckdb_warehouse import DuckDBWarehouse, to_duckdb_sql
from memtool.sql.warehouse import QueryResult, Warehouse, WarehouseError

pytest.importorskip("duckdb")

ANCHOR = date(2026, 11, 29)


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory) -> WarehouseSummary:
    return build_demo_warehouse(tmp_path_factory.mktemp("wh") / "demo.duckdb", seed=11, scale=0.02, anchor=ANCHOR)


@pytest.fixture(scope="module")
def warehouse(summary: WarehouseSummary) -> DuckDBWarehouse:
    wh = DuckDBWarehouse(summary.path)
    yield wh
    wh.close()


def run(warehouse: Warehouse, sql: str, *, max_rows: int = 1000, timeout: float = 10.0, params: list | None = None) -> QueryResult:
    return warehouse.run(sql, max_rows=max_rows, timeout_seconds=timeout, params=params)


def error_of(warehouse: Warehouse, sql: str, **kwargs) -> WarehouseError:
    with pytest.raises(WarehouseError) as caught:
        run(warehouse, sql, **kwargs)
    return caught.value


def test_speaks_duckdb_behind_the_port(warehouse: DuckDBWarehouse) -> None:
    port: Warehouse = warehouse
    assert port.dialect == "duckdb"


# --- Redshift SQL ------------------------------------------------------------------------------


def test_redshift_date_trunc_and_nvl_run(warehouse: DuckDBWarehouse, summary: WarehouseSummary) -> None:
    result = run(
        warehouse,
        """
        SELECT DATE_TRUNC('month', paid_at) AS month,
               SUM(NVL(gross_amount, 0) - NVL(discount_amount, 0)) AS net, COUNT(*) AS lines
        FROM fact_order_line WHERE paid_at IS NOT NULL GROUP BY 1 ORDER BY 1
    """,
    )
    assert result.columns == ["month", "net", "lines"]
    assert result.rows[0][0] == "2024-12-01T00:00:00"
    assert result.rows[-1][0] == "2026-11-01T00:00:00"
    paid = run(warehouse, "SELECT COUNT(*) FROM fact_order_line WHERE paid_at IS NOT NULL").rows[0][0]
    assert sum(row[2] for row in result.rows) == paid

    nvl = "SELECT COUNT(*) FROM fact_order_line WHERE NVL(paid_at::varchar, 'unpaid') = 'unpaid'"
    unpaid = run(warehouse, nvl).rows[0][0]
    assert unpaid == run(warehouse, "SELECT COUNT(*) FROM fact_order_line WHERE paid_at IS NULL").rows[0][0] > 0


def test_redshift_getdate_dateadd_and_casts_run(warehouse: DuckDBWarehouse) -> None:
    before = datetime.now(UTC).date()
    result = run(
        warehouse,
        """
        SELECT DATEADD(month, -1, DATE_TRUNC('month', GETDATE()))::date AS last_month,
               DATEADD(day, 7, '2026-01-28'::date) AS week_later,
               '2026-03-05'::date AS d, 7::float / 2 AS half, '42'::int AS n
    """,
    )
    after = datetime.now(UTC).date()
    last_month, week_later, d, half, n = result.rows[0]
    expected = {date(day.year - (day.month == 1), (day.month - 2) % 12 + 1, 1).isoformat() for day in (before, after)}
    assert last_month in expected  # GETDATE() is UTC, as on Redshift
    assert week_later == "2026-02-04T00:00:00"  # Redshift DATEADD returns a timestamp
    assert (d, half, n) == ("2026-03-05", 3.5, 42)


def test_redshift_filters_on_paid_month_match_a_direct_count(warehouse: DuckDBWarehouse) -> None:
    redshift = run(
        warehouse,
        """
        SELECT COUNT(*) FROM fact_order_line
        WHERE DATE_TRUNC('month', paid_at) = DATEADD(month, -1, '2026-11-01'::timestamp) AND NOT is_test
    """,
    ).rows[0][0]
    direct = run(
        warehouse,
        """
        SELECT COUNT(*) FROM fact_order_line
        WHERE paid_at >= '2026-10-01' AND paid_at < '2026-11-01' AND is_test = false
    """,
    ).rows[0][0]
    assert redshift == direct > 0


def test_top_becomes_limit(warehouse: DuckDBWarehouse) -> None:
    result = run(warehouse, "SELECT TOP 3 city FROM dim_region ORDER BY region_id")
    assert result.rows == [["上海"], ["杭州"], ["南京"]]


# --- row cap -----------------------------------------------------------------------------------


def test_row_cap_truncates_and_says_so(warehouse: DuckDBWarehouse) -> None:
    capped = run(warehouse, "SELECT order_id, line_id FROM fact_order_line", max_rows=25)
    assert (capped.row_count, len(capped.rows), capped.truncated) == (25, 25, True)

    exact = run(warehouse, "SELECT region_id FROM dim_region ORDER BY 1", max_rows=10)  # 10 regions: not cut
    assert (exact.row_count, exact.truncated) == (10, False)
    assert [row[0] for row in exact.rows] == list(range(1, 11))

    cut_by_one = run(warehouse, "SELECT region_id FROM dim_region ORDER BY 1", max_rows=9)
    assert (cut_by_one.row_count, cut_by_one.truncated) == (9, True)


# --- timeout -----------------------------------------------------------------------------------


def test_timeout_interrupts_a_slow_cross_join(warehouse: DuckDBWarehouse) -> None:
    started = time.perf_counter()
    error = error_of(
        warehouse,
        "SELECT COUNT(*) FROM fact_order_line a, fact_order_line b, fact_order_line c WHERE a.qty + b.qty = c.qty",
        timeout=0.3,
    )
    waited = time.perf_counter() - started
    assert error.code == "timeout"
    assert waited < 2.5
    # The warehouse is still usable afterwards.
    assert run(warehouse, "SELECT COUNT(*) FROM dim_channel").rows == [[4]]


# --- writes and the read-only file ------------------------------------------------------------


def test_a_write_is_refused_with_permission_and_changes_nothing(warehouse: DuckDBWarehouse) -> None:
    before = run(warehouse, "SELECT COUNT(*) FROM dim_region").rows[0][0]
    for statement in (
        "DELETE FROM dim_region",
        "UPDATE dim_region SET city = 'x'",
        "INSERT INTO dim_channel VALUES (9, '直销', 'direct')",
        "DROP TABLE dim_region",
        "CREATE TABLE stolen AS SELECT * FROM dim_region",
        "SELECT * INTO stolen FROM dim_region",
    ):
        assert error_of(warehouse, statement).code == "permission", statement
    assert run(warehouse, "SELECT COUNT(*) FROM dim_region").rows[0][0] == before == 10


def test_the_file_system_is_out_of_reach(warehouse: DuckDBWarehouse, summary: WarehouseSummary) -> None:
    error = error_of(warehouse, f"SELECT * FROM read_text('{summary.path}.meta.json')")
    assert error.code == "permission"


# --- error codes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        ("SELEC city FROM dim_region", "syntax_error"),
        ("SELECT city FROM dim_region WHERE", "syntax_error"),
        ("SELECT 'unterminated FROM dim_region", "syntax_error"),
        ("", "syntax_error"),
        ("SELECT no_such_column FROM dim_region", "undefined_column"),
        ("SELECT r.no_such_column FROM dim_region r", "undefined_column"),
        ("SELECT * FROM no_such_table", "undefined_table"),
        ("SELECT x.city FROM dim_region r", "undefined_table"),
        ("SELECT no_such_function(city) FROM dim_region", "undefined_function"),
        ("SELECT 'abc'::int", "database_error"),
        ("SELECT 1; SELECT 2", "multiple_statements"),
        ("SELECT * FROM dim_region; DELETE FROM dim_region", "multiple_statements"),
    ],
)
def test_failures_carry_a_code_the_repair_step_can_use(warehouse: DuckDBWarehouse, sql: str, code: str) -> None:
    error = error_of(warehouse, sql)
    assert error.code == code, str(error)
    assert error.sql == sql
    assert "\x1b[" not in str(error)


def test_one_trailing_semicolon_is_still_one_statement(warehouse: DuckDBWarehouse) -> None:
    assert run(warehouse, "SELECT COUNT(*) FROM dim_channel;").rows == [[4]]


def test_a_missing_file_is_a_database_error(tmp_path: Path) -> None:
    error = error_of(DuckDBWarehouse(tmp_path / "absent.duckdb"), "SELECT 1")
    assert error.code == "database_error"
    assert not (tmp_path / "absent.duckdb").exists()


# --- parameters --------------------------------------------------------------------------------


def test_redshift_placeholders_are_bound_not_formatted(warehouse: DuckDBWarehouse) -> None:
    sql = "SELECT city FROM dim_region WHERE city_en = %s OR city = %s ORDER BY region_id"
    assert to_duckdb_sql(sql).endswith("city_en = ? OR city = ? ORDER BY region_id")
    assert run(warehouse, sql, params=["Beijing", "上海"]).rows == [["上海"], ["北京"]]

    for hostile in ("O'Hare", "x' OR '1'='1", "'; DELETE FROM dim_region; --"):
        assert run(warehouse, sql, params=[hostile, hostile]).rows == []
    assert run(warehouse, "SELECT COUNT(*) FROM dim_region").rows == [[10]]


def test_a_percent_s_inside_a_literal_is_text(warehouse: DuckDBWarehouse) -> None:
    result = run(warehouse, "SELECT '%s' AS literal, city FROM dim_region WHERE city_en = %s", params=["Wuhan"])
    assert result.rows == [["%s", "武汉"]]


def test_dollar_and_question_placeholders_also_bind(warehouse: DuckDBWarehouse) -> None:
    assert run(warehouse, "SELECT city FROM dim_region WHERE city_en = $1", params=["Chengdu"]).rows == [["成都"]]
    assert run(warehouse, "SELECT city FROM dim_region WHERE region_id = ?", params=[4]).rows == [["北京"]]


# --- values ---------------------------------------------------------------------------------------


def test_values_are_json_friendly(warehouse: DuckDBWarehouse) -> None:
    result = run(
        warehouse,
        """
        SELECT order_id, line_id, order_date, paid_at, gross_amount, is_test, qty::float / 3 AS third,
               1.0 / 0 AS infinite, NULL AS nothing
        FROM fact_order_line WHERE paid_at IS NOT NULL ORDER BY order_id, line_id LIMIT 1
    """,
    )
    order_id, line_id, order_date, paid_at, gross, is_test, third, infinite, nothing = result.rows[0]
    assert isinstance(order_id, int) and isinstance(line_id, int)
    assert date.fromisoformat(order_date) == date(2024, 12, 1)
    assert datetime.fromisoformat(paid_at) >= datetime(2024, 12, 1)
    assert isinstance(gross, float) and gross > 0
    assert isinstance(is_test, bool) and isinstance(third, float)
    assert infinite is None and nothing is None
    json.dumps(result.rows, allow_nan=False)
    assert result.elapsed_ms >= 0


# --- threads --------------------------------------------------------------------------------------


def test_concurrent_queries_from_many_threads(warehouse: DuckDBWarehouse) -> None:
    def city(region_id: int) -> str:
        return run(warehouse, "SELECT city FROM dim_region WHERE region_id = %s", params=[region_id]).rows[0][0]

    with ThreadPoolExecutor(max_workers=8) as pool:
        cities = list(pool.map(city, [i % 10 + 1 for i in range(40)]))
    assert cities[:10] == ["上海", "杭州", "南京", "北京", "天津", "广州", "深圳", "成都", "重庆", "武汉"]
    assert cities[10:20] == cities[:10]


def test_two_warehouses_can_share_one_file(warehouse: DuckDBWarehouse, summary: WarehouseSummary) -> None:
    second = DuckDBWarehouse(summary.path)
    try:
        assert run(second, "SELECT COUNT(*) FROM dim_channel").rows == [[4]]
        assert run(warehouse, "SELECT COUNT(*) FROM dim_channel").rows == [[4]]
        assert error_of(second, "DELETE FROM dim_channel").code == "permission"
    finally:
        second.close()
    assert run(warehouse, "SELECT COUNT(*) FROM dim_channel").rows == [[4]]


# --- bounded memory: the connection is reopened (docs/local-runtime.md) --------

JOINED = """
    SELECT r.region_name, SUM(f.gross_amount - f.discount_amount) AS net
    FROM fact_order_line f JOIN dim_region r ON f.region_id = r.region_id
    WHERE NOT f.is_test GROUP BY 1 ORDER BY 2 DESC
"""


@pytest.fixture(scope="module")
def own_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two files no other test opens: DuckDB shares one database per file within a process."""
    folder = tmp_path_factory.mktemp("recycled")
    paths = (folder / "recycled.duckdb", folder / "kept.duckdb")
    for path in paths:
        build_demo_warehouse(path, seed=11, scale=0.02, anchor=ANCHOR)
    return paths


def test_reopening_bounds_the_eviction_queue_and_answers_the_same(own_files: tuple[Path, Path]) -> None:
    recycled = DuckDBWarehouse(own_files[0], recycle_after_queries=5)
    kept = DuckDBWarehouse(own_files[1], recycle_after_queries=10_000)
    try:
        first = run(recycled, JOINED).rows
        assert first and first == run(kept, JOINED).rows
        recycled_nodes, kept_nodes = [], []
        for _ in range(39):
            assert run(recycled, JOINED).rows == first
            assert run(kept, JOINED).rows == first
            recycled_nodes.append(recycled.eviction_queue_nodes())
            kept_nodes.append(kept.eviction_queue_nodes())
        assert recycled.reopened == 7  # 40 queries, a new connection every 5 (the queue reads are not counted)
        assert kept.reopened == 0
        # Without reopening the dead nodes pile up with every query; with it they start over.
        assert kept_nodes[-1] > kept_nodes[4] > kept_nodes[0]
        assert max(recycled_nodes) <= max(recycled_nodes[:6])
        assert kept_nodes[-1] > 3 * max(recycled_nodes)
    finally:
        recycled.close()
        kept.close()


def test_reopening_waits_for_running_queries_across_threads(own_files: tuple[Path, Path]) -> None:
    recycled = DuckDBWarehouse(own_files[0], recycle_after_queries=3)
    try:
        expected = run(recycled, JOINED).rows
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(lambda _: run(recycled, JOINED).rows, range(120)))
        assert all(answer == expected for answer in answers)  # no query was cut off by a reopen
        assert recycled.reopened >= 120 // 3 // 2, recycled.reopened  # most reopens due did happen, under load
    finally:
        recycled.close()
