"""Refund reason as a dimension of refund amount and refund rate, over the demo warehouse.

The by-value cases (rows equal to hand-written SQL) are in test_questions_by_value.py; these tests
check what the definition promises: the reasons add up to the whole, a reason filter keeps every
line in the denominator, the planted 质量问题 spike shows, other metrics ask instead of answering,
and "原因" meaning "why" stays an analysis word.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any

import pytest

from memtool.planning.plan import Plan
from memtool.planning.routes import classify_route
from memtool.planning.rule_planner import RulePlanner
from memtool.semantic.catalog import load_catalog
from memtool.semantic.entities import EntityIndex
from memtool.sql.demo_warehouse import REFUND_REASONS, PlantedAnomaly, build_demo_warehouse
from memtool.sql.duckdb_warehouse import DuckDBWarehouse

ANCHOR = date(2026, 11, 29)
PAID = "NOT l.is_test AND l.paid_at IS NOT NULL"


@dataclass
class Demo:
    planner: RulePlanner
    warehouse: DuckDBWarehouse
    reference: Any  # plain DuckDB on a copy of the file, for hand-written SQL
    spike: PlantedAnomaly


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    import duckdb

    root = tmp_path_factory.mktemp("refund-reason")
    path = root / "demo.duckdb"
    summary = build_demo_warehouse(path, seed=7, scale=0.05, anchor=ANCHOR)
    copy = root / "reference.duckdb"
    shutil.copyfile(path, copy)
    warehouse = DuckDBWarehouse(path)
    catalog = load_catalog()
    reference = duckdb.connect(str(copy), read_only=True)
    spike = next(a for a in summary.planted_anomalies if a.kind == "refund_spike")
    try:
        yield Demo(RulePlanner(catalog, EntityIndex.from_warehouse(warehouse, catalog), ANCHOR), warehouse, reference, spike)
    finally:
        reference.close()
        warehouse.close()


def ask(demo: Demo, question: str) -> tuple[Plan, list[str], list[list[Any]]]:
    plan = demo.planner.plan(question)
    assert plan.status == "planned", f"{question!r}: {plan.clarification or plan.notes}"
    assert plan.sql is not None
    result = demo.warehouse.run(plan.sql, max_rows=5000, timeout_seconds=20)
    return plan, result.columns, result.rows


def test_the_reasons_refund_rates_add_up_to_the_refund_rate(demo: Demo) -> None:
    # Given the refund rate of last month, whole and by reason
    _, _, whole = ask(demo, "上个月退款率")
    _, columns, by_reason = ask(demo, "上个月各退款原因的退款率")

    # Then every reason is a share of the same gross: the parts add up to the whole (4-decimal rounding)
    assert columns == ["refund_reason", "refund_rate"]
    assert {row[0] for row in by_reason} <= set(REFUND_REASONS) and len(by_reason) >= 2
    assert math.isclose(sum(float(r[1]) for r in by_reason), float(whole[0][0]), abs_tol=0.00005 * (len(by_reason) + 1))
    # A rate over only the refunded lines would be close to 1; these are shares of all sales.
    assert all(0 < float(r[1]) < 0.1 for r in by_reason)


def test_the_reasons_refund_amounts_add_up_to_the_refund_amount(demo: Demo) -> None:
    _, _, whole = ask(demo, "refund amount last month")
    _, _, by_reason = ask(demo, "refund amount by reason last month")

    assert math.isclose(sum(float(r[1]) for r in by_reason), float(whole[0][0]), abs_tol=0.01 * len(by_reason))


def test_a_reason_filter_keeps_every_sale_in_the_denominator(demo: Demo) -> None:
    # Given the quality-issue refund rate and its parts, computed by hand
    _, _, rows = ask(demo, "上个月质量问题退款率")
    refunded, gross = demo.reference.execute(
        f"""
        SELECT (SELECT SUM(f.refund_amount) FROM fact_refund f JOIN fact_order_line l
                  ON f.order_id = l.order_id AND f.line_id = l.line_id
                WHERE {PAID} AND l.paid_at >= TIMESTAMP '2026-10-01' AND l.paid_at < TIMESTAMP '2026-11-01'
                  AND f.reason = '质量问题'),
               (SELECT SUM(l.gross_amount) FROM fact_order_line l
                WHERE {PAID} AND l.paid_at >= TIMESTAMP '2026-10-01' AND l.paid_at < TIMESTAMP '2026-11-01')
        """
    ).fetchone()

    # Then the denominator is the whole month's gross revenue
    assert math.isclose(float(rows[0][0]), round(float(refunded) / float(gross), 4), abs_tol=1e-9)


def test_the_planted_quality_spike_leads_its_month(demo: Demo) -> None:
    year, month = (int(part) for part in demo.spike.month.split("-"))

    _, _, spike_month = ask(demo, f"{year}年{month}月退款原因分布")
    _, _, quality_by_month = ask(demo, "monthly refund amount for quality issues over the last 12 months")

    assert demo.spike.reason == "质量问题"
    assert spike_month[0][0] == "质量问题"
    amounts = {str(row[0])[:7]: float(row[1]) for row in quality_by_month}
    others = sorted(v for m, v in amounts.items() if m != demo.spike.month)
    assert amounts[demo.spike.month] > 2 * others[len(others) // 2]


def test_a_comparison_by_reason_leads_with_the_plain_answer(demo: Demo) -> None:
    _, _, plain = ask(demo, "refund rate by reason last month")
    _, columns, compared = ask(demo, "refund rate by reason vs last month")

    assert columns == ["refund_reason", "refund_rate", "refund_rate_previous", "refund_rate_change", "refund_rate_change_rate"]
    assert {row[0]: row[1] for row in compared} == {row[0]: row[1] for row in plain}


@pytest.mark.parametrize(
    ("question", "metric"),
    [("各退款原因的销售额", "销售额"), ("按原因看订单数", "订单数"), ("units by reason last month", "units"), ("net revenue for quality issues", "net revenue")],
)
def test_other_metrics_ask_instead_of_answering_by_reason(demo: Demo, question: str, metric: str) -> None:
    plan = demo.planner.plan(question)

    assert plan.status == "needs_clarification" and plan.sql is None
    assert plan.clarification is not None
    assert metric in plan.clarification.question
    assert plan.clarification.term in ("退款原因", "refund reason")
    assert set(plan.clarification.options) in ({"退款额", "退款率"}, {"refund amount", "refund rate"})


def test_why_questions_with_the_word_reason_are_still_analyses(demo: Demo) -> None:
    plan = demo.planner.plan("净收入下降的原因是什么")

    assert classify_route("净收入下降的原因是什么") == "deep_analysis_workflow"
    assert plan.status == "planned" and plan.intent is not None
    assert plan.intent.metric == "net_revenue" and "refund_reason" not in plan.intent.dimensions


def test_refund_reasons_are_entities_from_the_warehouse_and_other_is_not_a_bare_word(demo: Demo) -> None:
    entities = demo.planner.entities
    reasons = [row[0] for row in demo.reference.execute("SELECT DISTINCT reason FROM fact_refund ORDER BY 1").fetchall()]

    assert sorted(e.value for e in entities.of("refund_reason")) == sorted(reasons)
    assert [(e.dimension, e.value) for e in entities.lookup("quality issues")] == [("refund_reason", "质量问题")]
    assert entities.resolve("refund_reason", "其他") is not None  # a filter value still resolves
    # "其他" on its own is an everyday word: "其他渠道" does not filter refunds
    plan, _, _ = ask(demo, "上个月其他渠道销量")
    assert plan.intent is not None and plan.intent.filters == ()
    assert ask(demo, "上个月其他原因的退款额")[0].intent.filters[0].values == ("其他",)  # type: ignore[union-attr]


def test_the_static_entity_index_knows_the_refund_reasons() -> None:
    catalog = load_catalog()
    static = EntityIndex.static(catalog)

    assert sorted(e.value for e in static.of("refund_reason")) == sorted(REFUND_REASONS)
    assert [e.dimension for e in static.lookup("质量问题")] == ["refund_reason"]
    assert static.lookup("其他") != [] and all("其他" not in e.names for e in static.of("refund_reason"))
