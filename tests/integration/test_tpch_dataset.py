"""The TPC-H warehouse at scale 0.01: row counts by the spec's formulas, declared types and keys,
determinism, the refusals and the atomic write; and the question set of tests/tpch_questions.py,
whose every reference SQL must answer on it."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from memtool.datasets import tpch
from memtool.datasets.tpch import TPCH_TABLES, TpchGeneratorMissing, build_tpch_warehouse
from memtool.errors import ValidationFailed
from tests.tpch_questions import QUESTIONS, TpchQuestion

duckdb = pytest.importorskip("duckdb")

SCALE = 0.01

# TPC-H clause 4.2.5: cardinalities per scale factor SF. lineitem has 1..7 lines per order (random),
# so it has no formula; dbgen's count at SF 0.01 is 60,175 and tpchgen-cli reproduces dbgen's rows.
EXPECTED_ROWS = {
    "region": 5,
    "nation": 25,
    "supplier": round(10_000 * SCALE),
    "customer": round(150_000 * SCALE),
    "part": round(200_000 * SCALE),
    "partsupp": round(800_000 * SCALE),
    "orders": round(1_500_000 * SCALE),
    "lineitem": 60_175,
}

# Both by key, so the checksum covers contents, not the order rows happen to be stored in.
CHECKSUMS = {
    "orders": "SELECT md5(string_agg(CAST(t AS VARCHAR), chr(10) ORDER BY o_orderkey)) FROM orders t",
    "lineitem": "SELECT md5(string_agg(CAST(t AS VARCHAR), chr(10) ORDER BY l_orderkey, l_linenumber)) FROM lineitem t",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    path = tmp_path_factory.mktemp("tpch") / "tpch.duckdb"
    return path, build_tpch_warehouse(path, scale=SCALE)


@pytest.fixture(scope="module")
def db(built: tuple[Path, dict[str, int]]) -> Iterator[Any]:
    connection = duckdb.connect(str(built[0]), read_only=True)
    yield connection
    connection.close()


def checksums(path: Path) -> dict[str, str]:
    connection = duckdb.connect(str(path), read_only=True)
    try:
        return {table: connection.execute(sql).fetchone()[0] for table, sql in CHECKSUMS.items()}
    finally:
        connection.close()


def leftovers(directory: Path, name: str) -> list[str]:
    """Files a build could leave beside ``name``: its .tmp, WALs, the generator's Parquet directory."""
    return sorted(p.name for p in directory.iterdir() if p.name != name)


# ---- the warehouse -----------------------------------------------------------------------------


def test_row_counts_follow_the_spec_and_the_summary_tells_the_truth(built, db):
    _, counts = built

    in_file = {table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in TPCH_TABLES}

    assert counts == in_file == EXPECTED_ROWS
    assert list(counts) == list(TPCH_TABLES) == ["region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem"]
    lines_per_order = db.execute("SELECT min(n), max(n) FROM (SELECT count(*) AS n FROM lineitem GROUP BY l_orderkey)").fetchone()
    assert lines_per_order == (1, 7)
    assert db.execute("SELECT min(o_orderdate), max(o_orderdate) FROM orders").fetchone() == (date(1992, 1, 1), date(1998, 8, 2))


def test_columns_have_the_spec_types_and_every_table_a_primary_key(db):
    types = {
        (table, column): data_type
        for table, column, data_type in db.execute("SELECT table_name, column_name, data_type FROM information_schema.columns").fetchall()
    }

    for column in ("o_orderdate", "l_shipdate", "l_commitdate", "l_receiptdate"):
        assert types["orders" if column.startswith("o_") else "lineitem", column] == "DATE"
    for table, column in [
        ("lineitem", "l_extendedprice"),
        ("lineitem", "l_discount"),
        ("lineitem", "l_tax"),
        ("lineitem", "l_quantity"),
        ("orders", "o_totalprice"),
        ("part", "p_retailprice"),
        ("partsupp", "ps_supplycost"),
        ("customer", "c_acctbal"),
        ("supplier", "s_acctbal"),
    ]:
        assert types[table, column] == "DECIMAL(15,2)", (table, column)
    assert types["nation", "n_nationkey"] == types["region", "r_regionkey"] == "INTEGER"
    assert types["orders", "o_orderkey"] == types["lineitem", "l_orderkey"] == types["customer", "c_custkey"] == "BIGINT"
    assert types["nation", "n_name"] == types["customer", "c_mktsegment"] == types["lineitem", "l_shipmode"] == "VARCHAR"
    primary_keys = dict(
        db.execute("SELECT table_name, constraint_column_names FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY'").fetchall()
    )
    assert set(primary_keys) == set(TPCH_TABLES)
    assert primary_keys["lineitem"] == ["l_orderkey", "l_linenumber"]
    assert primary_keys["partsupp"] == ["ps_partkey", "ps_suppkey"]


def test_a_rebuild_over_a_tpch_file_replaces_it_with_the_same_rows(built, tmp_path):
    # Given a copy of the warehouse whose rows were tampered with (still a TPC-H file by its tables)
    path = tmp_path / "again.duckdb"
    shutil.copyfile(built[0], path)
    tampered = duckdb.connect(str(path))
    tampered.execute("DELETE FROM lineitem WHERE l_linenumber = 1")
    tampered.execute("UPDATE orders SET o_comment = 'changed'")
    tampered.close()
    assert checksums(path) != checksums(built[0])

    # When it is built again at the same scale
    counts = build_tpch_warehouse(path, scale=SCALE)

    # Then the build replaced it, and with exactly the first build's rows
    assert counts == EXPECTED_ROWS
    assert checksums(path) == checksums(built[0])
    assert leftovers(tmp_path, path.name) == []


