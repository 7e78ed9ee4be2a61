"""The live schema read from information_schema, and the drifted demo warehouse it has to see through.

The normal warehouse is the session's ``demo_warehouse`` (seed 7, scale 0.05); the drifted one is
built here from the same inputs, so its rows must match once names are mapped through
``DRIFT_RENAMES``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from memtool.cli import main
from memtool.semantic.catalog import load_catalog
from memtool.sql.demo_warehouse import (
    DEMO_FILE_NAME,
    DRIFT_FILE_NAME,
    DRIFT_RENAMES,
    WAREHOUSE_SCHEMA,
    WarehouseSummary,
    build_demo_warehouse,
    ensure_demo_warehouse,
    meta_path,
    read_warehouse_summary,
)
from memtool.sql.duckdb_warehouse import DuckDBWarehouse
from memtool.sql.guardrails import GuardPolicy, check_sql
from memtool.sql.live_schema import LiveSchema, SchemaCache
from memtool.sql.warehouse import Warehouse, WarehouseError

pytest.importorskip("duckdb")

TODAY = date(2026, 11, 29)  # the anchor tests/conftest.py builds ``demo_warehouse`` with


@pytest.fixture(scope="module")
def drifted_summary(tmp_path_factory: pytest.TempPathFactory) -> WarehouseSummary:
    path = tmp_path_factory.mktemp("drift") / DRIFT_FILE_NAME
    return build_demo_warehouse(path, seed=7, scale=0.05, anchor=TODAY, drift=True)


@pytest.fixture(scope="module")
def normal(demo_warehouse: Path) -> Iterator[DuckDBWarehouse]:
    warehouse = DuckDBWarehouse(demo_warehouse)
    yield warehouse
    warehouse.close()


@pytest.fixture(scope="module")
def drifted(drifted_summary: WarehouseSummary) -> Iterator[DuckDBWarehouse]:
    warehouse = DuckDBWarehouse(drifted_summary.path)
    yield warehouse
    warehouse.close()


def rows(warehouse: Warehouse, sql: str) -> list[list[Any]]:
    return warehouse.run(sql, max_rows=10_000, timeout_seconds=10).rows


def error_code(warehouse: Warehouse, sql: str) -> str:
    with pytest.raises(WarehouseError) as raised:
        warehouse.run(sql, max_rows=10, timeout_seconds=10)
    return raised.value.code


# --- the normal warehouse ----------------------------------------------------------------------


def test_describe_matches_the_schema_contract(normal: DuckDBWarehouse) -> None:
    schema = normal.describe()

    assert isinstance(schema, LiveSchema)
    assert set(schema.tables) == set(WAREHOUSE_SCHEMA)
    for table, columns in WAREHOUSE_SCHEMA.items():
        assert schema.columns_of(table) == tuple(columns), table  # names and ordinal order


def test_types_are_spelled_by_the_engine(normal: DuckDBWarehouse) -> None:
    schema = normal.describe()

    assert schema.type_of("fact_order_line", "gross_amount") == "DECIMAL(12,2)"
    assert schema.type_of("FACT_ORDER_LINE", "Paid_At") == "TIMESTAMP"
    assert schema.type_of("dim_region", "region_id") == "INTEGER"  # the contract says INT
    assert schema.type_of("fact_order_line", "no_such_column") is None
    assert schema.time_columns("fact_order_line") == ("order_date", "paid_at")
    assert schema.time_columns("fact_refund") == ("refunded_at",)
    assert schema.boolean_columns("fact_order_line") == ("is_test",)
    assert schema.columns_of("no_such_table") == () and schema.time_columns("no_such_table") == ()


def test_guard_allowlist_and_facts_are_json_friendly(normal: DuckDBWarehouse) -> None:
    schema = normal.describe()

    allowlist = schema.guard_allowlist()
    assert allowlist == {table: list(columns) for table, columns in WAREHOUSE_SCHEMA.items()}
    assert GuardPolicy.from_live_schema(schema).allowed == GuardPolicy.from_model(load_catalog()).allowed
    assert GuardPolicy.for_model(schema, load_catalog()).allowed == GuardPolicy.from_model(load_catalog()).allowed
    facts = schema.facts(["Dim_Channel", "dim_channel", "no_such_table"])
    assert facts == {"dim_channel": {"channel_id": "INTEGER", "channel_name": "VARCHAR", "channel_en": "VARCHAR"}}
    assert json.loads(json.dumps(facts)) == facts


# --- the drifted warehouse ---------------------------------------------------------------------


def test_drifted_describe_shows_the_new_names_only(drifted: DuckDBWarehouse) -> None:
    schema = drifted.describe()

    assert schema.has_column("fact_order_line", "gross_amt")
    assert not schema.has_column("fact_order_line", "gross_amount")
    assert schema.has_table("dim_sales_channel") and not schema.has_table("dim_channel")
    assert schema.columns_of("dim_sales_channel") == tuple(WAREHOUSE_SCHEMA["dim_channel"])
    assert schema.columns_of("fact_order_line") == tuple(
        "gross_amt" if column == "gross_amount" else column for column in WAREHOUSE_SCHEMA["fact_order_line"]
    )
    assert set(schema.tables) == {DRIFT_RENAMES.table_name(table) for table in WAREHOUSE_SCHEMA}


def test_no_view_keeps_an_old_name(drifted: DuckDBWarehouse) -> None:
    relations = rows(drifted, "SELECT table_name, table_type FROM information_schema.tables ORDER BY table_name")

    assert {name for name, _ in relations} == {DRIFT_RENAMES.table_name(table) for table in WAREHOUSE_SCHEMA}
    assert {kind for _, kind in relations} == {"BASE TABLE"}
    assert rows(drifted, "SELECT COUNT(*) FROM information_schema.columns WHERE column_name = 'gross_amount'") == [[0]]


def test_drift_changes_names_not_rows(
    normal: DuckDBWarehouse, drifted: DuckDBWarehouse, drifted_summary: WarehouseSummary, demo_warehouse: Path
) -> None:
    normal_summary = read_warehouse_summary(demo_warehouse)
    assert normal_summary is not None and normal_summary.drift is False
    for table in WAREHOUSE_SCHEMA:
        renamed = DRIFT_RENAMES.table_name(table)
        count = rows(normal, f"SELECT COUNT(*) FROM {table}")
        assert rows(drifted, f"SELECT COUNT(*) FROM {renamed}") == count, table
        assert drifted_summary.row_counts[renamed] == normal_summary.row_counts[table] == count[0][0]

    # the same answer once names are mapped, down to the cent
    by_channel = """
        SELECT c.channel_name, SUM(f.{gross}) AS gross, COUNT(*) AS lines
        FROM fact_order_line f JOIN {channel} c ON c.channel_id = f.channel_id
        WHERE NOT f.is_test GROUP BY 1 ORDER BY 1
    """
    expected = rows(normal, by_channel.format(gross="gross_amount", channel="dim_channel"))
    assert len(expected) == 4
    assert rows(drifted, by_channel.format(gross="gross_amt", channel="dim_sales_channel")) == expected


def test_the_summary_says_the_warehouse_drifted(drifted_summary: WarehouseSummary) -> None:
    expected = {
        "renamed_columns": {"fact_order_line.gross_amount": "gross_amt"},
        "renamed_tables": {"dim_channel": "dim_sales_channel"},
    }
    assert DRIFT_RENAMES.as_dict() == expected
    assert drifted_summary.drift is True and drifted_summary.renames == expected
    meta = json.loads(meta_path(drifted_summary.path).read_text(encoding="utf-8"))
    assert meta["drift"] is True and meta["renames"] == expected
    assert read_warehouse_summary(drifted_summary.path) == drifted_summary
    assert DRIFT_RENAMES.column_name("fact_order_line", "gross_amount") == "gross_amt"
    assert DRIFT_RENAMES.column_name("fact_order_line", "qty") == "qty"


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        ("SELECT SUM(gross_amount) FROM fact_order_line", "undefined_column"),
        ("SELECT SUM(f.gross_amount) FROM fact_order_line f", "undefined_column"),
        ("SELECT channel_name FROM dim_channel", "undefined_table"),
        (
            "SELECT c.channel_name, SUM(f.gross_amt) FROM fact_order_line f "
            "JOIN dim_channel c ON c.channel_id = f.channel_id GROUP BY 1",
            "undefined_table",
        ),
    ],
)
def test_old_names_fail_with_a_code_diagnosis_can_use(drifted: DuckDBWarehouse, sql: str, code: str) -> None:
    assert error_code(drifted, sql) == code


def test_a_guard_from_the_live_schema_lets_the_drifted_names_run(drifted: DuckDBWarehouse) -> None:
    policy = GuardPolicy.from_live_schema(drifted.describe(), max_rows=10, timeout_seconds=5)

    refused = check_sql("SELECT SUM(gross_amount) FROM fact_order_line", policy)
    verdict = check_sql("SELECT channel_name FROM dim_sales_channel ORDER BY channel_id", policy)

    assert refused.code == "forbidden_column"
    assert verdict.allowed and verdict.sql is not None
    assert [name for (name,) in rows(drifted, verdict.sql)] == ["医院", "零售药店", "电商", "诊所"]


def test_fingerprint_tells_the_two_schemas_apart(normal: DuckDBWarehouse, drifted: DuckDBWarehouse) -> None:
    before = normal.describe().fingerprint()

    assert len(before) == 16 and int(before, 16) >= 0
    assert normal.describe(refresh=True).fingerprint() == before
    assert drifted.describe().fingerprint() != before
    reordered = LiveSchema({t: dict(reversed(list(c.items()))) for t, c in reversed(list(normal.describe().tables.items()))})
    assert reordered.fingerprint() == before  # order is not content


# --- caching -----------------------------------------------------------------------------------


@pytest.fixture
def counted(demo_warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[DuckDBWarehouse, list[str]]]:
    """A warehouse whose database cursors are counted: each describe() that reads takes one."""
    warehouse = DuckDBWarehouse(demo_warehouse)
    taken: list[str] = []
    real_cursor = warehouse._cursor

    def counting_cursor(sql: str) -> Any:
        taken.append(sql)
        return real_cursor(sql)

    monkeypatch.setattr(warehouse, "_cursor", counting_cursor)
    yield warehouse, taken
    warehouse.close()


def test_describe_is_cached_within_the_window(counted: tuple[DuckDBWarehouse, list[str]]) -> None:
    warehouse, taken = counted

    first = warehouse.describe()
    second = warehouse.describe()

    assert len(taken) == 1 and "information_schema.columns" in taken[0]
    assert second is first


def test_refresh_reads_again(counted: tuple[DuckDBWarehouse, list[str]]) -> None:
    warehouse, taken = counted

    first = warehouse.describe()
    again = warehouse.describe(refresh=True)

    assert len(taken) == 2
    assert again == first and again is not first


def test_a_zero_window_reads_every_time(demo_warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    warehouse = DuckDBWarehouse(demo_warehouse, schema_cache_seconds=0)
    taken: list[str] = []
    real_cursor = warehouse._cursor
    monkeypatch.setattr(warehouse, "_cursor", lambda sql: taken.append(sql) or real_cursor(sql))
    try:
        warehouse.describe()
        warehouse.describe()
    finally:
        warehouse.close()

    assert len(taken) == 2


def test_the_cache_expires_after_its_window() -> None:
    now = [100.0]
    reads: list[LiveSchema] = []

    def read() -> LiveSchema:
        reads.append(LiveSchema({"t": {"a": "INTEGER"}}))
        return reads[-1]

    cache = SchemaCache(60, clock=lambda: now[0])
    cache.get(read)
    now[0] = 159.9
    cache.get(read)
    assert len(reads) == 1
    now[0] = 160.0
    cache.get(read)
    assert len(reads) == 2
    with pytest.raises(ValueError):
        SchemaCache(-1)


def test_a_missing_file_is_a_warehouse_error(tmp_path: Path) -> None:
    with pytest.raises(WarehouseError) as raised:
        DuckDBWarehouse(tmp_path / "nowhere.duckdb").describe()

    assert raised.value.code == "database_error"


# --- building and the CLI ----------------------------------------------------------------------


def test_ensure_keeps_the_drifted_file_apart(tmp_path: Path) -> None:
    normal_path = ensure_demo_warehouse(tmp_path, TODAY, seed=3, scale=0.01)
    normal_meta = meta_path(normal_path).read_bytes()

    drift_path = ensure_demo_warehouse(tmp_path, TODAY, seed=3, scale=0.01, drift=True)

    assert (normal_path.name, drift_path.name) == (DEMO_FILE_NAME, DRIFT_FILE_NAME)
    assert meta_path(normal_path).read_bytes() == normal_meta  # the normal file was not touched
    normal_summary, drift_summary = read_warehouse_summary(normal_path), read_warehouse_summary(drift_path)
    assert normal_summary is not None and drift_summary is not None
    assert (normal_summary.drift, normal_summary.renames) == (False, {})
    assert drift_summary.drift is True


@pytest.fixture
def no_configured_warehouse(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's default file must come from --home here, never from a MEMTOOL_WAREHOUSE_PATH of the shell."""
    monkeypatch.delenv("MEMTOOL_WAREHOUSE_PATH", raising=False)


