"""The PostgreSQL warehouse adapter against a real PostgreSQL server (started by tests/postgres_server.py).

Given one small table with the same rows in DuckDB and PostgreSQL, the adapter answers
Redshift-dialect SQL as the DuckDB adapter does, binds values, caps rows, times out, refuses
writes on the server, classifies errors, describes the schema, survives a killed connection and
serves threads at once.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from memtool.sql.duckdb_warehouse import DuckDBWarehouse
from memtool.sql.postgres_warehouse import PostgresWarehouse, to_postgres_sql
from memtool.sql.urls import ACCEPTED_FORMS, open_warehouse, redact_url
from memtool.sql.warehouse import WarehouseError
from tests.support import ROOT

pytestmark = pytest.mark.slow

# The same table in both engines, written with types both spell the same way.
TABLE_DDL = (
    "CREATE TABLE sales (id INTEGER NOT NULL, day DATE, paid_at TIMESTAMP, amount DECIMAL(12,2), "
    "ratio DOUBLE PRECISION, channel VARCHAR, is_test BOOLEAN)"
)
ROWS = [
    (1, "2026-11-29", "2026-11-29 10:15:00", "120.50", 0.123456, "门店", False),
    (2, "2026-11-02", "2026-11-02 23:59:59", "80.25", 2.625, "电商", False),
    (3, "2026-10-31", None, "15.00", 1.0051, "电商", True),
    (4, "2026-10-01", "2026-10-01 00:00:00", None, None, "O'Brien 100%", False),
    (5, "2025-12-31", "2025-12-31 08:00:00", "999.99", -3.14159, "门店", False),
]
INSERT = "INSERT INTO sales VALUES (%s, %s, %s, %s, %s, %s, %s)"


@pytest.fixture(scope="module")
def database(postgres_database: str) -> str:
    with psycopg.connect(postgres_database, autocommit=True) as connection:
        connection.execute(TABLE_DDL)
        with connection.cursor() as cursor:
            cursor.executemany(INSERT, ROWS)
        connection.execute("CREATE SEQUENCE memtool_counter")
    return postgres_database


@pytest.fixture(scope="module")
def duckdb_twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DuckDBWarehouse]:
    import duckdb

    path = tmp_path_factory.mktemp("twin") / "sales.duckdb"
    connection = duckdb.connect(str(path))
    connection.execute(TABLE_DDL)
    connection.executemany(INSERT.replace("%s", "?"), ROWS)
    connection.close()
    warehouse = DuckDBWarehouse(path)
    yield warehouse
    warehouse.close()


@pytest.fixture
def warehouse(database: str) -> Iterator[PostgresWarehouse]:
    adapter = PostgresWarehouse.from_url(database)
    yield adapter
    adapter.close()


def rows_of(url: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as connection:
        return list(connection.execute(query).fetchall())


# ---- the same answers as DuckDB ------------------------------------------------------------------


SAME_AS_DUCKDB = [
    "SELECT * FROM sales ORDER BY id",
    "SELECT channel, COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean FROM sales GROUP BY channel ORDER BY channel",
    "SELECT DATE_TRUNC('month', day) AS month, SUM(amount) AS total FROM sales WHERE NOT is_test GROUP BY 1 ORDER BY 1",
    "SELECT id, DATEADD(month, -1, day) AS a_month_before, DATEADD(day, 7, paid_at) AS a_week_after FROM sales ORDER BY id",
    "SELECT id, ROUND(ratio, 2) AS r2, ROUND(CAST(amount AS DOUBLE PRECISION) / 3, 1) AS third FROM sales ORDER BY id",
    "SELECT id, CASE WHEN amount > 100 THEN 'big' ELSE 'small' END AS size, NVL(amount, 0) AS amount FROM sales ORDER BY id",
    "SELECT EXTRACT(year FROM day) AS y, COUNT(DISTINCT channel) AS channels FROM sales GROUP BY 1 ORDER BY 1",
    "SELECT TOP 2 id, amount FROM sales WHERE amount IS NOT NULL ORDER BY amount DESC",
]


@pytest.mark.parametrize("sql", SAME_AS_DUCKDB)
def test_answers_and_value_types_equal_duckdbs(warehouse: PostgresWarehouse, duckdb_twin: DuckDBWarehouse, sql: str) -> None:
    on_postgres = warehouse.run(sql, max_rows=100, timeout_seconds=10)
    on_duckdb = duckdb_twin.run(sql, max_rows=100, timeout_seconds=10)

    assert on_postgres.rows, "the query must return rows for the comparison to mean anything"
    assert on_postgres.columns == on_duckdb.columns
    assert on_postgres.rows == on_duckdb.rows
    assert [[type(v) for v in row] for row in on_postgres.rows] == [[type(v) for v in row] for row in on_duckdb.rows]


# ---- Redshift functions --------------------------------------------------------------------------


def test_redshift_date_functions_and_round_of_a_double_run(warehouse: PostgresWarehouse) -> None:
    sql = (
        "SELECT DATE_TRUNC('month', day) AS month, DATEADD(month, -1, day) AS before, "
        "ROUND(ratio, 2) AS r, ROUND(CAST(amount AS DOUBLE PRECISION) / 3, 2) AS third FROM sales WHERE id = 1"
    )

    result = warehouse.run(sql, max_rows=10, timeout_seconds=10)

    assert result.columns == ["month", "before", "r", "third"]
    # DATE_TRUNC of a DATE is a plain TIMESTAMP, as in Redshift (PostgreSQL alone gives one with a time zone)
    assert result.rows == [["2026-11-01T00:00:00", "2026-10-29T00:00:00", 0.12, 40.17]]


@pytest.mark.parametrize(
    ("value", "digits", "rounded"),
    [
        (0.123456, 4, 0.1235),
        (2.625, 2, 2.63),  # a tie in binary too: away from zero, as DuckDB
        (-0.125, 2, -0.13),
        (1234.5, 0, 1235.0),
        (1e-7, 2, 0.0),
        (0.30000000000000004, 16, 0.3),
    ],
)
def test_round_of_a_double_rounds_as_duckdb_does(
    warehouse: PostgresWarehouse, duckdb_twin: DuckDBWarehouse, value: float, digits: int, rounded: float
) -> None:
    sql = f"SELECT ROUND(CAST(%s AS DOUBLE PRECISION), {digits}) AS r"

    on_postgres = warehouse.run(sql, max_rows=1, timeout_seconds=5, params=[value]).rows
    on_duckdb = duckdb_twin.run(sql, max_rows=1, timeout_seconds=5, params=[value]).rows

    assert on_postgres == on_duckdb == [[rounded]]


@pytest.mark.xfail(
    strict=True,
    reason="known difference: a double whose shortest text is a decimal tie but whose binary value is not "
    "(2.675 is 2.67499999999999982…) rounds away from zero on PostgreSQL (2.68), by its binary value on DuckDB (2.67)",
)
def test_round_of_a_decimal_tie_that_is_not_one_in_binary(warehouse: PostgresWarehouse, duckdb_twin: DuckDBWarehouse) -> None:
    sql = "SELECT ROUND(CAST(%s AS DOUBLE PRECISION), 2) AS r"

    assert warehouse.run(sql, max_rows=1, timeout_seconds=5, params=[2.675]).rows == duckdb_twin.run(
        sql, max_rows=1, timeout_seconds=5, params=[2.675]
    ).rows


def test_round_of_a_double_needs_the_numeric_cast_on_postgresql(database: str) -> None:
    # Given what sqlglot alone makes of ROUND(double, n) when it cannot see the column's type
    plain = "SELECT ROUND(ratio, 2) FROM sales"
    with psycopg.connect(database) as connection, pytest.raises(psycopg.errors.UndefinedFunction):
        connection.execute(plain)  # PostgreSQL has no round(double precision, integer)

    # the adapter's transpiled text casts the argument
    statement, _ = to_postgres_sql(plain)
    assert "PG_TYPEOF(ratio)" in statement and "ROUND(ratio, 2)" not in statement
    assert rows_of(database, statement)  # and PostgreSQL runs it


# ---- parameters, row cap, timeout ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "params", "expected"),
    [
        ("SELECT id FROM sales WHERE channel = %s ORDER BY id", ["电商"], [[2], [3]]),
        ("SELECT id FROM sales WHERE channel = ? AND amount > ? ORDER BY id", ["电商", 50], [[2]]),
        ("SELECT id FROM sales WHERE id IN ($2, $1) ORDER BY id", [5, 4], [[4], [5]]),
        # a quote in the value stays a value; a literal % in the text stays text
        ("SELECT id FROM sales WHERE channel = %s AND channel LIKE '%100%'", ["O'Brien 100%"], [[4]]),
        ("SELECT id FROM sales WHERE channel = %s", ["x' OR '1'='1"], []),
        ("SELECT id FROM sales WHERE day >= %s AND day < %s ORDER BY id", ["2026-11-01", "2026-12-01"], [[1], [2]]),
    ],
)
def test_values_are_bound_by_psycopg(warehouse: PostgresWarehouse, sql: str, params: list[object], expected: list[list[object]]) -> None:
    assert warehouse.run(sql, max_rows=10, timeout_seconds=10, params=params).rows == expected


def test_a_placeholder_without_its_value_is_an_error(warehouse: PostgresWarehouse) -> None:
    with pytest.raises(WarehouseError) as caught:
        warehouse.run("SELECT id FROM sales WHERE id = %s AND channel = %s", max_rows=10, timeout_seconds=10, params=[1])
    assert caught.value.code == "syntax_error"


def test_the_row_cap_cuts_and_says_so(warehouse: PostgresWarehouse) -> None:
    capped = warehouse.run("SELECT id FROM sales ORDER BY id", max_rows=2, timeout_seconds=10)
    whole = warehouse.run("SELECT id FROM sales ORDER BY id", max_rows=5, timeout_seconds=10)

    assert (capped.rows, capped.row_count, capped.truncated) == ([[1], [2]], 2, True)
    assert (whole.row_count, whole.truncated) == (5, False)


def test_a_long_statement_is_cancelled_by_the_statement_timeout(warehouse: PostgresWarehouse) -> None:
    started = time.perf_counter()
    with pytest.raises(WarehouseError) as caught:
        warehouse.run("SELECT pg_sleep(5)", max_rows=1, timeout_seconds=0.5)
    elapsed = time.perf_counter() - started

    assert caught.value.code == "timeout"
    assert elapsed < 3
    # the timeout belonged to that statement only: the connection goes on serving
    assert warehouse.run("SELECT COUNT(*) AS n FROM sales", max_rows=1, timeout_seconds=5).rows == [[5]]


# ---- read only -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT nextval('memtool_counter')",  # a write hidden in a SELECT reaches the server
        "SELECT set_config('transaction_read_only', 'off', true)",  # so does an attempt to lift read-only
    ],
)
def test_the_server_refuses_a_write_that_reaches_it(warehouse: PostgresWarehouse, database: str, sql: str) -> None:
    with pytest.raises(WarehouseError) as caught:
        warehouse.run(sql, max_rows=1, timeout_seconds=5)

    assert caught.value.code == "read_only"
    assert rows_of(database, "SELECT last_value, is_called FROM memtool_counter") == [(1, False)]


def test_a_write_statement_pushed_past_the_transpiler_is_refused_by_the_server(
    warehouse: PostgresWarehouse, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memtool.sql.postgres_warehouse as adapter

    # Given a transpiler that lets anything through
    monkeypatch.setattr(adapter, "to_postgres_sql", lambda sql, params=None: (sql, None))

    for write in ("INSERT INTO sales (id) VALUES (99)", "CREATE TABLE planted (id INTEGER)", "DELETE FROM sales"):
        with pytest.raises(WarehouseError):
            warehouse.run(write, max_rows=1, timeout_seconds=5)

    assert rows_of(database, "SELECT COUNT(*) FROM sales") == [(5,)]
    assert rows_of(database, "SELECT COUNT(*) FROM pg_tables WHERE tablename = 'planted'") == [(0,)]


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO sales (id) VALUES (99)",
        "WITH moved AS (DELETE FROM sales RETURNING id) SELECT * FROM moved",
        "CREATE TABLE planted AS SELECT 1 AS x",
        "SELECT 1 INTO planted",
    ],
)
def test_a_write_is_refused_before_it_is_sent(warehouse: PostgresWarehouse, database: str, sql: str) -> None:
    with pytest.raises(WarehouseError) as caught:
        warehouse.run(sql, max_rows=1, timeout_seconds=5)

    assert caught.value.code == "permission"
    assert rows_of(database, "SELECT COUNT(*) FROM sales") == [(5,)]


# ---- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        ("SELECT id FROM no_such_table", "undefined_table"),
        ("SELECT no_such_column FROM sales", "undefined_column"),
        ("SELEC id FROM sales", "syntax_error"),
        ("SELECT no_such_function(id) FROM sales", "undefined_function"),
        ("SELECT id / 0 FROM sales", "database_error"),
        ("SELECT 1; SELECT 2", "multiple_statements"),
    ],
)
def test_errors_carry_a_code_for_diagnosis(warehouse: PostgresWarehouse, sql: str, code: str) -> None:
    with pytest.raises(WarehouseError) as caught:
        warehouse.run(sql, max_rows=10, timeout_seconds=5)

    assert caught.value.code == code
    assert caught.value.sql == sql


def test_an_unreachable_server_is_unavailable_in_one_line_without_the_password() -> None:
    closed_port = _free_port()
    warehouse = PostgresWarehouse.from_url(f"postgresql://memtool:s3cret-pw@127.0.0.1:{closed_port}/nowhere")

    with pytest.raises(WarehouseError) as caught:
        warehouse.run("SELECT 1", max_rows=1, timeout_seconds=5)

    assert caught.value.code == "unavailable"
    assert "\n" not in str(caught.value)
    assert "s3cret-pw" not in str(caught.value)
    assert str(closed_port) in str(caught.value)


# ---- describe ----------------------------------------------------------------------------------------


def test_describe_lists_tables_and_columns_and_refresh_reads_again(warehouse: PostgresWarehouse, database: str) -> None:
    schema = warehouse.describe()

    assert schema.columns_of("sales") == ("id", "day", "paid_at", "amount", "ratio", "channel", "is_test")
    assert schema.type_of("sales", "amount") == "NUMERIC"
    assert schema.time_columns("sales") == ("day", "paid_at")
    assert schema.boolean_columns("sales") == ("is_test",)

    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute("CREATE TABLE described_later (k INTEGER)")
    try:
        assert not warehouse.describe().has_table("described_later")  # kept for a while
        assert warehouse.describe(refresh=True).has_table("described_later")
    finally:
        with psycopg.connect(database, autocommit=True) as connection:
            connection.execute("DROP TABLE described_later")


# ---- connections ---------------------------------------------------------------------------------------


def test_a_connection_killed_by_the_server_is_replaced(database: str) -> None:
    warehouse = PostgresWarehouse.from_url(database, max_connections=1)
    try:
        first_pid = warehouse.run("SELECT pg_backend_pid() AS pid", max_rows=1, timeout_seconds=5).rows[0][0]
        assert rows_of(database, f"SELECT pg_terminate_backend({int(first_pid)})") == [(True,)]

        second_pid = warehouse.run("SELECT pg_backend_pid() AS pid", max_rows=1, timeout_seconds=5).rows[0][0]
        third_pid = warehouse.run("SELECT pg_backend_pid() AS pid", max_rows=1, timeout_seconds=5).rows[0][0]
    finally:
        warehouse.close()

    assert second_pid != first_pid
    assert third_pid == second_pid  # the new connection is kept for the next query


def test_threads_query_at_once_each_with_its_own_answer(database: str) -> None:
    warehouse = PostgresWarehouse.from_url(database, max_connections=4)
    results: dict[int, object] = {}
    pids: set[object] = set()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def ask(n: int) -> None:
        try:
            for _ in range(3):
                result = warehouse.run(
                    "SELECT CAST(%s AS INTEGER) AS n, pg_backend_pid() AS pid, pg_sleep(0.1) AS pause",
                    max_rows=1,
                    timeout_seconds=5,
                    params=[n],
                )
                with lock:
                    results[n] = result.rows[0][0]
                    pids.add(result.rows[0][1])
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            errors.append(error)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(12)]
    started = time.perf_counter()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        warehouse.close()
    elapsed = time.perf_counter() - started

    assert errors == []
    assert results == {n: n for n in range(12)}
    assert 1 < len(pids) <= 4  # several connections, never more than the pool allows
    assert elapsed < 36 * 0.1  # 36 pauses of 0.1 s: faster than one after another


# ---- URLs -------------------------------------------------------------------------------------------------


def test_open_warehouse_picks_the_adapter_from_the_url(tmp_path: Path) -> None:
    absolute = open_warehouse(f"duckdb://{tmp_path}/w.duckdb")
    relative = open_warehouse("duckdb://data/w.duckdb")
    postgres = open_warehouse("postgresql://memtool@127.0.0.1:1/db")  # nothing connects yet
    short = open_warehouse("postgres://memtool@127.0.0.1:1/db?sslmode=disable")

    assert isinstance(absolute, DuckDBWarehouse) and absolute.path == tmp_path / "w.duckdb"
    assert isinstance(relative, DuckDBWarehouse) and relative.path == Path("data/w.duckdb")
    assert isinstance(postgres, PostgresWarehouse) and postgres.dialect == "postgres"
    assert isinstance(short, PostgresWarehouse)


@pytest.mark.parametrize("url", ["mysql://root@localhost/db", "/tmp/w.duckdb", "duckdb://", "sqlite:///x.db", ""])
def test_open_warehouse_names_the_accepted_forms_for_anything_else(url: str) -> None:
    with pytest.raises(ValueError) as caught:
        open_warehouse(url)
    for form in ACCEPTED_FORMS:
        assert form in str(caught.value)


@pytest.mark.parametrize(
    ("url", "printed"),
    [
        ("postgresql://li:s3cret@db.example:5432/shop", "postgresql://li:***@db.example:5432/shop"),
        ("postgresql://li@db.example/shop?password=s3cret&sslmode=require", "postgresql://li@db.example/shop?password=***&sslmode=require"),
        ("postgres://li@127.0.0.1:6543/shop", "postgres://li@127.0.0.1:6543/shop"),
        ("duckdb:///tmp/w.duckdb", "duckdb:///tmp/w.duckdb"),
    ],
)
def test_redact_url_hides_only_the_password(url: str, printed: str) -> None:
    assert redact_url(url) == printed


def test_urls_and_the_adapter_import_neither_driver() -> None:
    probe = (
        "import sys, memtool.sql.urls, memtool.sql.postgres_warehouse, memtool.sql.postgres_load; "
        "print(sorted({'psycopg', 'duckdb'} & {m.split('.')[0] for m in sys.modules}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "layers" / "core")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
