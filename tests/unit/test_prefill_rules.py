"""Pre-fill's rules on DDL and ETL SQL nobody wrote them for (TPC-H's tables and a CTAS rollup,
tests/fixtures/knowledge), and on input they cannot read: every quote is a verbatim line of its
source, and what is not covered is a gap (docs/knowledge.md, Pre-fill)."""

from __future__ import annotations

from pathlib import Path

from memtool.knowledge.prefill import SourceText, suggest, suggestion_key

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "knowledge"
DDL = (FIXTURES / "tpch_ddl.sql").read_text(encoding="utf-8")
ROLLUP = (FIXTURES / "monthly_sales.sql").read_text(encoding="utf-8")


def run(*sources: tuple[str, str]):
    texts = [SourceText(f"src{i}", 1, f"file{i}", kind, text) for i, (kind, text) in enumerate(sources)]
    found, gaps, _ = suggest(texts)
    by_target = {s.target: s for s in found}
    for item in found:
        for fact in item.facts:
            assert fact.quote in texts[int(fact.source_id[3:])].text, (item.target, fact.quote)  # verbatim
    return by_target, gaps


def test_a_ctas_rollup_gets_each_columns_inputs_expression_and_filters():
    found, gaps = run(("ddl", DDL), ("etl_sql", ROLLUP))
    revenue = found["analytics.monthly_sales.revenue"]
    assert revenue.key == "suggestion.analytics.monthly_sales.revenue"
    assert revenue.lineage == {
        "inputs": ["public.lineitem.l_discount", "public.lineitem.l_extendedprice"],
        "expression": "SUM(l.l_extendedprice * (1 - l.l_discount))",
        "filters": ["o.o_orderstatus <> 'P'"],
        "having": [],
    }
    assert [f.quote for f in revenue.facts] == ["SUM(l.l_extendedprice * (1 - l.l_discount)) AS revenue,", "WHERE o.o_orderstatus <> 'P'"]
    assert found["analytics.monthly_sales.month"].lineage["expression"] == "DATE_TRUNC('MONTH', o.o_orderdate)"
    assert found["analytics.monthly_sales.orders"].lineage["inputs"] == ["public.orders.o_orderkey"]
    # DDL comments become definitions of their own, quoting the column's line in its own table
    status = found["public.orders.o_orderstatus"]
    assert status.text == "public.orders.o_orderstatus (CHAR(1)): F: fulfilled, O: open, P: partial"
    assert [f.quote for f in status.facts] == ["o_orderstatus   CHAR(1) NOT NULL,          -- F: fulfilled, O: open, P: partial"]
    assert "public.orders.o_totalprice: no comment in its DDL and no ETL among the sources feeds it" in gaps
    assert not any("o_orderkey" in g for g in gaps)  # a primary key needs no definition


def test_without_the_ddl_every_table_the_etl_reads_is_a_gap():
    found, gaps = run(("etl_sql", ROLLUP))
    assert set(found) == {f"analytics.monthly_sales.{c}" for c in ("month", "orders", "revenue", "returned_share")}
    assert "public.orders: read by file0 but no DDL among the sources describes it" in gaps
    assert "public.lineitem: read by file0 but no DDL among the sources describes it" in gaps


def test_what_cannot_be_read_is_a_gap_never_a_guess():
    broken = "CREATE TABLE (;\nINSERT INTO t (a) SELECT s.x AS a FROM s;"
    found, gaps = run(("etl_sql", broken), ("document", "退款政策：30天内全额退款"))
    assert list(found) == ["t.a"]  # the statement after a broken one is still read
    assert any(g.startswith("file0: a statement at line 1 does not parse as SQL") for g in gaps), gaps
    assert "file1: a document; pre-fill reads DDL and ETL SQL only" in gaps
    mismatch, gaps = run(("etl_sql", "INSERT INTO t (a, b) SELECT x FROM s;"))
    assert mismatch == {} and "file0: INSERT INTO t names 2 columns for 1 values" in gaps
    constant, gaps = run(("etl_sql", "INSERT INTO t (a) SELECT 1 AS a;"))
    assert constant["t.a"].lineage["inputs"] == [] and "t.a: no source column feeds it (1)" in gaps


def test_keys_are_slot_safe():
    assert suggestion_key('Sales Mart."Net Revenue"#1') == "suggestion.sales_mart._net_revenue_1"


