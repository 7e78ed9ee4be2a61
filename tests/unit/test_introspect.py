"""Drafting a semantic model from warehouse facts: key names, join guessing, naming, and which SQL each engine gets."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

import pytest

from memtool.semantic.catalog import Catalog
from memtool.semantic.compiler import IntentCompiler
from memtool.semantic.intent import Intent
from memtool.semantic.introspect import (
    ColumnFacts,
    ForeignKey,
    TableFacts,
    WarehouseFacts,
    draft_model,
    guess_joins,
    key_entity,
    read_catalog_facts,
    table_aliases,
    table_entity,
    to_yaml,
    type_family,
)
from memtool.sql.live_schema import LiveSchema
from memtool.sql.warehouse import QueryResult, WarehouseError


def col(name: str, data_type: str = "INTEGER", values: Sequence[str] | None = None) -> ColumnFacts:
    if values is None:
        return ColumnFacts(name, data_type)
    return ColumnFacts(name, data_type, distinct_count=len(values), values=tuple(sorted(values)))


def table(name: str, *columns: ColumnFacts, key: tuple[str, ...] = (), rows: int = 100) -> TableFacts:
    return TableFacts(name, columns, key, bool(key), rows)


def joins_of(tables: Sequence[TableFacts], foreign_keys: Sequence[ForeignKey] = ()) -> set[tuple[str, str, tuple[str, ...]]]:
    return {(j.left, j.right, tuple(j.on())) for j in guess_joins(tables, foreign_keys)}


# ---- key names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "entity"),
    [
        ("l_orderkey", "order"),
        ("o_orderkey", "order"),
        ("o_custkey", "cust"),
        ("c_nationkey", "nation"),
        ("ps_partkey", "part"),
        ("l_suppkey", "supp"),
        ("region_id", "region"),
        ("cust_key", "cust"),
        ("customer_id", "customer"),
        ("ss_item_sk", "item"),
        ("id", None),
        ("key", None),
        ("l_quantity", None),
        ("paid_at", None),
    ],
)
def test_a_key_column_names_its_entity_without_the_table_prefix(column: str, entity: str | None) -> None:
    assert key_entity(column) == entity


@pytest.mark.parametrize(
    ("name", "entity"), [("customers", "customer"), ("categories", "category"), ("dim_store", "store"), ("address", "address")]
)
def test_a_table_names_its_entity_in_the_singular(name: str, entity: str) -> None:
    assert table_entity(name) == entity


def test_types_fall_into_families_in_every_engines_spelling() -> None:
    assert {type_family(t) for t in ("DECIMAL(15,2)", "numeric", "BIGINT", "double precision", "int4")} == {"numeric"}
    assert {type_family(t) for t in ("VARCHAR", "character varying", "text", "bpchar", "CHAR(1)")} == {"text"}
    assert {type_family(t) for t in ("DATE", "timestamp without time zone", "TIMESTAMP WITH TIME ZONE")} == {"time"}
    assert type_family("BOOLEAN") == "boolean" and type_family("BLOB") == "other"


# ---- joins -------------------------------------------------------------------------------------


TPCH = [
    table("region", col("r_regionkey"), col("r_name", "VARCHAR", ["ASIA", "EUROPE"]), key=("r_regionkey",)),
    table("nation", col("n_nationkey"), col("n_name", "VARCHAR", ["CHINA", "FRANCE"]), col("n_regionkey"), key=("n_nationkey",)),
    table("customer", col("c_custkey", "BIGINT"), col("c_nationkey"), col("c_acctbal", "DECIMAL(15,2)"), key=("c_custkey",)),
    table("supplier", col("s_suppkey", "BIGINT"), col("s_nationkey"), key=("s_suppkey",)),
    table("part", col("p_partkey", "BIGINT"), col("p_brand", "VARCHAR", ["Brand#11"]), key=("p_partkey",)),
    table(
        "partsupp",
        col("ps_partkey", "BIGINT"),
        col("ps_suppkey", "BIGINT"),
        col("ps_supplycost", "DECIMAL(15,2)"),
        key=("ps_partkey", "ps_suppkey"),
    ),  # fmt: skip
    table(
        "orders",
        col("o_orderkey", "BIGINT"),
        col("o_custkey", "BIGINT"),
        col("o_orderdate", "DATE"),
        col("o_totalprice", "DECIMAL(15,2)"),
        col("o_orderpriority", "VARCHAR", ["1-URGENT", "2-HIGH"]),
        key=("o_orderkey",),
    ),  # fmt: skip
    table(
        "lineitem",
        col("l_orderkey", "BIGINT"),
        col("l_partkey", "BIGINT"),
        col("l_suppkey", "BIGINT"),
        col("l_linenumber"),
        col("l_quantity", "DECIMAL(15,2)"),
        col("l_extendedprice", "DECIMAL(15,2)"),
        col("l_shipdate", "DATE"),
        col("l_shipmode", "VARCHAR", ["AIR", "MAIL", "SHIP"]),
        key=("l_orderkey", "l_linenumber"),
    ),  # fmt: skip
]


def test_tpch_joins_are_guessed_from_prefixed_key_names() -> None:
    found = joins_of(TPCH)
    assert {
        ("lineitem", "orders", ("l_orderkey = o_orderkey",)),
        ("orders", "customer", ("o_custkey = c_custkey",)),
        ("customer", "nation", ("c_nationkey = n_nationkey",)),
        ("nation", "region", ("n_regionkey = r_regionkey",)),
        ("lineitem", "part", ("l_partkey = p_partkey",)),
        ("lineitem", "supplier", ("l_suppkey = s_suppkey",)),
        ("partsupp", "part", ("ps_partkey = p_partkey",)),
        ("partsupp", "supplier", ("ps_suppkey = s_suppkey",)),
        ("supplier", "nation", ("s_nationkey = n_nationkey",)),
        # lineitem names both columns of partsupp's composite key: TPC-H's own foreign key
        ("lineitem", "partsupp", ("l_partkey = ps_partkey", "l_suppkey = ps_suppkey")),
    } == found


def test_same_named_keys_abbreviations_and_generic_ids_join_the_one_side() -> None:
    tables = [
        table("dim_area", col("area_id"), col("area_name", "VARCHAR", ["East"]), key=("area_id",)),
        table("customers", col("id"), col("segment", "VARCHAR", ["a"]), key=("id",)),
        table("sales", col("sale_id"), col("area_id"), col("cust_key"), col("amount", "DECIMAL(12,2)"), key=("sale_id",)),
        table("visits", col("visit_id"), col("customer_id"), key=("visit_id",)),
    ]
    assert joins_of(tables) == {
        ("sales", "dim_area", ("area_id",)),
        ("sales", "customers", ("cust_key = id",)),  # an abbreviation of the table's entity
        ("visits", "customers", ("customer_id = id",)),
    }


def test_no_join_to_itself_from_a_whole_primary_key_across_types_or_on_a_tie() -> None:
    tables = [
        table("employee", col("employee_id"), col("manager_id"), key=("employee_id",)),
        table("employee_profile", col("employee_id"), col("bio", "VARCHAR"), key=("employee_id",)),  # one to one
        table("codes", col("code_key", "VARCHAR"), key=("code_key",)),
        table("events", col("event_id"), col("code_key"), key=("event_id",)),  # INTEGER vs VARCHAR
        table("store", col("id"), key=("id",)),
        table("stores", col("id"), key=("id",)),
        table("visits", col("visit_id"), col("store_id"), key=("visit_id",)),  # store or stores: a tie
    ]
    assert joins_of(tables) == set()


def test_declared_foreign_keys_win_over_names_for_the_table_that_declares_them() -> None:
    tables = [
        table("a", col("id"), key=("id",)),
        table("b", col("id"), key=("id",)),
        table("facts", col("fact_id"), col("ref"), col("b_id"), key=("fact_id",)),
        table("other", col("other_id"), col("b_id"), key=("other_id",)),
    ]
    declared = [ForeignKey("facts", ("ref",), "a", ("id",))]
    assert joins_of(tables, declared) == {("facts", "a", ("ref = id",)), ("other", "b", ("b_id = id",))}


# ---- names -------------------------------------------------------------------------------------


def test_aliases_are_short_unique_and_never_a_keyword() -> None:
    tables = [
        table("lineitem", col("l_orderkey"), col("l_qty")),
        table("ledger", col("l_id"), col("l_amount")),
        table("order_summary", col("id")),
        table("on_site", col("id")),  # initials "os" are taken; "as" would be a keyword
        table("all_sales", col("id")),
    ]
    aliases = table_aliases(tables)
    assert aliases["lineitem"] == "l" and aliases["ledger"] == "l2" and aliases["order_summary"] == "os"
    assert aliases["on_site"] == "os2" and aliases["all_sales"] == "as2"
    assert len(set(aliases.values())) == len(tables)


def facts_of(*tables: TableFacts, foreign_keys: Sequence[ForeignKey] = (), cap: int = 50) -> WarehouseFacts:
    return WarehouseFacts("duckdb", None, tables, tuple(foreign_keys), cap)


def test_same_named_columns_of_two_tables_become_dimensions_prefixed_with_their_table() -> None:
    facts = facts_of(
        table("customer", col("customer_id"), col("name", "VARCHAR", ["Ann", "Bo"]), key=("customer_id",)),
        table("supplier", col("supplier_id"), col("name", "VARCHAR", ["Acme"]), key=("supplier_id",)),
        table(
            "purchase",
            col("purchase_id"),
            col("customer_id"),
            col("supplier_id"),
            col("bought_on", "DATE"),
            col("amount", "DECIMAL(12,2)"),
            col("month", "VARCHAR", ["Jan"]),
            key=("purchase_id",),
        ),  # fmt: skip
    )
    document = draft_model(facts, name="shop")
    model = Catalog.model_validate(document)
    names = {d.name for d in model.attribute_dimensions}
    # both "name"s keep their table; a column named like a time grain does not shadow the grain
    assert names == {"customer_name", "supplier_name", "purchase_month"}
    assert {d.name for d in model.time_dimensions} == {"day", "week", "month", "quarter", "year"}
    assert {m.name for m in model.metrics} == {"amount", "avg_amount", "purchase_count"}  # a sum has its average beside it
    assert model.metric("avg_amount").expression == "AVG(p.amount)" and not model.metric("avg_amount").additive
    assert model.metric("amount").kind == "money" and model.metric("amount").expression == "SUM(p.amount)"
    assert set(model.metric("amount").dimensions) == {*names, "day", "week", "month", "quarter", "year"}
    assert {d.label("en") for d in model.attribute_dimensions} == {"customer name", "supplier name", "month"}


def test_a_fact_without_a_date_of_its_own_takes_one_reachable_by_joins() -> None:
    facts = facts_of(*TPCH)
    document = draft_model(facts, name="tpch")
    model = Catalog.model_validate(document)
    assert {s.name: s.time_column for s in model.sources} == {"orders": "o_orderdate", "lineitem": "l_shipdate"}
    # customer, supplier and partsupp have measures but reach no date: not facts, and the description says so
    assert "left out as facts: customer, partsupp." in model.description
    assert "DRAFT" in model.description and model.model_version == "draft"
    # a lineitem without a shipdate would read the order's date
    lineitem = next(t for t in TPCH if t.name == "lineitem")
    undated = TableFacts("lineitem", tuple(c for c in lineitem.columns if c.name != "l_shipdate"), lineitem.primary_key, True, 10)
    model = Catalog.model_validate(draft_model(facts_of(*[t for t in TPCH if t.name != "lineitem"], undated), name="tpch"))
    assert model.source("lineitem").time_column == "orders.o_orderdate"
    sql = IntentCompiler(model).compile(Intent(metric="l_extendedprice", dimensions=("month", "r_name"))).sql
    assert "DATE_TRUNC('month', o.o_orderdate)" in sql and "JOIN region AS r ON r.r_regionkey = n.n_regionkey" in sql


def test_dimensions_keep_low_cardinality_text_and_cap_their_values() -> None:
    many = [f"v{i:02d}" for i in range(12)]
    facts = facts_of(
        table("item", col("item_id"), col("colour", "VARCHAR", many[:3]), col("sku", "VARCHAR", many), key=("item_id",)),
        table(
            "sale",
            col("sale_id"),
            col("item_id"),
            col("sold_at", "TIMESTAMP"),
            col("qty"),
            col("note_text", "VARCHAR", ["x"]),
            col("detail", "VARCHAR", ["a long free text value " * 3]),
            key=("sale_id",),
        ),  # fmt: skip
        cap=20,
    )
    document = draft_model(facts, name="shop", max_values=10)
    model = Catalog.model_validate(document)
    # notes and long texts are free text, not categories
    assert {d.name for d in model.attribute_dimensions} == {"colour", "sku"}
    # sku has 12 values (> 10): a dimension all the same, its values looked up in the warehouse, none listed
    sku = model.dimension("sku")
    assert sku.max_values == 10 and sku.index_values and "looked up in the warehouse" in sku.definition("en")
    assert model.dimension("colour").max_values == 10_000
    assert [(v.dimension, v.values) for v in model.entity_values] == [("colour", ("v00", "v01", "v02"))]
    assert model.metric("qty").kind == "count"


def test_the_yaml_has_a_curation_header_and_parses_back_to_the_same_model() -> None:
    document = draft_model(facts_of(*TPCH), name="tpch")
    text = to_yaml(document)
    assert text.startswith("# A DRAFT semantic model")
    for word in ("synonyms_zh", "definition_zh", "ambiguous_terms", "unsupported_terms", "exclusions", "details"):
        assert word in text.split("format:")[0]
    from memtool.semantic.catalog import parse_model

    assert parse_model(text) == Catalog.model_validate(document)


# ---- which SQL each engine gets ----------------------------------------------------------------


class RecordingWarehouse:
    """A warehouse that answers the introspection queries from canned tables and records every SQL."""

    def __init__(self, dialect: str, *, refuse_constraints: bool = False) -> None:
        self._dialect = dialect
        self.refuse_constraints = refuse_constraints
        self.calls: list[tuple[str, list[Any] | None]] = []

    @property
    def dialect(self) -> str:
        return self._dialect

    def describe(self, *, refresh: bool = False) -> LiveSchema:
        raise AssertionError("introspection reads its own columns query")

    def run(self, sql: str, *, max_rows: int, timeout_seconds: float, params: Sequence[Any] | None = None) -> QueryResult:
        self.calls.append((sql, None if params is None else list(params)))
        lowered = sql.lower()
        if "information_schema.columns" in lowered or "svv_columns" in lowered:
            rows: list[list[Any]] = [
                ["region", "region_id", "integer"],
                ["region", "region_name", "character varying"],
                ["region", "Bad Name", "integer"],
                ["sales", "sale_id", "integer"],
                ["sales", "region_id", "integer"],
                ["sales", "amount", "numeric"],
                ["sales", "sold_on", "date"],
            ]
        elif "referential_constraints" in lowered or "table_constraints" in lowered:
            if self.refuse_constraints:
                raise WarehouseError("permission denied for information_schema", code="permission", sql=sql)
            rows = [["region", "region_id"], ["sales", "sale_id"]] if "primary key" in lowered else []
        elif lowered.startswith("select min("):
            width = lowered.split(" from ")[0].count("min(")
            rows = [[1, 10] * width if "region" in lowered else [1, 99] * width]
        elif "select distinct" in lowered:
            rows = [["East"], ["West"]]
        elif lowered.startswith("select count(distinct"):
            rows = [[2, 2] if "region" in lowered else [10, 10]]
        elif lowered.startswith("select count(*) from"):
            rows = [[2 if "region" in lowered else 10]]
        else:
            raise AssertionError(f"unexpected SQL: {sql}")
        return QueryResult(columns=["c"] * (len(rows[0]) if rows else 1), rows=rows, row_count=len(rows), truncated=False, elapsed_ms=0.1)


def test_redshift_columns_come_from_svv_columns_and_keys_pair_by_ordinal_position() -> None:
    warehouse = RecordingWarehouse("redshift")
    facts = read_catalog_facts(warehouse, schema="sales_mart")
    columns_sql, params = warehouse.calls[0]
    assert "FROM svv_columns" in columns_sql and "information_schema.columns" not in columns_sql
    assert "table_schema = %s" in columns_sql and params == ["sales_mart"]
    foreign = next(sql for sql, _ in warehouse.calls if "referential_constraints" in sql)
    assert "pk.ordinal_position = kcu.ordinal_position" in foreign and "position_in_unique_constraint" not in foreign
    # identifiers are quoted and schema-qualified in the internal queries
    assert any(sql == 'SELECT COUNT(*) FROM "sales_mart"."sales"' for sql, _ in warehouse.calls)
    assert facts.table("region").primary_key == ("region_id",) and facts.table("region").primary_key_declared
    assert facts.skipped == ("region.Bad Name",)
    model = Catalog.model_validate(draft_model(facts, name="mart"))
    assert model.table("sales").physical == "sales_mart.sales"
    assert [(j.left, j.right, j.on) for j in model.joins] == [("sales", "region", ("region_id",))]


@pytest.mark.parametrize("dialect", ["duckdb", "postgres"])
def test_duckdb_and_postgres_read_information_schema_in_the_current_schema(dialect: str) -> None:
    warehouse = RecordingWarehouse(dialect)
    read_catalog_facts(warehouse)
    columns_sql, params = warehouse.calls[0]
    assert "FROM information_schema.columns" in columns_sql and "svv_columns" not in columns_sql
    assert "table_schema = current_schema()" in columns_sql and params is None
    foreign = next(sql for sql, _ in warehouse.calls if "referential_constraints" in sql)
    assert "pk.ordinal_position = kcu.position_in_unique_constraint" in foreign


def test_constraints_an_engine_refuses_leave_a_note_and_keys_inferred_from_the_data() -> None:
    warehouse = RecordingWarehouse("postgres", refuse_constraints=True)
    facts = read_catalog_facts(warehouse)
    assert facts.notes and "permission" in facts.notes[0]
    # no declared key: region_id is its first key-named column, unique in the (fake) data
    uniqueness = [sql for sql, _ in warehouse.calls if "COUNT(DISTINCT" in sql]
    assert uniqueness and facts.table("region").primary_key == ("region_id",)
    assert not facts.table("region").primary_key_declared


# ---- drafts that are right or say they do not know (issue 22, item 2) ---------------------------


def ranged(name: str, data_type: str, low: Any, high: Any) -> ColumnFacts:
    return ColumnFacts(name, data_type, low=low, high=high)


FLIGHTS = [
    table("airlines", col("carrier", "VARCHAR", ["AA", "UA"]), col("name", "VARCHAR", ["American", "United"]), key=("carrier",)),
    table("planes", col("tailnum", "VARCHAR", ["N1", "N2"]), ranged("year", "INTEGER", 1956, 2013), ranged("seats", "INTEGER", 2, 450),
          key=("tailnum",)),
    table("airports", col("faa", "VARCHAR", ["EWR", "JFK"]), col("name", "VARCHAR", ["Newark", "Kennedy"]),
          ranged("lat", "DOUBLE", 19.7, 72.3), key=("faa",)),
    table(
        "flights",
        ranged("year", "INTEGER", 2013, 2013), ranged("month", "INTEGER", 1, 12), ranged("day", "INTEGER", 1, 31),
        ranged("dep_time", "INTEGER", 1, 2400), ranged("dep_delay", "DOUBLE", -43, 1301), ranged("arr_delay", "DOUBLE", -86, 1272),
        col("carrier", "VARCHAR", ["AA", "UA"]), ranged("flight", "INTEGER", 1, 8500), col("tailnum", "VARCHAR", ["N1", "N2"]),
        ColumnFacts("dest", "VARCHAR", distinct_count=105, mean_length=3.0),
        ranged("air_time", "DOUBLE", 20, 695), ranged("distance", "DOUBLE", 17, 4983), ranged("hour", "INTEGER", 1, 23),
        ranged("time_hour", "TIMESTAMP", datetime(2013, 1, 1, 5), datetime(2013, 12, 31, 23)),
        ranged("flight_share", "DOUBLE", 0.0, 0.8), ranged("pilot_birthdate", "DATE", date(1950, 1, 1), date(1990, 1, 1)),
        rows=336_776,
    ),
]  # fmt: skip


def test_a_column_named_as_another_tables_unique_key_joins_it_text_keys_included() -> None:
    assert joins_of(FLIGHTS) == {("flights", "airlines", ("carrier",)), ("flights", "planes", ("tailnum",))}
    # <table>_<key> names the key too; a generic word never joins by name alone
    tables = [
        table("airlines", col("carrier", "VARCHAR"), key=("carrier",)),
        table("kinds", col("name", "VARCHAR"), key=("name",)),
        table("legs", col("leg_id"), col("airline_carrier", "VARCHAR"), col("name", "VARCHAR"), key=("leg_id",)),
    ]
    assert joins_of(tables) == {("legs", "airlines", ("airline_carrier = carrier",))}


def test_a_composite_unique_key_is_joined_by_its_column_names_and_a_tie_is_left_out() -> None:
    tables = [
        table("bakers", col("series"), col("baker", "VARCHAR"), key=("series", "baker")),
        table("ratings", col("series"), col("episode"), key=("series", "episode")),
        table("episodes", col("series"), col("episode"), key=("series", "episode")),  # one to one with ratings
        table("challenges", col("series"), col("episode"), col("baker", "VARCHAR"), key=("series", "episode", "baker")),
    ]
    # challenges names both ratings' and episodes' key: which one is a guess, so neither
    assert joins_of(tables) == {("challenges", "bakers", ("series", "baker"))}


def flights_model(today: date = date(2026, 12, 2)) -> tuple[dict[str, Any], Catalog]:
    document = draft_model(facts_of(*FLIGHTS), name="flights", today=today)
    return document, Catalog.model_validate(document)


def test_each_fact_has_a_row_count_named_in_words_with_the_zh_label_left_in_english() -> None:
    _, model = flights_model()
    count = model.metric("flights_count")
    assert count.expression == "COUNT(*)" and count.kind == "count"
    assert count.en == "number of flights" and count.zh == "number of flights" and not count.synonyms_zh
    assert {"how many flights", "flight count"} <= set(count.synonyms_en) and "flights" not in count.synonyms_en


def test_delays_and_times_are_averaged_and_calendar_parts_keys_and_codes_never_summed() -> None:
    _, model = flights_model()
    metrics = {m.name: m for m in model.metrics if m.source == "flights"}
    # year, month, day, hour, the flight's own number, the join keys and the birthday are not measures
    assert set(metrics) == {"flights_count", "dep_time", "dep_delay", "arr_delay", "air_time", "distance", "avg_distance", "flight_share"}
    assert {n: m.expression.split("(")[0] for n, m in metrics.items()} == {
        "flights_count": "COUNT", "dep_time": "AVG", "dep_delay": "AVG", "arr_delay": "AVG", "air_time": "AVG",
        "distance": "SUM", "avg_distance": "AVG", "flight_share": "AVG",
    }  # fmt: skip
    assert not metrics["arr_delay"].additive and metrics["distance"].additive
    # a DOUBLE is rounded to 2 (decimal), a fraction to 4 (ratio), a whole number not at all
    assert (metrics["arr_delay"].kind, metrics["distance"].kind, metrics["flight_share"].kind) == ("decimal", "decimal", "ratio")
    assert model.metric("arr_delay").label("en") == "average arr delay" and "average arr delay" in metrics["arr_delay"].synonyms_en
    sql = IntentCompiler(model).compile(Intent(metric="distance", dimensions=("carrier",))).sql
    assert "ROUND(SUM(f.distance), 2)" in sql
    assert "ROUND(AVG(f.arr_delay), 2)" in IntentCompiler(model).compile(Intent(metric="arr_delay")).sql
    # planes.year is a calendar part and lat a coordinate: planes has no measure at all
    assert not any(m.source == "planes" for m in model.metrics)


@pytest.mark.parametrize(
    ("table_name", "column", "data_type", "low", "high", "aggregate"),
    [
        ("sales", "temperature", "DOUBLE", -20, 40, "AVG"),
        ("sales", "unit_price", "DECIMAL(10,2)", 1, 99, "AVG"),
        ("sales", "profit", "DECIMAL(10,2)", -500, 900, "SUM"),  # money may be negative and still adds up
        ("sales", "margin_change", "DOUBLE", -3.5, 2.0, "AVG"),  # negative values: not additive
        ("sales", "discount", "DOUBLE", 0.0, 0.3, "AVG"),  # a fraction
        ("sales", "total_time", "DOUBLE", 0, 100, "SUM"),
        ("sales", "num_items", "INTEGER", 0, 12, "SUM"),
        ("sales", "order_number", "INTEGER", 1, 90_000, None),
        ("sales", "zip_code", "INTEGER", 10_000, 99_999, None),
        ("sales", "fiscal_quarter", "INTEGER", 1, 4, None),
        ("sales", "imdbRating", "DOUBLE", 1.0, 9.8, "AVG"),
        ("sales", "season", "INTEGER", 1, 12, None),
        ("sales", "star_awards", "INTEGER", 0, 0, None),  # one value in every row: nothing to measure
        ("polls", "rawpoll_clinton", "DOUBLE", 11.04, 88.0, "AVG"),  # a level between 0 and 100: a poll number
        ("ratings", "viewers_7day", "DOUBLE", 2.24, 15.9, "AVG"),  # an audience in millions, per episode
        ("polls", "samplesize", "DOUBLE", 35.0, 84_292.0, "SUM"),  # beyond 100: an amount
        ("sales", "wins", "INTEGER", 0, 5, "SUM"),  # whole numbers in [0, 100] are counts
        ("sales", "weight_total", "DOUBLE", 0.5, 80.0, "SUM"),  # named a total
    ],
)
def test_how_a_numeric_column_is_measured(table_name: str, column: str, data_type: str, low: Any, high: Any, aggregate: str | None) -> None:
    from memtool.semantic.introspect import measure_of

    found = measure_of(table(table_name, ranged(column, data_type, low, high)), ranged(column, data_type, low, high))
    assert (found.aggregate if found else None) == aggregate


def test_high_cardinality_text_is_a_dimension_whose_other_values_the_warehouse_is_asked_about() -> None:
    _, model = flights_model()
    dest = model.dimension("dest")
    assert dest.max_values == 50 and dest.index_values and "dest" not in {v.dimension for v in model.entity_values}
    # the fact's own text join keys are dimensions (no join needed); the one side's key is not
    assert {"carrier", "tailnum", "dest"} <= {d.name for d in model.attribute_dimensions}
    assert model.dimension("carrier").table == "flights"


def test_a_data_set_that_ended_long_ago_is_read_as_of_its_end_and_the_header_says_so() -> None:
    document, model = flights_model()
    assert model.source("flights").time_column == "time_hour"  # the birthday never dates a flight
    assert model.as_of == date(2014, 1, 1) and model.default_window == "all"
    assert "The data ends on 2013-12-31" in model.description
    text = to_yaml(document)
    header = text.split("format:")[0]
    assert "as_of" in header and "default_window: all" in header
    assert "&id" not in text and "*id" not in text  # every list spelled out, for a person to edit
    # a warehouse loaded up to last month is read as of today, with the recent default
    recent, model = flights_model(today=date(2014, 1, 20))
    assert model.as_of is None and model.default_window == "recent" and "as_of" not in to_yaml(recent).split("format:")[0]


def test_a_date_is_borrowed_from_a_header_table_never_from_a_plain_dimension() -> None:
    facts = facts_of(
        table("bakers", col("series"), col("baker", "VARCHAR", ["Ann"]), ranged("first_aired", "DATE", date(2010, 8, 1), date(2019, 8, 1)),
              ranged("age", "INTEGER", 17, 71), key=("series", "baker")),
        table("challenges", col("series"), col("episode"), col("baker", "VARCHAR", ["Ann"]), ranged("score", "DOUBLE", 1, 13),
              key=("series", "episode", "baker")),
    )  # fmt: skip
    model = Catalog.model_validate(draft_model(facts, name="bakeoff", today=date(2026, 1, 1)))
    # counting challenges by their baker's first episode would answer a period wrongly: not a fact
    assert {s.name for s in model.sources} == {"bakers"}
    assert "left out as facts: challenges" in model.description
    assert model.metric("age").expression == "AVG(b.age)" and model.metric("bakers_count").en == "number of bakers"


# ---- numbers that number things, and the words people use for measures -------------------------

SHOW = [
    table("bakers", ranged("series", "BIGINT", 1, 10), col("baker", "VARCHAR", ["Ann", "Bo"]), ranged("age", "BIGINT", 17, 71),
          ranged("first_date_appeared", "DATE", date(2010, 8, 17), date(2019, 10, 29)), key=("series", "baker"), rows=120),
    table("ratings", ranged("series", "BIGINT", 1, 10), ranged("episode", "BIGINT", 1, 10), ranged("episode_count", "BIGINT", 1, 94),
          ranged("uk_airdate", "DATE", date(2010, 8, 17), date(2019, 10, 29)), ranged("viewers_7day", "DOUBLE", 2.24, 15.9),
          ranged("requests", "BIGINT", 100, 900_000), key=("series", "episode"), rows=94),
]  # fmt: skip


def show_planner() -> Any:
    from memtool.planning.rule_planner import RulePlanner
    from memtool.semantic.entities import EntityIndex

    model = Catalog.model_validate(draft_model(facts_of(*SHOW), name="show", today=date(2026, 12, 2)))
    return model, RulePlanner(model, EntityIndex.static(model), date(2026, 12, 2))


def test_a_numbering_is_never_measured_and_small_numbered_columns_are_dimensions() -> None:
    model, _ = show_planner()
    assert not [m.name for m in model.metrics if "episode_count" in m.expression]  # 1 .. 94 over 94 rows: a numbering
    numbered = {d.name: d for d in model.attribute_dimensions if d.column in ("series", "episode")}
    assert set(numbered) == {"bakers_series", "ratings_series", "episode"}
    assert "series" in numbered["bakers_series"].nouns_en and "series" in numbered["ratings_series"].nouns_en
    assert "whole numbers 1 to 10" in (numbered["episode"].definition_en or "")
    assert not [e for e in model.entity_values if e.dimension in numbered]  # "top 5" is never series 5


def test_a_sum_has_its_average_and_a_qualifier_is_said_first() -> None:
    model, planner = show_planner()
    assert model.metric("requests").expression == "SUM(r.requests)" and model.metric("avg_requests").expression == "AVG(r.requests)"
    assert {"average 7-day viewers", "average 7 day viewers"} <= set(model.metric("viewers_7day").synonyms_en)
    plan = planner.plan("Average 7-day viewers by series")
    assert plan.status == "planned" and plan.intent is not None, plan
    assert (plan.intent.metric, plan.intent.dimensions) == ("viewers_7day", ("ratings_series",))  # the noun its metric has
    plan = planner.plan("average age by series")
    assert plan.status == "planned" and plan.intent is not None, plan
    assert (plan.intent.metric, plan.intent.dimensions) == ("age", ("bakers_series",))
    plan = planner.plan("average requests")
    assert plan.status == "planned" and plan.intent is not None and plan.intent.metric == "avg_requests", plan


def test_a_facts_bare_noun_beside_its_measure_is_the_scope_not_a_second_metric() -> None:
    from memtool.planning.rule_planner import RulePlanner
    from memtool.semantic.entities import EntityIndex

    document = draft_model(facts_of(*SHOW), name="show", today=date(2026, 12, 2))
    count = next(m for m in document["metrics"] if m["name"] == "bakers_count")
    count["synonyms_en"] = [*count["synonyms_en"], "bakers"]  # as a curator writes it
    model = Catalog.model_validate(document)
    planner = RulePlanner(model, EntityIndex.static(model), date(2026, 12, 2))

    plan = planner.plan("average age of the bakers")
    assert plan.status == "planned" and plan.intent is not None and plan.intent.metric == "age", plan
    plan = planner.plan("number of bakers and average age")  # a counting word: two metrics, asked about
    assert plan.status == "needs_clarification", plan
    plan = planner.plan("bakers and average age")  # not joined to the measure: two metrics, asked about
    assert plan.status == "needs_clarification", plan


# ---- values spelled as English words (a review on a hotel bookings data set) ---------------------

HOTEL = [
    table("stays", ranged("arrival_date", "DATE", date(2016, 7, 1), date(2017, 8, 31)),
          col("country", "VARCHAR", ["and", "are", "esp", "gbr"]), col("room_type", "VARCHAR", ["a", "b", "i"]),
          col("market_segment", "VARCHAR", ["direct", "groups"]), col("customer_type", "VARCHAR", ["group", "transient"]),
          col("grade", "VARCHAR", ["A", "A+", "B"]), ranged("lead_time", "DOUBLE", 0, 600), rows=15_402),
]  # fmt: skip


def hotel_plan(question: str) -> Any:
    from memtool.planning.rule_planner import RulePlanner
    from memtool.semantic.entities import EntityIndex

    model = Catalog.model_validate(draft_model(facts_of(*HOTEL), name="hotel", today=date(2026, 12, 8)))
    return RulePlanner(model, EntityIndex.static(model), date(2026, 12, 8)).plan(question, route="nl2sql_query")


def filters(plan: Any) -> list[tuple[str, tuple[str, ...]]]:
    assert plan.status == "planned" and plan.intent is not None, plan
    return [(f.dimension, f.values) for f in plan.intent.filters]


@pytest.mark.parametrize(
    "question",
    ["average lead time by market segment and customer type", "What is the average lead time?",
     "What are the average lead times by market segment?", "average lead time as of now by country"],
)  # fmt: skip
def test_a_value_spelled_as_an_english_word_is_the_word(question: str) -> None:
    assert filters(hotel_plan(question)) == []  # not country 'and' / 'are', not room type 'i' (+s) or 'a'


def test_such_a_value_counts_beside_its_dimension_and_the_exact_value_beats_a_plural() -> None:
    assert filters(hotel_plan("average lead time for country and")) == [("country", ("and",))]
    assert filters(hotel_plan("average lead time for room type i")) == [("room_type", ("i",))]
    assert filters(hotel_plan("average lead time for gbr and esp")) == [("country", ("gbr", "esp"))]
    assert filters(hotel_plan("average lead time for groups")) == [("market_segment", ("groups",))]  # not customer type group + s
    assert filters(hotel_plan("average lead time with a grade of B")) == [("grade", ("B",))]  # "a grade": an article


def test_the_calendar_groups_in_both_languages_in_a_draft_and_in_a_model_that_lists_no_words() -> None:
    from memtool.planning.rule_planner import RulePlanner
    from memtool.semantic.entities import EntityIndex

    document = draft_model(facts_of(*HOTEL), name="hotel", today=date(2026, 12, 8))
    month = next(d for d in document["dimensions"] if d["name"] == "month")
    assert {"by month", "monthly"} <= set(month["group_terms_en"]) and "每月" in month["group_terms_zh"] and month["zh"] == "月"
    for dimension in document["dimensions"]:  # a curated model may list none: the calendar's words still group
        if dimension["kind"] == "time":
            for key in ("group_terms_zh", "group_terms_en", "nouns_zh", "nouns_en"):
                dimension.pop(key)
    model = Catalog.model_validate(document)
    planner = RulePlanner(model, EntityIndex.static(model), date(2026, 12, 8))
    for question, grain in [("average lead time by month", "month"), ("monthly average lead time", "month"),
                            ("average lead time per year", "year"), ("按月统计average lead time", "month")]:  # fmt: skip
        plan = planner.plan(question, route="nl2sql_query")
        assert plan.status == "planned" and plan.intent is not None and plan.intent.dimensions == (grain,), (question, plan)


SERIES = [
    table("economics", ranged("date", "DATE", date(1967, 7, 1), date(2015, 4, 1)), ranged("unemploy", "DOUBLE", 2685, 15352),
          ranged("pop", "DOUBLE", 198712, 320887), rows=574),  # one row per month, 1967-07 to 2015-04
]  # fmt: skip


def test_a_series_of_one_row_per_month_is_averaged_and_its_total_is_asked_about() -> None:
    from memtool.planning.rule_planner import RulePlanner
    from memtool.semantic.entities import EntityIndex

    model = Catalog.model_validate(draft_model(facts_of(*SERIES), name="economics", today=date(2026, 12, 8)))
    assert model.metric("unemploy").expression == "AVG(e.unemploy)" and not model.metric("unemploy").additive
    assert not any(m.name.startswith("avg_") for m in model.metrics)  # no sum to stand beside
    assert "one row per month" in (model.metric("unemploy").definition_en or "")
    planner = RulePlanner(model, EntityIndex.static(model), date(2026, 12, 8))
    plan = planner.plan("What was unemploy in 2010?")
    assert plan.status == "planned" and plan.intent is not None and plan.intent.metric == "unemploy", plan
    total = planner.plan("What is the total unemploy?")  # "total" of a level: asked, not dropped
    assert total.status == "needs_clarification" and total.clarification is not None
    assert total.clarification.reason == "total_of_a_level" and total.clarification.options == ["average unemploy"]
    for question in ("Which month had the highest unemploy?", "哪个月的unemploy最高？"):
        ranked = planner.plan(question)
        assert ranked.status == "planned" and ranked.intent is not None, ranked
        assert ranked.intent.dimensions == ("month",) and ranked.intent.order == "desc"


def test_what_is_the_average_asks_for_a_number_and_what_is_x_for_a_definition() -> None:
    from memtool.planning.routes import classify_route

    model = Catalog.model_validate(draft_model(facts_of(*HOTEL), name="hotel", today=date(2026, 12, 8)))
    assert classify_route("What is the average lead time?", catalog=model) == "kpi_lookup"
    assert classify_route("What's the total number of stays?", catalog=model) == "kpi_lookup"
    assert classify_route("What is lead time?", catalog=model) == "business_knowledge_qa"


def test_a_word_where_a_value_goes_is_looked_up_or_asked_about_never_dropped() -> None:
    import dataclasses

    from memtool.planning.rule_planner import RulePlanner
    from memtool.semantic.entities import EntityIndex

    stays = table("stays", ranged("arrival_date", "DATE", date(2016, 7, 1), date(2017, 8, 31)),
                  ColumnFacts("country", "VARCHAR", distinct_count=166, mean_length=3.0), rows=15_402)  # fmt: skip
    model = Catalog.model_validate(draft_model(facts_of(stays), name="hotel", today=date(2026, 12, 8)))
    held = {"prt", "usa"}  # what the warehouse holds past the index, asked one value at a time
    asked: list[str] = []

    def probe(dimension: str, value: str) -> bool:
        asked.append(value)
        return dimension == "country" and value in held

    index = dataclasses.replace(EntityIndex.static(model), probe=probe)
    planner = RulePlanner(model, index, date(2026, 12, 8))
    plan = planner.plan("Number of stays from prt", route="nl2sql_query")
    assert plan.status == "planned" and plan.intent is not None, plan
    assert [(f.dimension, f.values) for f in plan.intent.filters] == [("country", ("prt",))] and "prt" in asked
    unknown = planner.plan("Number of stays for xyz", route="nl2sql_query")
    assert unknown.status == "needs_clarification" and unknown.clarification is not None and unknown.clarification.term == "xyz"
