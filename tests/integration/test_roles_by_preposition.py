"""Roles by preposition (issue 22, item 3), and values looked up past an index's cap (item 2).

One airports table plays two roles, the origin and the destination of a flight: two model tables
over one physical table, the destination with ``index_values: false`` (its values are the origin's).
The words around a value pick the role ("from JFK", "从EWR出发": the origin; "to LAX", "飞往LAX":
the destination) without any role words in the model: the common pairs apply by the dimensions'
names and nouns. A value named with no role word is asked about. With more airports than the
origin's ``max_values``, a value the index lacks is looked up in the warehouse (a bound, cached
probe) where a role word or noun names the dimension, and a word it does not hold is asked about.

TPC-H's customer and supplier nations are the other case: its model declares role words
(``role_words_en``/``role_words_zh``: "shipped from", 从 for a supplier; "to", 卖到 for a customer).

Every answered case is run and compared with hand-written SQL on a copy of the warehouse.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from memtool.planning.plan import Plan
from memtool.planning.rule_planner import RulePlanner
from memtool.semantic.catalog import Catalog, load_catalog
from memtool.semantic.entities import EntityIndex
from memtool.semantic.parser import role_words
from memtool.sql.duckdb_warehouse import DuckDBWarehouse
from tests.integration.test_questions_by_value import same_rows

ROOT = Path(__file__).resolve().parents[2]
TODAY = date(2014, 1, 1)
ORIGINS = ("EWR", "JFK", "LGA")
DESTS = ("ATL", "BOS", "LAX", "MIA", "ORD", "SEA", "SFO")
CARRIERS = ("AA", "B6", "DL", "UA")
# Airports nobody flies to here that sort before the real ones: with max_values 5 the index holds
# AAA..AAE only, so JFK, EWR and LAX are looked up in the warehouse.
FILLERS = tuple(f"A{a}{b}" for a in "ABCDEFGH" for b in "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def flights_model(origin_cap: int) -> Catalog:
    airport_columns = {"faa": "VARCHAR", "name": "VARCHAR"}
    document: dict[str, Any] = {
        "name": "flights",
        "model_version": "1",
        "currency": "USD",
        "tables": [
            {
                "name": "flights",
                "alias": "f",
                "columns": {"flight_date": "DATE", "carrier": "VARCHAR", "origin": "VARCHAR", "dest": "VARCHAR"},
            },
            {"name": "origin_airport", "table": "airports", "alias": "oa", "columns": airport_columns},
            {"name": "dest_airport", "table": "airports", "alias": "da", "columns": airport_columns},
        ],
        "joins": [
            {"left": "flights", "right": "origin_airport", "on": ["origin = faa"]},
            {"left": "flights", "right": "dest_airport", "on": ["dest = faa"]},
        ],
        "sources": [{"name": "flight", "table": "flights", "time_column": "flight_date"}],
        "metrics": [
            {
                "name": "flight_count",
                "zh": "航班数",
                "en": "number of flights",
                "kind": "count",
                "source": "flight",
                "synonyms_zh": ["航班数", "航班数量", "航班量"],
                "synonyms_en": ["flights", "number of flights", "flight count"],
                "expression": "COUNT(*)",
                "dimensions": ["origin", "dest", "carrier", "month", "year"],
            }
        ],
        "dimensions": [
            {
                "name": "origin",
                "kind": "attribute",
                "zh": "出发机场",
                "en": "origin airport",
                "table": "origin_airport",
                "column": "faa",
                "nouns_zh": ["出发机场", "始发机场"],
                "nouns_en": ["origin", "origins", "origin airport"],
                "max_values": origin_cap,
            },
            {
                "name": "dest",
                "kind": "attribute",
                "zh": "目的地机场",
                "en": "destination airport",
                "table": "dest_airport",
                "column": "faa",
                "nouns_zh": ["目的地", "目的地机场"],
                "nouns_en": ["destination", "destinations", "destination airport"],
                "index_values": False,
            },
            {
                "name": "carrier",
                "kind": "attribute",
                "zh": "航空公司",
                "en": "carrier",
                "table": "flights",
                "column": "carrier",
                "nouns_zh": ["航空公司"],
                "nouns_en": ["carrier", "carriers", "airline", "airlines"],
            },
            {
                "name": "month",
                "kind": "time",
                "zh": "月",
                "en": "month",
                "grain": "month",
                "nouns_en": ["month", "months"],
                "group_terms_zh": ["每月"],
                "group_terms_en": ["monthly", "by month"],
            },
            {"name": "year", "kind": "time", "zh": "年", "en": "year", "grain": "year", "nouns_en": ["year", "years"]},
        ],
        "as_of": "2014-01-01",
        "default_window": "all",
    }
    return Catalog.model_validate(document)


def build_flights(path: Path) -> None:
    import duckdb

    rng = random.Random(22)
    con = duckdb.connect(str(path))
    try:
        con.execute("CREATE TABLE airports (faa VARCHAR PRIMARY KEY, name VARCHAR)")
        con.executemany("INSERT INTO airports VALUES (?, ?)", [(code, f"{code} airport") for code in (*FILLERS, *ORIGINS, *DESTS)])
        con.execute("CREATE TABLE flights (flight_date DATE, carrier VARCHAR, origin VARCHAR, dest VARCHAR)")
        rows = []
        for _ in range(900):
            day = date(2013, 1, 1) + timedelta(days=rng.randrange(365))
            origin = rng.choice(ORIGINS)
            dest = rng.choice(DESTS) if rng.random() < 0.9 else rng.choice([o for o in ORIGINS if o != origin])
            rows.append((day, rng.choice(CARRIERS), origin, dest))
        con.executemany("INSERT INTO flights VALUES (?, ?, ?, ?)", rows)
    finally:
        con.close()


@dataclass
class Flights:
    warehouse: DuckDBWarehouse
    reference: Any
    uncapped: RulePlanner
    capped: RulePlanner


@pytest.fixture(scope="module")
def flights(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flights]:
    import duckdb

    root = tmp_path_factory.mktemp("flights")
    path = root / "flights.duckdb"
    build_flights(path)
    copy = root / "reference.duckdb"
    shutil.copyfile(path, copy)
    warehouse = DuckDBWarehouse(path)
    reference = duckdb.connect(str(copy), read_only=True)
    uncapped_model, capped_model = flights_model(10_000), flights_model(5)
    try:
        yield Flights(
            warehouse,
            reference,
            RulePlanner(uncapped_model, EntityIndex.from_warehouse(warehouse, uncapped_model), today=TODAY),
            RulePlanner(capped_model, EntityIndex.from_warehouse(warehouse, capped_model), today=TODAY),
        )
    finally:
        reference.close()
        warehouse.close()


def filters_of(plan: Plan) -> dict[str, tuple[str, ...]]:
    assert plan.status == "planned" and plan.intent is not None, (plan.clarification, plan.notes)
    return {f.dimension: f.values for f in plan.intent.filters}


def answered(flights: Flights, plan: Plan) -> list[list[Any]]:
    assert plan.sql is not None
    return [list(row) for row in flights.warehouse.run(plan.sql, max_rows=1000, timeout_seconds=30).rows]


def expected(flights: Flights, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in flights.reference.execute(sql).fetchall()]


def test_the_common_role_pairs_apply_by_the_dimensions_names() -> None:
    model = flights_model(10_000)
    origin_zh, origin_en = role_words(model.dimension("origin"))
    dest_zh, dest_en = role_words(model.dimension("dest"))
    assert {"from", "out of"} <= set(origin_en) and {"从", "出发", "始发"} <= set(origin_zh)
    assert {"to", "into"} <= set(dest_en) and {"到", "飞往", "去"} <= set(dest_zh)
    assert role_words(model.dimension("carrier")) == ((), ())
    tpch = load_catalog(ROOT / "examples" / "tpch" / "model.yaml")
    assert "shipped from" in role_words(tpch.dimension("supplier_nation"))[1]  # the model's own words, not the pairs
    assert "from" not in role_words(tpch.dimension("supplier_nation"))[1]


def test_the_second_role_takes_the_first_roles_values() -> None:
    assert EntityIndex.static(flights_model(10_000)).borrowed == {}  # no entity_values: nothing to take
    model = Catalog.model_validate(
        {**flights_model(10_000).model_dump(mode="json"), "entity_values": [{"dimension": "origin", "values": ["JFK", "LAX"]}]}
    )
    index = EntityIndex.static(model)
    assert index.borrowed == {"dest": "origin"}
    assert {v.dimension for v in index.lookup("JFK")} == {"origin", "dest"}
    assert index.holds("dest", "LAX") and not index.holds("dest", "SFO")  # from the index, no warehouse asked


@pytest.mark.parametrize("planner", ["uncapped", "capped"])
def test_which_destinations_had_the_most_flights_from_jfk(flights: Flights, planner: str) -> None:
    plan = getattr(flights, planner).plan("Which 5 destinations had the most flights from JFK?")
    assert filters_of(plan) == {"origin": ("JFK",)}
    assert plan.intent is not None and plan.intent.dimensions == ("dest",) and plan.intent.limit == 5
    rows = answered(flights, plan)
    every = dict(expected(flights, "SELECT dest, COUNT(*) FROM flights WHERE origin = 'JFK' GROUP BY dest"))
    assert len(rows) == 5 and all(every[dest] == n for dest, n in rows), (rows, every)
    assert sorted((n for _, n in rows), reverse=True) == sorted(every.values(), reverse=True)[:5]


@pytest.mark.parametrize("planner", ["uncapped", "capped"])
def test_flights_from_ewr_in_chinese(flights: Flights, planner: str) -> None:
    plan = getattr(flights, planner).plan("从EWR出发的航班数")
    assert filters_of(plan) == {"origin": ("EWR",)}
    assert same_rows(answered(flights, plan), expected(flights, "SELECT COUNT(*) FROM flights WHERE origin = 'EWR'"), ordered=True)
    after_only = getattr(flights, planner).plan("EWR始发的航班数")  # the role word after the value
    assert filters_of(after_only) == {"origin": ("EWR",)}


@pytest.mark.parametrize("planner", ["uncapped", "capped"])
def test_flights_to_lax_by_carrier(flights: Flights, planner: str) -> None:
    plan = getattr(flights, planner).plan("flights to LAX by carrier")
    assert filters_of(plan) == {"dest": ("LAX",)}
    assert plan.intent is not None and plan.intent.dimensions == ("carrier",)
    hand = expected(flights, "SELECT carrier, COUNT(*) FROM flights WHERE dest = 'LAX' GROUP BY carrier ORDER BY carrier")
    assert same_rows(answered(flights, plan), hand, ordered=False)


@pytest.mark.parametrize(
    ("question", "want"),
    [
        ("number of flights from JFK to LAX", {"origin": ("JFK",), "dest": ("LAX",)}),
        ("flights out of LGA into BOS", {"origin": ("LGA",), "dest": ("BOS",)}),
        ("从JFK飞往SFO的航班数", {"origin": ("JFK",), "dest": ("SFO",)}),
        ("去ORD的航班数", {"dest": ("ORD",)}),
        ("flights to JFK", {"dest": ("JFK",)}),  # an origin airport named as a destination
        ("number of flights from JFK and LGA", {"origin": ("JFK", "LGA")}),  # the second value takes the first's role
    ],
)
@pytest.mark.parametrize("planner", ["uncapped", "capped"])
def test_the_role_word_picks_the_dimension(flights: Flights, planner: str, question: str, want: dict[str, tuple[str, ...]]) -> None:
    assert filters_of(getattr(flights, planner).plan(question)) == want


def test_two_roles_answer_by_value(flights: Flights) -> None:
    plan = flights.capped.plan("从JFK飞往SFO的航班数")
    hand = expected(flights, "SELECT COUNT(*) FROM flights WHERE origin = 'JFK' AND dest = 'SFO'")
    assert same_rows(answered(flights, plan), hand, ordered=True) and hand[0][0] > 0


@pytest.mark.parametrize("question", ["How many flights at JFK?", "JFK的航班数"])
@pytest.mark.parametrize("planner", ["uncapped", "capped"])
def test_a_value_with_no_role_word_is_asked_about(flights: Flights, planner: str, question: str) -> None:
    plan = getattr(flights, planner).plan(question)
    assert plan.status == "needs_clarification" and plan.clarification is not None, plan.notes
    if planner == "uncapped":  # in the index: asked which role is meant, each option a filter of its own role
        assert plan.clarification.reason == "ambiguous_value" and plan.clarification.term == "JFK"
        assert [t.get("dimension") for t in plan.clarification.targets] == ["origin", "dest"]
    else:  # past the cap, and no role word or noun names the dimension: not looked up, not guessed
        assert plan.clarification.term == "JFK"


def test_the_clarifications_option_answers_in_its_role(flights: Flights) -> None:
    from memtool.planning.context import PlanContext, PreviousTurn

    asked = flights.uncapped.plan("How many flights at JFK?")
    assert asked.clarification is not None
    turn = PreviousTurn(
        question="How many flights at JFK?", status="needs_clarification", clarification=asked.clarification.model_dump(mode="json")
    )
    reply = flights.uncapped.plan("2", context=PlanContext(turns=[turn]))
    assert filters_of(reply) == {"dest": ("JFK",)}


def test_a_value_past_the_cap_is_looked_up_bound_and_cached(flights: Flights) -> None:
    model = flights_model(5)
    index = EntityIndex.from_warehouse(flights.warehouse, model)
    assert index.capped == {"origin", "dest"} and index.borrowed == {"dest": "origin"}
    assert index.resolve("origin", "JFK") is None and len(index.of("origin")) == 5  # past the cap: not in the index
    assert index.probe is not None
    probe, probes = index.probe, []

    def counted(dimension: str, value: str) -> bool:
        probes.append((dimension, value))
        return probe(dimension, value)

    index.probe = counted
    planner = RulePlanner(model, index, today=TODAY)
    first = planner.plan("flights from jfk")  # as written, then in upper case
    assert filters_of(first) == {"origin": ("JFK",)}
    assert probes == [("origin", "jfk"), ("origin", "JFK")]
    probes.clear()
    again = planner.plan("number of flights from JFK by carrier")
    assert filters_of(again) == {"origin": ("JFK",)} and probes == []  # cached
    # the probe's SQL binds the value: a quote in it is data, and no such airport is held
    assert not index.holds("origin", "JFK' OR '1'='1")


@pytest.mark.parametrize("question", ["flights from XYZ", "从QQQ出发的航班数", "flights to NOWHERE by carrier"])
@pytest.mark.parametrize("planner", ["uncapped", "capped"])
def test_a_word_the_warehouse_does_not_hold_is_asked_about(flights: Flights, planner: str, question: str) -> None:
    plan = getattr(flights, planner).plan(question)
    assert plan.status == "needs_clarification" and plan.clarification is not None, plan.notes
    assert plan.sql is None


def columns_model(dest_cap: int) -> Catalog:
    """The draft's shape: origin and dest are the flights table's own columns (two columns, not one
    table in two roles), the destination capped below its values (ATL and BOS are indexed)."""
    document = flights_model(10_000).model_dump(mode="json", exclude_defaults=True)
    document["tables"] = [t for t in document["tables"] if t["name"] == "flights"]
    document["joins"] = []
    for dimension in document["dimensions"]:
        if dimension["name"] in ("origin", "dest"):
            dimension.update(table="flights", column=dimension["name"], index_values=True, max_values=10_000)
        if dimension["name"] == "dest":
            dimension["max_values"] = dest_cap
    return Catalog.model_validate(document)


@pytest.fixture(scope="module")
def by_columns(flights: Flights) -> RulePlanner:
    model = columns_model(2)
    index = EntityIndex.from_warehouse(flights.warehouse, model)
    assert index.capped == {"dest"} and {e.value for e in index.of("dest")} == {"ATL", "BOS"}
    return RulePlanner(model, index, today=TODAY)


def test_a_value_past_the_cap_of_its_role_is_looked_up_by_the_role_word(flights: Flights, by_columns: RulePlanner) -> None:
    lax = by_columns.plan("flights to LAX by carrier")  # LAX: in no index; the role word names dest, past its cap
    assert filters_of(lax) == {"dest": ("LAX",)}
    hand = expected(flights, "SELECT carrier, COUNT(*) FROM flights WHERE dest = 'LAX' GROUP BY carrier")
    assert same_rows(answered(flights, lax), hand, ordered=False)
    # JFK is indexed as an origin only; "to" names dest, past its cap: the warehouse says JFK is one
    assert filters_of(by_columns.plan("flights to JFK")) == {"dest": ("JFK",)}
    assert filters_of(by_columns.plan("flights from JFK")) == {"origin": ("JFK",)}


def test_a_value_named_in_a_role_it_does_not_have_is_asked_about(by_columns: RulePlanner) -> None:
    plan = by_columns.plan("flights from BOS")  # BOS: indexed as a destination, never an origin
    assert plan.status == "needs_clarification" and plan.clarification is not None, plan.notes
    assert plan.clarification.reason == "outside_value" and plan.clarification.term == "BOS"
    assert {t.get("dimension") for t in plan.clarification.targets} == {"origin"}
    assert by_columns.plan("BOS出发的航班数").status == "needs_clarification"
    # JFK, indexed as an origin, is a destination too past the cap: named with no role word, asked about
    bare = by_columns.plan("How many flights at JFK?")
    assert bare.status == "needs_clarification" and bare.clarification is not None, bare.notes
    assert bare.clarification.reason == "ambiguous_value"
    assert [t.get("dimension") for t in bare.clarification.targets] == ["origin", "dest"]
    unknown = by_columns.plan("flights from LAX")  # in no index, and the origins are all indexed: a word not known
    assert unknown.status == "needs_clarification" and unknown.sql is None


# ---- TPC-H: the customer's nation and the supplier's ----------------------------------------------

TPCH_TODAY = date(1998, 8, 3)


@dataclass
class Tpch:
    warehouse: DuckDBWarehouse
    reference: Any
    planner: RulePlanner


@pytest.fixture(scope="module")
def tpch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tpch]:
    import duckdb

    from memtool.datasets.tpch import build_tpch_warehouse

    root = tmp_path_factory.mktemp("tpch_roles")
    path = root / "tpch.duckdb"
    build_tpch_warehouse(path, scale=0.01)
    copy = root / "reference.duckdb"
    shutil.copyfile(path, copy)
    warehouse = DuckDBWarehouse(path)
    model = load_catalog(ROOT / "examples" / "tpch" / "model.yaml")
    reference = duckdb.connect(str(copy), read_only=True)
    try:
        yield Tpch(warehouse, reference, RulePlanner(model, EntityIndex.from_warehouse(warehouse, model), today=TPCH_TODAY))
    finally:
        reference.close()
        warehouse.close()


GERMAN_TO_FRENCH = """
SELECT SUM(l.l_extendedprice * (1 - l.l_discount))
FROM lineitem l JOIN orders o ON l.l_orderkey = o.o_orderkey
JOIN customer c ON o.o_custkey = c.c_custkey JOIN nation cn ON c.c_nationkey = cn.n_nationkey
JOIN supplier s ON l.l_suppkey = s.s_suppkey JOIN nation sn ON s.s_nationkey = sn.n_nationkey
WHERE o.o_orderdate >= DATE '1995-01-01' AND o.o_orderdate < DATE '1996-01-01'
  AND sn.n_name = 'GERMANY' AND cn.n_name = 'FRANCE'