def test_a_large_file_is_read_within_the_tasks_time_and_what_is_left_is_a_gap():
    from memtool.knowledge import prefill

    statement = "INSERT INTO mart.t (a) SELECT s.x AS a FROM s WHERE s.ok;\n"
    big = SourceText("src0", 1, "big.sql", "etl_sql", statement * 5000)
    found, gaps, read = suggest([big], seconds=0.2)
    assert found and 0 < read["src0"] < 5000  # some statements were read
    assert f"big.sql: read {read['src0']} of its 5000 statements (a task's reading time is spent)" in gaps
    # Read again with the count the first reading returned: the same, however slow the machine
    again, gaps_again, read_again = suggest([big], seconds=0.0, statements=read)
    assert (again, gaps_again, read_again) == (found, gaps, read)
    assert prefill.READ_SECONDS * 2 < 28  # planning and running one task read it twice inside a Lambda's 28 s


# ---- found by a review that tried pre-fill on SQL nobody wrote it for -----------------------------


def test_sql_too_deep_or_too_long_for_one_statement_is_a_gap_and_the_rest_is_read():
    deep = "insert into t.x (a) select " + "(" * 3000 + "1" + ")" * 3000 + " as a from s.y;\n"
    wide = "insert into t.w (a) select s.a as a from s where " + " and ".join(f"s.a <> {i}" for i in range(3000)) + ";\n"
    fine = "insert into t.z (a) select s.a as a from s;\n"
    found, gaps, _ = suggest([SourceText("src0", 1, "etl.sql", "etl_sql", deep + wide + fine)])
    assert [s.target for s in found] == ["t.z.a"]
    assert any(g.startswith("etl.sql: a statement at line 1 does not parse as SQL") for g in gaps), gaps
    assert "etl.sql: a statement at line 2 is longer than 20,000 characters; not read" in gaps


def test_a_comment_is_its_own_tables_and_its_own_columns():
    ddl = """CREATE TABLE staging.payments (
  amount NUMERIC(12,2), -- in cents, before FX conversion
  id BIGINT
);
CREATE TABLE finance.payments (
  amount NUMERIC(12,2),
  id BIGINT
);
CREATE TABLE shop.basket (
  gross NUMERIC(10,2), net NUMERIC(10,2), -- net = gross minus VAT
  sku VARCHAR -- the article number
);
"""
    found, gaps = run(("ddl", ddl))
    assert found["staging.payments.amount"].text == "staging.payments.amount (NUMERIC(12,2)): in cents, before FX conversion"
    assert "finance.payments.amount" not in found  # its own block says nothing
    assert "finance.payments.amount: no comment in its DDL and no ETL among the sources feeds it" in gaps
    assert "shop.basket.gross" not in found and "shop.basket.net" not in found  # whose comment would it be?
    assert "shop.basket.net: its line defines several columns; the line's comment is not taken for it" in gaps
    assert found["shop.basket.sku"].text == "shop.basket.sku (VARCHAR): the article number"


def test_only_the_outer_querys_conditions_are_the_target_rows_filters():
    etl = """insert into mart.daily (day, total)
with good as (
  select r.order_id, r.amount from raw.refunds r
  where r.reason <> 'fraud'   -- only this CTE's rows
)
select c.day as day,
       sum(g.amount) as total
from raw.calendar c
left join good g on g.order_id = c.order_id
where not exists (select 1 from raw.bans x where x.customer_id = c.id and x.active)
  and c.day >= '2026-01-01'
group by 1
having sum(g.amount) > 0;
"""
    found, _ = run(("etl_sql", etl))
    total = found["mart.daily.total"]
    assert total.lineage["filters"] == [
        "NOT EXISTS(SELECT 1 FROM raw.bans AS x WHERE x.customer_id = c.id AND x.active)",
        "c.day >= '2026-01-01'",
    ]
    assert total.lineage["having"] == ["SUM(g.amount) > 0"]
    assert "groups where SUM(g.amount) > 0" in total.text
    quotes = [f.quote for f in total.facts]
    assert quotes == [
        "sum(g.amount) as total",
        "where not exists (select 1 from raw.bans x where x.customer_id = c.id and x.active)",
        "and c.day >= '2026-01-01'",
    ]  # never the CTE's WHERE, never a comment that says "where"


def test_columns_whose_names_fold_to_one_slot_keep_a_suggestion_each():
    ddl = """CREATE TABLE mart.people (
  full_name VARCHAR COMMENT 'legal name',
  "Full Name" VARCHAR COMMENT 'display name',
  "ID" INT COMMENT 'upper-case id',
  id INT COMMENT 'lower-case id'
);
"""
    found, _ = run(("ddl", ddl))
    assert {t: s.text.split(": ", 1)[1] for t, s in found.items()} == {
        "mart.people.full_name": "legal name",
        "mart.people.Full Name": "display name",
        "mart.people.ID": "upper-case id",
        "mart.people.id": "lower-case id",
    }
    keys = [s.key for s in found.values()]
    assert len(set(keys)) == 4 and all(k.startswith("suggestion.mart.people.") for k in keys)
