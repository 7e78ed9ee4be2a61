"""The inputs of a ratio's attribution: which metrics are its numerator and denominator, and the
queries that read them by segment (the semantic layer's own intents; here answered by a fake)."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from memtool.analysis import inputs
from memtool.analysis.inputs import AnalysisWindows, attribution_table, ratio_parts
from memtool.semantic.catalog import Catalog, load_catalog
from memtool.semantic.intent import Filter, Intent, TimeWindow

JUNE = TimeWindow(start=date(2026, 6, 1), end=date(2026, 7, 1), label="2026-06")
JULY = TimeWindow(start=date(2026, 7, 1), end=date(2026, 8, 1), label="7月")


def with_metric(catalog: Catalog, **changes: Any) -> Catalog:
    data = catalog.model_dump()
    base = next(m for m in data["metrics"] if m["name"] == "refund_rate")
    data["metrics"] = [*data["metrics"], {**base, "by_detail": None, "dimensions": ["region", "channel", "month"], **changes}]
    return Catalog.model_validate(data)


def test_a_ratios_numerator_and_denominator_are_the_models_metrics_of_its_two_sides() -> None:
    catalog = load_catalog()
    assert ratio_parts(catalog, "refund_rate") == ("refund_amount", "gross_revenue")
    assert ratio_parts(catalog, "avg_order_value") == ("gross_revenue", "order_count")
    # Casts, parentheses and NULLIF(…, 0) around either side do not hide it.
    expression = "(SUM(ol.qty)) / NULLIF(CAST(COUNT(DISTINCT ol.order_id) AS FLOAT), 0)"
    spelled = with_metric(catalog, name="units_per_order", expression=expression)
    assert ratio_parts(spelled, "units_per_order") == ("units", "order_count")


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("AVG(ol.gross_amount)", "is not a ratio of two sums"),
        ("SUM(ol.qty) / NULLIF(COUNT(*), 0)", "denominator is not a metric of the model"),
        ("100.0 * SUM(ol.qty) / NULLIF(SUM(ol.gross_amount), 0)", "numerator is not a metric of the model"),
    ],
)
def test_a_ratio_without_two_metrics_for_sides_is_refused_with_the_reason(expression: str, why: str) -> None:
    catalog = with_metric(load_catalog(), name="odd_ratio", expression=expression)
    with pytest.raises(ValueError, match=why):
        ratio_parts(catalog, "odd_ratio")


class FakeWarehouse:
    """Answers the intents a ratio's attribution runs, as the compiler would: refunds and sales per
    channel and refund reason (a reason's refunds over all sales)."""

    SALES = {"2026-06": {"医院": 30000.0, "零售": 20000.0}, "2026-07": {"医院": 31000.0, "零售": 19000.0}}
    REFUNDS = {"2026-06": {"医院": 900.0, "零售": 300.0}, "2026-07": {"医院": 310.0, "零售": 380.0}}
    REASONS = {"2026-06": {"质量问题": 1000.0, "物流延误": 200.0}, "2026-07": {"质量问题": 400.0, "物流延误": 290.0}}

    def __init__(self, *, rate_off: float = 0.0) -> None:
        self.ran: list[Intent] = []
        self.rate_off = rate_off

    def __call__(self, intent: Intent) -> tuple[list[str], list[list[Any]], str]:
        self.ran.append(intent)
        assert intent.time_window is not None
        period = intent.time_window.start.strftime("%Y-%m")
        sales, refunds = self.SALES[period], self.REFUNDS[period]
        if intent.metric == "refund_rate":
            value = round(sum(refunds.values()) / sum(sales.values()), 4) + self.rate_off
            return ["refund_rate"], [[value]], "SELECT refund_rate"
        table = {"refund_amount": refunds, "gross_revenue": sales}[intent.metric]
        if intent.dimensions == ("refund_reason",):
            assert intent.metric == "refund_amount"
            table = self.REASONS[period]
        if not intent.dimensions:
            return [intent.metric], [[sum(table.values())]], f"SELECT {intent.metric}"
        return [*intent.dimensions, intent.metric], [[m, v] for m, v in table.items()], f"SELECT {intent.metric} BY {intent.dimensions}"


def _catalog_by_channel_and_reason() -> Catalog:
    data = load_catalog().model_dump()
    data["analysis"] = {**data["analysis"], "detail_drill_dimensions": ["channel", "refund_reason"]}
    return Catalog.model_validate(data)


def test_a_ratios_table_holds_each_segments_numerator_and_denominator_and_the_wholes_pair() -> None:
    run = FakeWarehouse()
    table = attribution_table(Intent(metric="refund_rate"), AnalysisWindows(focus=JULY), run, _catalog_by_channel_and_reason(), ["2026-07"])

    assert table.columns == ["month", "dimension", "member", "refund_amount", "gross_revenue"]
    assert table.params["method"] == "rate_mix" and table.params["shared_denominator"] == ["refund_reason"]
    assert table.params["totals"] == {"2026-06": [1200.0, 50000.0], "2026-07": [690.0, 50000.0]}
    assert (table.params["before_period"], table.params["after_period"]) == ("2026-06", "2026-07")
    assert ["2026-07", "refund_reason", "质量问题", 400.0, 50000.0] in table.rows  # a reason's refunds over all sales
    assert ["2026-06", "channel", "医院", 900.0, 30000.0] in table.rows
    # Sales are never asked for by refund reason (they have none): the reasons share the whole's.
    assert not [i for i in run.ran if i.metric == "gross_revenue" and "refund_reason" in i.dimensions]
    assert all(i.unit is None for i in run.ran) and len(table.queries) == len(run.ran)


def test_a_refund_reason_filter_narrows_the_numerator_only() -> None:
    run = FakeWarehouse()
    reason = Filter(dimension="refund_reason", values=("质量问题",))
    intent = Intent(metric="refund_rate", filters=(reason,))
    attribution_table(intent, AnalysisWindows(focus=JULY), run, _catalog_by_channel_and_reason(), ["2026-07"])

    assert {i.filters for i in run.ran if i.metric in ("refund_amount", "refund_rate")} == {(reason,)}
    assert {i.filters for i in run.ran if i.metric == "gross_revenue"} == {()}


def test_a_pair_that_does_not_give_back_the_ratio_is_refused() -> None:
    off = FakeWarehouse(rate_off=0.001)
    with pytest.raises(ValueError, match="they are not its numerator and denominator"):
        attribution_table(Intent(metric="refund_rate"), AnalysisWindows(focus=JULY), off, _catalog_by_channel_and_reason(), ["2026-07"])


def test_an_additive_metric_keeps_its_one_query_per_period() -> None:
    seen: list[Intent] = []

    def run(intent: Intent) -> tuple[list[str], list[list[Any]], str]:
        seen.append(intent)
        return [*intent.dimensions, "net_revenue"], [["华东", "医院", "A", 1.0]], "SELECT 1"

    table = inputs.attribution_table(Intent(metric="net_revenue"), AnalysisWindows(focus=JULY), run, load_catalog(), ["2026-07"])
    assert len(seen) == 2 and "method" not in table.params and table.columns == ["month", "region", "channel", "product", "net_revenue"]