@pytest.mark.usefixtures("no_configured_warehouse")
def test_cli_writes_a_drifted_warehouse_and_says_what_moved(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "evaluation" / "drift.duckdb"

    code = main(["seed-warehouse", "--drift", "--out", str(out), "--home", str(tmp_path / "home"),
                 "--scale", "0.01", "--today", TODAY.isoformat()])  # fmt: skip

    printed = capsys.readouterr().out
    assert code == 0
    assert f"wrote {out}" in printed
    assert "column fact_order_line.gross_amount -> gross_amt" in printed
    assert "table  dim_channel -> dim_sales_channel" in printed
    assert "dim_sales_channel" in printed.split("schema drift")[0]  # the row counts use the live names
    summary = read_warehouse_summary(out)
    assert summary is not None and summary.drift is True and summary.renames == DRIFT_RENAMES.as_dict()
    warehouse = DuckDBWarehouse(out)
    try:
        assert not warehouse.describe().has_table("dim_channel")
    finally:
        warehouse.close()
    assert not (tmp_path / "home" / "warehouse").exists()  # --out, not the home's default file


@pytest.mark.usefixtures("no_configured_warehouse")
def test_cli_drift_defaults_to_its_own_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"

    code = main(["seed-warehouse", "--drift", "--home", str(home), "--scale", "0.01", "--today", TODAY.isoformat()])

    assert code == 0
    assert (home / "warehouse" / DRIFT_FILE_NAME).exists()
    assert not (home / "warehouse" / DEMO_FILE_NAME).exists()
    assert f"wrote {home / 'warehouse' / DRIFT_FILE_NAME}" in capsys.readouterr().out


@pytest.mark.usefixtures("no_configured_warehouse")
def test_cli_never_replaces_a_warehouse_of_the_other_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "demo.duckdb"
    common = ["--path", str(path), "--home", str(tmp_path), "--scale", "0.01", "--today", TODAY.isoformat()]
    assert main(["seed-warehouse", *common]) == 0
    before = meta_path(path).read_bytes()
    capsys.readouterr()

    code = main(["seed-warehouse", "--drift", *common])

    assert code == 2
    assert "holds the normal demo warehouse" in capsys.readouterr().err
    assert meta_path(path).read_bytes() == before
    summary = read_warehouse_summary(path)
    assert summary is not None and summary.drift is False
