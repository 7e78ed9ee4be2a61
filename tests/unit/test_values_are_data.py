"""Any text a filter value can hold reaches SQL as one string literal (docs/architecture.md, "Tenant walls").

Property-based: for arbitrary text (quotes, backslashes, comment markers, semicolons, NUL-free
unicode), the compiler's SQL passes the guard and, read back as Redshift and as each engine reads
its transpiled text, holds the value as exactly one literal and no statement or UNION of its own.
"""

from __future__ import annotations

import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from memtool.semantic.catalog import load_catalog
from memtool.semantic.compiler import compile_intent
from memtool.semantic.intent import Filter, Intent
from memtool.sql.guardrails import GuardPolicy, check_sql

CATALOG = load_catalog()
POLICY = GuardPolicy.from_model(CATALOG)
HOSTILE = st.text(
    alphabet=st.sampled_from(list("ab上海'\"\\;-/*() \n\tUNIOSELCT%$?{}")) | st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(value=HOSTILE)
def test_a_filter_value_is_one_literal_as_every_engine_reads_it(value: str) -> None:
    intent = Intent(metric="net_revenue", dimensions=("channel",), filters=(Filter(dimension="city", values=(value,)),))
    sql = compile_intent(intent, CATALOG).sql
    for engine in ("redshift", "duckdb", "postgres"):
        verdict = check_sql(sql, POLICY.on_engine(engine))
        assert verdict.allowed and verdict.sql is not None, (engine, value, verdict.reason)
        ran_as = sqlglot.transpile(verdict.sql, read="redshift", write=engine)[0]
        tree = sqlglot.parse_one(ran_as, read=engine)
        in_lists = [node for node in tree.find_all(exp.In)]
        assert len(in_lists) == 1 and [v.this for v in in_lists[0].expressions] == [value], (engine, ran_as)
        assert not list(tree.find_all(exp.Union))