"""


@pytest.mark.parametrize(
    "question",
    [
        "revenue from German suppliers to French customers in 1995",  # the nouns next to the values
        "1995年德国供应商卖给法国客户的收入",
        "Revenue shipped from GERMANY to FRANCE in 1995",  # the model's role words
        "1995年从德国卖到法国的收入",
    ],
)
def test_revenue_from_german_suppliers_to_french_customers(tpch: Tpch, question: str) -> None:
    plan = tpch.planner.plan(question)
    assert plan.status == "planned" and plan.intent is not None and plan.sql is not None, (plan.clarification, plan.notes)
    assert {f.dimension: f.values for f in plan.intent.filters} == {"supplier_nation": ("GERMANY",), "customer_nation": ("FRANCE",)}
    rows = tpch.warehouse.run(plan.sql, max_rows=10, timeout_seconds=30).rows
    hand = tpch.reference.execute(GERMAN_TO_FRENCH).fetchall()
    assert same_rows([list(r) for r in rows], hand, ordered=True) and hand[0][0], (rows, hand)


@pytest.mark.parametrize(
    ("question", "want"),
    [
        ("Revenue shipped from EUROPE to ASIA in 1995", {"supplier_region": ("EUROPE",), "customer_region": ("ASIA",)}),
        ("1995年从欧洲卖给亚洲的收入", {"supplier_region": ("EUROPE",), "customer_region": ("ASIA",)}),
        ("revenue for FRANCE in 1995", {"customer_nation": ("FRANCE",)}),
        ("1995年从德国客户得到的收入", {"customer_nation": ("GERMANY",)}),  # the noun next to the value wins over 从
    ],
)
def test_tpch_role_words(tpch: Tpch, question: str, want: dict[str, tuple[str, ...]]) -> None:
    plan = tpch.planner.plan(question)
    assert plan.status == "planned" and plan.intent is not None, (plan.clarification, plan.notes)
    assert {f.dimension: f.values for f in plan.intent.filters} == want


@pytest.mark.parametrize("question", ["Revenue from GERMANY in 1995", "1995年德国的收入"])
def test_a_nation_with_no_role_word_is_asked_about(tpch: Tpch, question: str) -> None:
    plan = tpch.planner.plan(question)
    assert plan.status == "needs_clarification" and plan.clarification is not None
    assert plan.clarification.reason == "ambiguous_value"
    assert [t.get("dimension") for t in plan.clarification.targets] == ["customer_nation", "supplier_nation"]
