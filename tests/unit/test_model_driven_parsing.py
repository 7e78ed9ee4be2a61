"""What the parser reads from the tenant's model, and words it must not drop: it is not the demo's."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from memtool.planning.rule_planner import RulePlanner
from memtool.semantic.catalog import load_catalog
from memtool.semantic.entities import EntityIndex

ROOT = Path(__file__).resolve().parents[2]
TPCH = load_catalog(ROOT / "examples" / "tpch" / "model.yaml")
DEMO = load_catalog()


@pytest.fixture(scope="module")
def tpch() -> RulePlanner:
    assert TPCH.as_of is not None
    return RulePlanner(TPCH, EntityIndex.static(TPCH), today=lambda: TPCH.as_of)  # type: ignore[arg-type, return-value]


@pytest.fixture(scope="module")
def demo() -> RulePlanner:
    return RulePlanner(DEMO, EntityIndex.static(DEMO), today=date(2026, 11, 29))


@pytest.mark.parametrize(
    ("question", "term"),
    [
        ("Average quantity by ship mode in 1994", "Average"),  # a statistic no metric computes
        ("1994年各运输方式的平均销量", "平均"),
        ("Number of orders by order status", "status"),  # what to group by, unknown to the model
        ("Quantity of returned items by ship mode", "returned"),  # a word of another metric's phrase
    ],
)
def test_a_word_that_would_change_the_number_is_asked_about_not_dropped(tpch: RulePlanner, question: str, term: str) -> None:
    plan = tpch.plan(question)
    assert plan.status == "needs_clarification" and plan.clarification is not None, plan.notes
    assert plan.clarification.term == term


def test_the_demo_asks_about_a_grouping_it_does_not_have(demo: RulePlanner) -> None:
    plan = demo.plan("net revenue by customer nation in 1995")
    assert plan.status == "needs_clarification" and plan.clarification is not None
    assert plan.clarification.term in ("customer", "nation")
    # a harmless word still is not a question: "our" changes nothing
    assert demo.plan("What were our net sales in Shanghai last month?").status == "planned"


def test_a_historical_data_set_reads_relative_periods_as_of_its_end(tpch: RulePlanner) -> None:
    plan = tpch.plan("Revenue last month")
    assert plan.intent is not None and plan.intent.time_window is not None
    assert (plan.intent.time_window.start, plan.intent.time_window.end) == (date(1998, 7, 1), date(1998, 8, 1))
    every_row = tpch.plan("Number of orders by year")  # default_window: all
    assert every_row.intent is not None and every_row.intent.time_window is None


def test_the_demos_vocabulary_is_not_the_parsers(tpch: RulePlanner) -> None:
    # 渠道 (channel) is a demo word: for TPC-H it is unknown, not silently dropped
    plan = tpch.plan("上个月各渠道净收入")
    assert plan.status == "needs_clarification" and plan.clarification is not None
    assert (plan.clarification.term or "").startswith("渠道")
    assert "客户国家" in plan.clarification.question  # the options are the model's own dimensions


def test_money_is_in_the_models_currency(tpch: RulePlanner) -> None:
    plan = tpch.plan("1995年的总收入是多少？")
    assert "unit USD from the model" in plan.notes and plan.intent is not None and plan.intent.unit is None
    scaled = tpch.plan("1995年的总收入是多少万元？")  # a yuan scale on a dollar model: not applied, said so
    assert scaled.intent is not None and scaled.intent.unit is None and scaled.sql is not None and "10000" not in scaled.sql
    assert "unit 万元 ignored: this model's money is in USD" in scaled.notes


def test_citations_name_the_model_version(tpch: RulePlanner) -> None:
    plan = tpch.plan("收入怎么算？")
    assert plan.status == "answered" and [c.source for c in plan.citations] == ["catalog:metric/revenue@2026.12.1"]


@pytest.mark.parametrize(
    ("question", "dimension"),
    [
        ("1995年德国供应商的收入", "supplier_nation"),
        ("Revenue from German suppliers in 1995", "supplier_nation"),
        ("1995年德国客户的收入", "customer_nation"),
        ("Revenue from customers in GERMANY by supplier nation in 1995", "customer_nation"),
        ("1994年亚洲各国客户的收入", "customer_region"),
    ],
)
def test_a_value_of_two_roles_is_read_by_the_dimension_named_next_to_it(tpch: RulePlanner, question: str, dimension: str) -> None:
    plan = tpch.plan(question)
    assert plan.status == "planned" and plan.intent is not None, plan.clarification
    assert [f.dimension for f in plan.intent.filters] == [dimension]


def test_a_value_of_two_roles_alone_is_asked_about(tpch: RulePlanner) -> None:
    plan = tpch.plan("Revenue from GERMANY in 1995")
    assert plan.status == "needs_clarification" and plan.clarification is not None
    assert plan.clarification.reason == "ambiguous_value" and len(plan.clarification.options) == 2


def test_a_model_without_chinese_nouns_asks_instead_of_failing() -> None:
    """An unedited draft has English nouns only: 按<noun> must match nothing, not the empty noun."""
    from datetime import date

    from memtool.planning.rule_planner import RulePlanner
    from memtool.semantic.catalog import Catalog, load_catalog
    from memtool.semantic.entities import EntityIndex

    document = load_catalog().model_dump(mode="json")
    for dimension in document["dimensions"]:
        dimension["nouns_zh"], dimension["group_terms_zh"] = [], []
    catalog = Catalog.model_validate(document)
    planner = RulePlanner(catalog, EntityIndex.static(catalog), today=date(2026, 11, 29))
    assert planner.plan("按渠道的净收入").status == "needs_clarification"
    english = planner.plan("net revenue by channel last month")
    assert english.status == "planned" and english.intent is not None and english.intent.dimensions == ("channel",)
