"""`memtool model init` on real warehouses: the demo shop and TPC-H in DuckDB, and the demo loaded into PostgreSQL.

Each draft must validate, name the joins and dimensions a person would, keep entity values under
the cap, and compile and run every metric by every dimension on the warehouse it was read from.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml

from memtool.commands import model_local
from memtool.semantic.catalog import Catalog, parse_model
from memtool.semantic.compiler import IntentCompiler
from memtool.semantic.intent import Intent
from memtool.semantic.introspect import draft_model, metric_dimension_pairs, read_catalog_facts
from memtool.sql.warehouse import Warehouse

pytest.importorskip("duckdb")

from memtool.sql.duckdb_warehouse import DuckDBWarehouse


@pytest.fixture(scope="module")
def demo_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from memtool.sql.demo_warehouse import build_demo_warehouse

    path = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    build_demo_warehouse(path, seed=7, scale=0.02, anchor=date(2026, 11, 29))
    return path


@pytest.fixture(scope="module")
def tpch_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from memtool.datasets.tpch import TpchGeneratorMissing, build_tpch_warehouse

    path = tmp_path_factory.mktemp("tpch") / "tpch.duckdb"
    try:
        build_tpch_warehouse(path, scale=0.01)
    except TpchGeneratorMissing as missing:
        pytest.skip(str(missing))
    return path


@pytest.fixture(scope="module")
def tpch(tpch_path: Path) -> Iterator[DuckDBWarehouse]:
    warehouse = DuckDBWarehouse(tpch_path)
    yield warehouse
    warehouse.close()


@pytest.fixture(scope="module")
def demo(demo_path: Path) -> Iterator[DuckDBWarehouse]:
    warehouse = DuckDBWarehouse(demo_path)
    yield warehouse
    warehouse.close()


def joins(model: Catalog) -> set[tuple[str, str, tuple[str, ...]]]:
    return {(j.left, j.right, j.on) for j in model.joins}


def runs_everywhere(warehouse: Warehouse, document: dict[str, Any]) -> int:
    """Compile every metric x dimension and run it with LIMIT 0; how many ran."""
    compiler = IntentCompiler(Catalog.model_validate(document))
    pairs = list(metric_dimension_pairs(document))
    for metric, dimension in pairs:
        sql = compiler.compile(Intent(metric=metric, dimensions=(dimension,))).sql
        result = warehouse.run(f"SELECT * FROM ({sql}) AS draft LIMIT 0", max_rows=1, timeout_seconds=30)
        assert result.columns[-1] == metric and result.row_count == 0
    return len(pairs)


TPCH_JOINS = {
    ("lineitem", "orders", ("l_orderkey = o_orderkey",)),
    ("orders", "customer", ("o_custkey = c_custkey",)),
    ("customer", "nation", ("c_nationkey = n_nationkey",)),
    ("nation", "region", ("n_regionkey = r_regionkey",)),
    ("lineitem", "part", ("l_partkey = p_partkey",)),
    ("lineitem", "supplier", ("l_suppkey = s_suppkey",)),
    ("partsupp", "part", ("ps_partkey = p_partkey",)),
    ("partsupp", "supplier", ("ps_suppkey = s_suppkey",)),
    ("supplier", "nation", ("s_nationkey = n_nationkey",)),
}


def test_the_tpch_draft_joins_the_schema_and_runs_every_metric_by_every_dimension(tpch: DuckDBWarehouse) -> None:
    facts = read_catalog_facts(tpch)
    document = draft_model(facts, name="tpch")
    model = Catalog.model_validate(document)

    assert joins(model) >= TPCH_JOINS
    assert joins(model) - TPCH_JOINS == {("lineitem", "partsupp", ("l_partkey = ps_partkey", "l_suppkey = ps_suppkey"))}
    assert {s.name: s.time_column for s in model.sources} == {"lineitem": "l_shipdate", "orders": "o_orderdate"}
    assert {"l_extendedprice", "l_quantity", "o_totalprice", "lineitem_count", "orders_count"} <= {m.name for m in model.metrics}
    assert model.metric("l_extendedprice").kind == "money" and model.metric("lineitem_count").expression == "COUNT(*)"
    attributes = {d.name for d in model.attribute_dimensions}
    assert {"c_mktsegment", "o_orderpriority", "l_shipmode", "l_returnflag", "n_name", "r_name", "p_brand"} <= attributes
    assert not {"n_comment", "r_comment", "l_comment", "c_address", "c_phone"} & attributes  # free text
    # names of many (1,500 customers, 2,000 parts) are dimensions too: 50 values indexed, the others looked up
    assert {"c_name", "p_name", "s_name"} <= attributes
    assert model.dimension("c_name").max_values == 50 and "c_name" not in {v.dimension for v in model.entity_values}
    # lineitem reaches customer and its nation through orders; orders has no supplier
    assert {"c_mktsegment", "n_name", "l_shipmode"} <= set(model.metric("l_extendedprice").dimensions)
    assert "l_shipmode" not in model.metric("o_totalprice").dimensions
    assert "lineitem -> supplier -> nation" in model.dimension("n_name").definition("en")
    values = {v.dimension: v.values for v in model.entity_values}
    assert values["r_name"] == ("AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST")
    assert len(values["n_name"]) == 25 and all(len(v) <= 50 for v in values.values())

    assert runs_everywhere(tpch, document) == sum(len(m.dimensions) for m in model.metrics) > 100


def test_a_lower_cap_keeps_fewer_dimensions_and_never_more_values(tpch: DuckDBWarehouse) -> None:
    facts = read_catalog_facts(tpch, distinct_cap=5)
    model = Catalog.model_validate(draft_model(facts, name="tpch", max_values=5))
    attributes = {d.name for d in model.attribute_dimensions}
    assert {"c_mktsegment", "o_orderpriority", "r_name", "l_returnflag"} <= attributes
    # 7, 25 and 25 values: dimensions that keep 5 and ask the warehouse about the others, none listed
    assert all(model.dimension(d).max_values == 5 for d in ("l_shipmode", "n_name", "p_brand"))
    assert not {"l_shipmode", "n_name", "p_brand"} & {v.dimension for v in model.entity_values}
    assert model.entity_values and all(len(v.values) <= 5 for v in model.entity_values)
    # the sample stops at the cap + 1; beyond it the count is exact (one COUNT(DISTINCT) per table)
    counts = {c.name: c.distinct_count for t in facts.tables for c in t.columns if c.distinct_count}
    assert counts["l_shipmode"] == 7 and counts["n_name"] == 25 and counts["c_name"] == 1500 and counts["r_name"] == 5


DEMO_JOINS = {
    ("fact_order_line", "dim_region", ("region_id",)),
    ("fact_order_line", "dim_channel", ("channel_id",)),
    ("fact_order_line", "dim_product", ("product_id",)),
    ("fact_prescription", "dim_region", ("region_id",)),
    ("fact_prescription", "dim_product", ("product_id",)),
    ("fact_refund", "fact_order_line", ("order_id", "line_id")),
}
DEMO_DIMENSIONS = {"region_name", "city", "channel_name", "product_name", "brand", "therapeutic_area", "reason"}


def check_demo_draft(document: dict[str, Any]) -> Catalog:
    model = Catalog.model_validate(document)
    assert joins(model) == DEMO_JOINS
    assert {d.name for d in model.attribute_dimensions} == DEMO_DIMENSIONS
    assert model.dimension("city").en_column == "city_en" and model.dimension("channel_name").en_column == "channel_en"
    assert {s.name: s.time_column for s in model.sources} == {
        "dim_product": "launch_date",  # a dimension with a date of its own: products counted by their launch
        "fact_order_line": "order_date",
        "fact_prescription": "rx_date",
        "fact_refund": "refunded_at",
    }
    assert {"gross_amount", "discount_amount", "refund_amount", "fact_order_line_qty", "fact_prescription_qty"} <= {
        m.name for m in model.metrics
    }
    # refunds reach the order line's region through the order line; prescriptions have no channel
    assert "region_name" in model.metric("refund_amount").dimensions
    assert "channel_name" not in model.metric("fact_prescription_qty").dimensions
    values = {v.dimension: v.values for v in model.entity_values}
    assert len(values["region_name"]) == 5 and all(0 < len(v) <= 50 for v in values.values())
    return model


def test_the_demo_draft_infers_keys_from_unique_data_and_runs(demo: DuckDBWarehouse) -> None:
    facts = read_catalog_facts(demo)
    assert facts.table("fact_order_line").primary_key == ("order_id", "line_id")
    assert not facts.table("dim_region").primary_key_declared
    document = draft_model(facts, name="demo")
    check_demo_draft(document)
    assert runs_everywhere(demo, document) > 50


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="memtool")
    commands = parser.add_subparsers(dest="command", required=True)
    model_subparsers = commands.add_parser("model").add_subparsers(dest="model_command", required=True)
    model_local.register(model_subparsers)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


def test_the_command_writes_a_yaml_model_that_loads(demo_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "draft.yaml"
    code = run_cli(["model", "init", "--warehouse", f"duckdb:///{demo_path}", "--max-values", "8", "-o", str(out)])
    captured = capsys.readouterr()
    assert code == 0 and captured.out == ""
    assert "drafted" in captured.err and "fact_order_line: 6," in captured.err
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# A DRAFT semantic model")
    model = parse_model(text)
    assert model.name == "demo" and model.model_version == "draft"
    # product_name has 16 values: under a cap of 8 it keeps 8, and a question naming another is looked up
    assert model.dimension("product_name").max_values == 8
    assert "product_name" not in {v.dimension for v in model.entity_values}
    assert all(len(v.values) <= 8 for v in model.entity_values)


def test_the_command_prints_to_stdout_and_fails_in_one_line(demo_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["model", "init", "--warehouse", f"duckdb:///{demo_path}", "--name", "shop"]) == 0
    document = yaml.safe_load(capsys.readouterr().out)
    assert document["name"] == "shop"

    for url in (f"duckdb:///{demo_path.parent / 'missing.duckdb'}", "postgresql://me:s3cret@127.0.0.1:1/none", "mysql://x"):
        assert run_cli(["model", "init", "--warehouse", url]) == 2
        captured = capsys.readouterr()
        errors = [line for line in captured.err.splitlines() if "cannot read the warehouse" in line]
        assert len(errors) == 1 and captured.out == "" and "s3cret" not in captured.err


def test_init_on_postgresql_finds_the_same_model_after_the_demo_is_loaded(demo_path: Path, postgres_database: str, tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    from memtool.sql.postgres_load import copy_duckdb_into_postgres
    from memtool.sql.postgres_warehouse import PostgresWarehouse

    # a copy: DuckDB refuses a second, differently configured connection to the file the demo fixture holds
    staged = tmp_path / "demo.duckdb"
    shutil.copyfile(demo_path, staged)
    copy_duckdb_into_postgres(staged, postgres_database)
    warehouse = PostgresWarehouse.from_url(postgres_database)
    try:
        facts = read_catalog_facts(warehouse)
        assert facts.dialect == "postgres" and not facts.notes
        # the loader copies no constraints: keys come from unique data, joins from names
        assert facts.table("fact_refund").primary_key == ("refund_id",)
        document = draft_model(facts, name="demo")
        check_demo_draft(document)
        assert runs_everywhere(warehouse, document) > 50
    finally:
        warehouse.close()


def test_a_warehouse_with_no_date_drafts_no_metrics_and_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import duckdb

    path = tmp_path / "penguins.duckdb"
    with duckdb.connect(str(path)) as connection:
        connection.execute("CREATE TABLE penguins (species VARCHAR, island VARCHAR, body_mass_g DOUBLE, year BIGINT)")
        connection.execute("INSERT INTO penguins VALUES ('Adelie', 'Biscoe', 3750, 2007), ('Gentoo', 'Biscoe', 5000, 2008)")
    code = run_cli(["model", "init", "--warehouse", f"duckdb:///{path}", "-o", str(tmp_path / "draft.yaml")])
    err = capsys.readouterr().err
    assert code == 0 and "drafted 0 metrics" in err
    assert "no metrics: a fact table needs a date" in err and "every question will ask" in err