@pytest.mark.parametrize("kind", ["text", "other_duckdb", "directory"])
def test_a_path_that_is_not_a_tpch_warehouse_is_refused_and_left_alone(tmp_path, kind):
    path = tmp_path / "precious.duckdb"
    if kind == "text":
        path.write_text("not a warehouse\n", encoding="utf-8")
    elif kind == "other_duckdb":
        other = duckdb.connect(str(path))
        other.execute("CREATE TABLE region (r_regionkey INTEGER)")  # one TPC-H name is not enough
        other.execute("CREATE TABLE fact_order_line (order_id INTEGER)")
        other.close()
    else:
        path.mkdir()
    before = path.read_bytes() if path.is_file() else None

    with pytest.raises(ValidationFailed, match="refusing to overwrite") as refused:
        build_tpch_warehouse(path, scale=SCALE)

    assert refused.value.field == "path"
    assert (path.read_bytes() if path.is_file() else None) == before
    assert path.exists()
    assert leftovers(tmp_path, path.name) == []


def test_a_missing_generator_names_the_package_to_install_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(tpch.sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    path = tmp_path / "tpch.duckdb"

    with pytest.raises(TpchGeneratorMissing, match="pip install tpchgen-cli"):
        build_tpch_warehouse(path, scale=SCALE)

    assert list(tmp_path.iterdir()) == []


def test_a_build_failing_half_way_leaves_no_half_file(tmp_path, monkeypatch):
    # Given a load that breaks after four tables are in the temporary file
    real_load = tpch._load
    loaded: list[str] = []

    def load_then_break(con: Any, table: str, parquet: Path) -> int:
        if table == "part":
            raise OSError("disk full")
        loaded.append(table)
        return real_load(con, table, parquet)

    monkeypatch.setattr(tpch, "_load", load_then_break)
    path = tmp_path / "tpch.duckdb"

    with pytest.raises(OSError, match="disk full"):
        build_tpch_warehouse(path, scale=SCALE)

    # Then neither the warehouse, its .tmp, a WAL nor the generator's Parquet files are left
    assert loaded == ["region", "nation", "supplier", "customer"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("scale", [0, -1.0, float("nan")])
def test_a_scale_that_is_not_positive_is_refused(tmp_path, scale):
    with pytest.raises(ValidationFailed, match="scale must be positive"):
        build_tpch_warehouse(tmp_path / "tpch.duckdb", scale=scale)
    assert list(tmp_path.iterdir()) == []


def test_progress_reports_each_table(tmp_path, built):
    # the module's build ran silently; this one listens (and shows a TPC-H file is replaced, not refused)
    path = tmp_path / "tpch.duckdb"
    shutil.copyfile(built[0], path)
    messages: list[str] = []

    build_tpch_warehouse(path, scale=SCALE, progress=messages.append)

    assert messages[0].startswith("generating TPC-H scale 0.01 with ")
    assert "  lineitem: 60,175 rows" in messages
    assert messages[-1].startswith(f"TPC-H scale 0.01 written to {path}")


# ---- the question set --------------------------------------------------------------------------

RELATIVE_TIME = re.compile(
    r"\b(last|this|next|recent|past|ago|today|yesterday)\b|去年|今年|明年|上个?月|本月|这个月|上周|本周|最近|近\d", re.IGNORECASE
)


@pytest.mark.parametrize("question", QUESTIONS, ids=str)
def test_every_reference_sql_answers_on_the_warehouse(db, question: TpchQuestion):
    cursor = db.execute(question.expected_sql)
    rows = cursor.fetchall()
    columns = [d[0] for d in cursor.description]

    assert rows, f"{question.id}: no rows"
    assert all(value is not None for row in rows for value in row), f"{question.id}: a NULL in {columns}"
    assert len(set(columns)) == len(columns), f"{question.id}: duplicate column names {columns}"


@pytest.mark.parametrize("question", [q for q in QUESTIONS if q.ordered and q.lang == "en"], ids=str)
def test_a_top_or_bottom_n_has_no_tie_at_its_cut(db, question: TpchQuestion):
    limit = re.search(r"LIMIT (\d+)\s*$", question.expected_sql.strip())
    assert limit and "ORDER BY" in question.expected_sql
    n = int(limit.group(1))

    rows = db.execute(question.expected_sql.replace(f"LIMIT {n}", f"LIMIT {n + 1}")).fetchall()

    assert len(rows) == n + 1 and rows[n - 1][-1] != rows[n][-1]


def test_the_set_covers_enough_shapes_each_in_both_languages():
    shapes: dict[str, list[TpchQuestion]] = {}
    for question in QUESTIONS:
        shapes.setdefault(question.shape, []).append(question)

    assert len(QUESTIONS) >= 40 and len(shapes) >= 18
    assert len({q.id for q in QUESTIONS}) == len(QUESTIONS)
    for shape, asked in shapes.items():
        assert sorted(q.lang for q in asked) == ["en", "zh"], shape
        en, zh = sorted(asked, key=lambda q: q.lang)
        assert en.expected_sql == zh.expected_sql and en.ordered == zh.ordered, shape
        assert not re.search(r"[\u4e00-\u9fff]", en.question), en.id
        assert re.search(r"[\u4e00-\u9fff]", zh.question), zh.id
        assert en.ordered == ("LIMIT" in en.expected_sql), shape


def test_every_time_window_is_absolute_and_inside_the_data():
    for question in QUESTIONS:
        assert not RELATIVE_TIME.search(question.question), question.id
        for year in re.findall(r"(?<!\d)(19\d\d)(?!\d)", question.question + question.expected_sql):
            assert 1992 <= int(year) <= 1998, (question.id, year)
