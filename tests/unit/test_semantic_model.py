"""The semantic model is data: its format, its JSON Schema, and a library that knows no warehouse."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from memtool.semantic.catalog import Catalog, load_catalog, model_problems, parse_model
from memtool.semantic.compiler import CompileError, IntentCompiler
from memtool.semantic.intent import Filter, Intent

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = [ROOT / "layers" / "core" / "memtool", ROOT / "functions"]
DEMO_MODEL = ROOT / "layers" / "core" / "memtool" / "sql" / "demo_model.yaml"
# The demo-warehouse generator and its model file are the only library files that may name its tables.
DEMO_FILES = {ROOT / "layers" / "core" / "memtool" / "sql" / "demo_warehouse.py", DEMO_MODEL}
SCHEMA_FILE = ROOT / "docs" / "semantic-model.schema.json"


def demo_document() -> dict:
    return yaml.safe_load(DEMO_MODEL.read_text(encoding="utf-8"))


def test_no_demo_table_name_in_the_library_outside_the_demo_generator_and_its_model() -> None:
    tables = [t["name"] for t in demo_document()["tables"]] + [t["table"] for t in demo_document()["tables"] if t.get("table")]
    assert len(tables) >= 6
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, tables)) + r")\b")
    offenders = []
    for root in LIBRARY:
        for path in root.rglob("*"):
            if not path.is_file() or "__pycache__" in path.parts or path in DEMO_FILES:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            offenders += [f"{path.relative_to(ROOT)}:{n}" for n, line in enumerate(text.splitlines(), 1) if pattern.search(line)]
    assert offenders == []


def test_the_grep_would_find_a_demo_table_name(tmp_path: Path) -> None:
    # the check above is not vacuous: the same pattern finds a name where one is
    tables = [t["name"] for t in demo_document()["tables"]]
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, tables)) + r")\b")
    assert pattern.search(f"SELECT 1 FROM {tables[0]}") and not pattern.search(f"SELECT 1 FROM {tables[0]}_archive")


def test_the_demo_model_loads_from_yaml_and_json_alike() -> None:
    from_yaml = load_catalog()
    from_json = parse_model(json.dumps(demo_document(), ensure_ascii=False))
    assert from_yaml == from_json
    assert from_yaml.format == "memtool.semantic-model/1"
    assert {"fact_order_line", "dim_region"} <= set(from_yaml.physical_tables)


def test_the_json_schema_in_docs_is_the_models() -> None:
    """docs/semantic-model.schema.json is generated: `python -m memtool.semantic.catalog --schema`."""
    assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8")) == Catalog.model_json_schema()


def test_the_demo_model_validates_against_its_json_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(demo_document(), Catalog.model_json_schema())


def test_a_model_naming_what_it_lacks_lists_every_problem_with_its_place() -> None:
    document = demo_document()
    document["metrics"][0]["source"] = "nowhere"
    document["joins"][0]["right"] = "dim_nothing"
    document["dimensions"][0]["table"] = "dim_nothing"
    with pytest.raises(ValueError) as error:
        Catalog.model_validate(document)
    text = str(error.value)
    assert "metrics[0] (gross_revenue).source: unknown source 'nowhere'" in text
    assert "joins[0] names unknown table 'dim_nothing'" in text
    assert "dimensions[0] (region).table: unknown table 'dim_nothing'" in text
    assert model_problems(load_catalog()) == []


def test_joins_are_found_along_the_model_over_several_hops() -> None:
    document = {
        "model_version": "1",
        "tables": [
            {"name": "lines", "table": "sales.lines", "alias": "l", "columns": {"order_key": "INT", "amount": "DECIMAL"}},
            {"name": "orders", "alias": "o", "columns": {"order_key": "INT", "cust_key": "INT", "ordered_on": "DATE"}},
            {"name": "customers", "alias": "c", "columns": {"cust_key": "INT", "country_key": "INT"}},
            {"name": "countries", "alias": "n", "columns": {"country_key": "INT", "country": "VARCHAR"}},
        ],
        "joins": [
            {"left": "lines", "right": "orders", "on": ["order_key"]},
            {"left": "orders", "right": "customers", "on": ["cust_key"]},
            {"left": "customers", "right": "countries", "on": ["country_key = country_key"]},
        ],
        "sources": [{"name": "line", "table": "lines", "time_column": "orders.ordered_on"}],
        "metrics": [
            {"name": "sales", "zh": "销售额", "en": "sales", "kind": "money", "source": "line", "expression": "SUM(l.amount)",
             "filters": ["l.amount > 0"], "dimensions": ["country", "year"]},
        ],
        "dimensions": [
            {"name": "country", "kind": "attribute", "zh": "国家", "en": "country", "table": "countries", "column": "country"},
            {"name": "year", "kind": "time", "zh": "年", "en": "year", "grain": "year"},
        ],
        "currency": "USD",
    }  # fmt: skip
    model = Catalog.model_validate(document)
    assert model.physical_tables == ("sales.lines", "orders", "customers", "countries")
    query = IntentCompiler(model).compile(
        Intent(metric="sales", dimensions=("country", "year"), filters=(Filter(dimension="country", values=("FRANCE",)),))
    )
    assert query.columns == ("country", "year", "sales") and query.unit == "USD"
    sql = query.sql
    assert "FROM sales.lines AS l" in sql
    assert "JOIN orders AS o ON o.order_key = l.order_key" in sql
    assert "JOIN customers AS c ON c.cust_key = o.cust_key" in sql
    assert "JOIN countries AS n ON n.country_key = c.country_key" in sql
    assert "DATE_TRUNC('year', o.ordered_on)" in sql and "l.amount > 0" in sql and "n.country IN ('FRANCE')" in sql

    document["joins"] = document["joins"][:2]  # no way to the countries any more
    with pytest.raises(CompileError, match="no join path from lines to countries"):
        IntentCompiler(Catalog.model_validate(document)).compile(Intent(metric="sales", dimensions=("country",)))
