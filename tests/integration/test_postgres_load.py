"""Loading a DuckDB warehouse into a real PostgreSQL server, by function and by `memtool seed-warehouse --target`.

Given the small demo warehouse, every table arrives with its rows and its types, the sums agree
with DuckDB's, a load that fails half way leaves nothing behind, and the command prints row counts
or, for a server it cannot reach, one line and exit code 2.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import duckdb
import psycopg
import pytest

from memtool.cli import main
from memtool.sql.demo_warehouse import build_demo_warehouse
from memtool.sql.postgres_load import copy_duckdb_into_postgres
from memtool.sql.warehouse import WarehouseError
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.slow

ANCHOR = date(2026, 11, 29)
DEMO_TABLES = {"dim_channel", "dim_product", "dim_region", "fact_order_line", "fact_prescription", "fact_refund"}

# The same aggregate in both engines: sums of money, counts, date bounds, a boolean, a timestamp.
AGGREGATES = [
    "SELECT COUNT(*), SUM(gross_amount), SUM(discount_amount), MIN(order_date), MAX(order_date), "
    "SUM(CASE WHEN is_test THEN 1 ELSE 0 END), COUNT(paid_at), MAX(paid_at) FROM fact_order_line",
    "SELECT COUNT(*), SUM(refund_amount), COUNT(DISTINCT reason), MIN(refunded_at) FROM fact_refund",
    "SELECT SUM(qty), COUNT(DISTINCT hospital_id), MAX(rx_date) FROM fact_prescription",
    "SELECT channel_id, channel_name, channel_en FROM dim_channel ORDER BY channel_id",
    "SELECT product_id, product_name, brand, launch_date FROM dim_product ORDER BY product_id",
]


@pytest.fixture(scope="module")
def demo_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    build_demo_warehouse(path, seed=7, scale=0.05, anchor=ANCHOR)
    return path


@pytest.fixture(scope="module")
def loaded(demo_file: Path, postgres_database: str) -> dict[str, int]:
    lines: list[str] = []
    counts = copy_duckdb_into_postgres(demo_file, postgres_database, progress=lines.append)
    assert len(lines) == len(counts)  # one progress line per table
    return counts


def table_names(url: str) -> set[str]:
    with psycopg.connect(url) as connection:
        rows = connection.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").fetchall()
    return {row[0] for row in rows}


def test_every_table_arrives_with_all_its_rows(demo_file: Path, postgres_database: str, loaded: dict[str, int]) -> None:
    with duckdb.connect(str(demo_file), read_only=True) as source:
        expected = {table: source.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in DEMO_TABLES}  # type: ignore[index]

    with psycopg.connect(postgres_database) as connection:
        in_postgres = {table: connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in DEMO_TABLES}  # type: ignore[index]

    assert loaded == expected == in_postgres
    assert loaded["fact_order_line"] > 10_000


def test_types_are_mapped(postgres_database: str, loaded: dict[str, int]) -> None:
    with psycopg.connect(postgres_database) as connection:
        types: dict[str, str] = dict(
            connection.execute(
                "SELECT column_name, CASE WHEN data_type = 'numeric' THEN format('numeric(%s,%s)', numeric_precision, numeric_scale) "
                "ELSE data_type END FROM information_schema.columns WHERE table_name = 'fact_order_line'"
            ).fetchall()
        )

    assert types == {
        "order_id": "bigint",
        "line_id": "integer",
        "order_date": "date",
        "paid_at": "timestamp without time zone",
        "product_id": "integer",
        "region_id": "integer",
        "channel_id": "integer",
        "qty": "integer",
        "gross_amount": "numeric(12,2)",
        "discount_amount": "numeric(12,2)",
        "is_test": "boolean",
    }


@pytest.mark.parametrize("query", AGGREGATES)
def test_aggregates_equal_duckdbs(demo_file: Path, postgres_database: str, loaded: dict[str, int], query: str) -> None:
    with duckdb.connect(str(demo_file), read_only=True) as source:
        expected = source.execute(query).fetchall()
    with psycopg.connect(postgres_database) as connection:
        actual = connection.execute(query).fetchall()

    assert actual == expected


def test_primary_keys_arrive_too(tmp_path: Path, postgres: PostgresServer) -> None:
    source = tmp_path / "keys.duckdb"
    with duckdb.connect(str(source)) as con:
        con.execute("CREATE TABLE orders (o_orderkey BIGINT PRIMARY KEY, o_total DECIMAL(12,2))")
        con.execute("CREATE TABLE lines (l_orderkey BIGINT, l_line INTEGER, qty INTEGER, PRIMARY KEY (l_orderkey, l_line))")
        con.execute("INSERT INTO orders VALUES (1, 10.5), (2, 3)")
        con.execute("INSERT INTO lines VALUES (1, 1, 5), (1, 2, 6), (2, 1, 7)")
    url = postgres.create_database("keys")
    copy_duckdb_into_postgres(source, url)
    with psycopg.connect(url) as connection:
        keys = connection.execute(
            "SELECT tc.table_name, string_agg(k.column_name, ',' ORDER BY k.ordinal_position) FROM information_schema.table_constraints tc "
            "JOIN information_schema.key_column_usage k ON k.constraint_name = tc.constraint_name AND k.table_name = tc.table_name "
            "WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_schema = current_schema() GROUP BY 1 ORDER BY 1"
        ).fetchall()
    assert keys == [("lines", "l_orderkey,l_line"), ("orders", "o_orderkey")]


def test_loading_again_replaces_the_tables(demo_file: Path, postgres: PostgresServer) -> None:
    url = postgres.create_database()
    try:
        first = copy_duckdb_into_postgres(demo_file, url)
        second = copy_duckdb_into_postgres(demo_file, url)

        with psycopg.connect(url) as connection:
            lines = connection.execute("SELECT COUNT(*) FROM fact_order_line").fetchone()
        assert first == second and lines == (first["fact_order_line"],)
        with pytest.raises(WarehouseError, match="already exists"):
            copy_duckdb_into_postgres(demo_file, url, replace=False)
    finally:
        postgres.drop_database(url)


def test_a_failed_load_leaves_nothing_behind(demo_file: Path, postgres: PostgresServer) -> None:
    url = postgres.create_database()
    try:
        # Given a view in the way of the last table the load creates (tables load in name order)
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("CREATE VIEW fact_refund AS SELECT 1 AS x")

        with pytest.raises(WarehouseError) as caught:
            copy_duckdb_into_postgres(demo_file, url)

        assert "fact_refund" in str(caught.value)
        assert table_names(url) == set()  # the five tables created before it were rolled back
        with psycopg.connect(url) as connection:
            assert connection.execute("SELECT x FROM fact_refund").fetchall() == [(1,)]
    finally:
        postgres.drop_database(url)


def test_seed_warehouse_loads_the_demo_into_postgresql(
    postgres: PostgresServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = postgres.create_database()
    try:
        code = main(["seed-warehouse", "--target", url, "--scale", "0.02", "--today", ANCHOR.isoformat(), "--home", str(tmp_path / "home")])
        out = capsys.readouterr().out

        assert code == 0, out
        with psycopg.connect(url) as connection:
            lines = connection.execute("SELECT COUNT(*) FROM fact_order_line").fetchone()
        assert lines is not None and lines[0] > 0
        assert f"  {'fact_order_line':<18} {lines[0]:>9,} rows" in out.split(f"loaded 6 tables into {url}")[1]
        assert f"loaded 6 tables into {url}" in out
        assert table_names(url) == DEMO_TABLES
        assert not (tmp_path / "home" / "warehouse").exists()  # the staging file was temporary
    finally:
        postgres.drop_database(url)


def test_seed_warehouse_with_an_unreachable_target_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    url = f"postgresql://memtool:s3cret-pw@127.0.0.1:{closed_port}/shop"

    code = main(["seed-warehouse", "--target", url, "--scale", "0.02", "--home", str(tmp_path / "home")])
    captured = capsys.readouterr()

    assert code == 2
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"memtool seed-warehouse: cannot reach postgresql://memtool:***@127.0.0.1:{closed_port}/shop")
    assert "s3cret-pw" not in captured.err + captured.out
    assert "building" not in captured.out  # refused before minutes of building


def test_seed_warehouse_refuses_a_target_that_is_not_postgresql(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["seed-warehouse", "--target", "mysql://root@localhost/shop", "--home", str(tmp_path / "home")])

    assert code == 2
    assert "--target must be a postgresql://" in capsys.readouterr().err


def test_tpch_takes_its_own_default_scale_and_refuses_drift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import memtool.sql.seeding as seeding

    built: list[tuple[Path, float]] = []

    def build_tpch_warehouse(path: Path, *, scale: float) -> dict[str, int]:
        built.append((path, scale))
        return {"lineitem": 6}

    monkeypatch.setattr(seeding, "_tpch_builder", lambda: build_tpch_warehouse)

    assert main(["seed-warehouse", "--dataset", "tpch", "--home", str(tmp_path)]) == 0
    assert built == [(tmp_path / "warehouse" / "tpch.duckdb", 0.1)]
    assert "lineitem" in capsys.readouterr().out

    assert main(["seed-warehouse", "--dataset", "tpch", "--drift", "--home", str(tmp_path)]) == 2
    assert "--drift" in capsys.readouterr().err


def test_tpch_without_its_generator_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "memtool.datasets.tpch", None)  # import fails as if the module were missing

    code = main(["seed-warehouse", "--dataset", "tpch", "--home", str(tmp_path)])

    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("memtool seed-warehouse: the TPC-H dataset is not available") and err.count("\n") == 1
