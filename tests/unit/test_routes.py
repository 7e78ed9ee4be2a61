"""Route classification from the question's words, and validation of a forced route."""

from __future__ import annotations

import pytest

from memtool.errors import ValidationFailed
from memtool.planning.plan import ROUTES
from memtool.planning.routes import classify_route, parse_forced_route

KNOWLEDGE = [
    "净收入怎么算？",
    "净收入如何计算",
    "退款率的口径是什么",
    "客单价的定义",
    "销售额是什么意思",
    "处方量是什么",
    "How is net revenue calculated?",
    "What is net revenue?",
    "What does GMV mean?",
    "definition of refund rate",
    "how do you compute average order value",
]
DEEP = [
    "上个月华东净收入为什么下降",
    "预测下个月净收入",
    "各城市净收入有没有异常",
    "净收入下降的归因分析",
    "对城市按销售额做聚类",
    "处方量和销量的相关性",
    "Why did net revenue drop in September?",
    "forecast net revenue for the next 3 months",
    "find anomalies in refund rate by product",
    "what are the drivers of the refund spike",
    "cluster cities by units sold",
    "correlation between rx volume and units by city",
]
KPI = [
    "上个月净收入是多少",
    "上海上周销售额",
    "今年的订单数",
    "上个月净收入同比",
    "电商渠道本月退款率",
    "2026年Q1处方量",
    "net revenue last month",
    "What was the net revenue last month?",
    "YTD units",
    "Shanghai gross revenue last week",
    "refund rate in March 2026",
    "average order value yesterday",
]
NL2SQL = [
    "上个月各渠道净收入",
    "按城市看今年销售额",
    "净收入最高的3个城市",
    "今年每月净收入",
    "退款率走势",
    "net revenue by channel last month",
    "top 5 products by net revenue this year",
    "monthly refund rate trend",
    "units per city in 2025",
    "which channel had the highest refund rate last month",
    "orders by region in Q1 2026",
]


@pytest.mark.parametrize("question", KNOWLEDGE)
def test_definition_questions_go_to_knowledge(question: str) -> None:
    assert classify_route(question) == "business_knowledge_qa"


@pytest.mark.parametrize("question", DEEP)
def test_analysis_questions_go_to_the_deep_workflow(question: str) -> None:
    assert classify_route(question) == "deep_analysis_workflow"


@pytest.mark.parametrize("question", ["净收入对订单数回归", "净收入的回归分析，按城市", "regress net revenue on order count by city", "各城市净收入和订单数相关吗"])
def test_regression_and_correlation_questions_go_to_the_deep_workflow(question: str) -> None:
    assert classify_route(question) == "deep_analysis_workflow"


def test_several_measures_need_no_clarification_on_the_deep_route_only() -> None:
    from datetime import date

    from memtool.planning.rule_planner import RulePlanner
    from memtool.semantic.catalog import load_catalog
    from memtool.semantic.entities import EntityIndex

    catalog = load_catalog()
    planner = RulePlanner(catalog, EntityIndex.static(catalog), date(2026, 11, 29))
    deep = planner.plan("各城市净收入和订单数相关吗", route="deep_analysis_workflow", context=None)
    assert deep.status == "planned" and deep.intent.metric == "net_revenue"
    assert any("several measures named (net_revenue, order_count)" in n for n in deep.notes)
    plain = planner.plan("各城市净收入和订单数", route="nl2sql_query", context=None)
    assert plain.status == "needs_clarification" and plain.clarification.reason == "several_metrics"


@pytest.mark.parametrize("question", KPI)
def test_one_number_questions_are_kpi_lookups(question: str) -> None:
    assert classify_route(question) == "kpi_lookup"


@pytest.mark.parametrize("question", NL2SQL)
def test_breakdowns_rankings_and_trends_are_nl2sql(question: str) -> None:
    assert classify_route(question) == "nl2sql_query"


def test_each_route_has_at_least_eight_examples_in_both_languages() -> None:
    for examples in (KNOWLEDGE, DEEP, KPI, NL2SQL):
        chinese = [q for q in examples if any("\u4e00" <= ch <= "\u9fff" for ch in q)]
        assert len(examples) >= 8
        assert chinese and len(chinese) < len(examples)


def test_what_is_with_a_period_asks_for_data_not_a_definition() -> None:
    assert classify_route("What is net revenue?") == "business_knowledge_qa"
    assert classify_route("What is the net revenue for last month?") == "kpi_lookup"
    assert classify_route("What is the net revenue by channel?") == "nl2sql_query"


@pytest.mark.parametrize("route", ROUTES)
def test_a_forced_route_in_routes_is_accepted(route: str) -> None:
    assert parse_forced_route(route) == route
    assert parse_forced_route(f"  {route.upper()} ") == route


@pytest.mark.parametrize("bad", ["sql", "kpi", "", "nl2sql_query; drop table", None, 3, ["kpi_lookup"]])
def test_a_forced_route_outside_routes_is_a_validation_error_on_route(bad: object) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_forced_route(bad)

    assert caught.value.field == "route"
    assert caught.value.to_body()["error"] == "validation_error"


@pytest.mark.parametrize(
    ("question", "route"),
    [
        # 原因/reason naming the refund-reason dimension: a breakdown
        ("退款原因分布", "nl2sql_query"),
        ("refund rate by reason", "nl2sql_query"),
        ("上个月各退款原因的退款额", "nl2sql_query"),
        ("按原因看退款率", "nl2sql_query"),
        ("refund amount by refund reason last month", "nl2sql_query"),
        # a reason value is a filter: one number
        ("质量问题的退款额", "kpi_lookup"),
        ("refund rate for quality issues last month", "kpi_lookup"),
        # 原因/why asking for an explanation: an analysis
        ("为什么6月退款异常高", "deep_analysis_workflow"),
        ("净收入下降的原因是什么", "deep_analysis_workflow"),
        ("退款增加的原因", "deep_analysis_workflow"),
        ("各退款原因的退款额有没有异常", "deep_analysis_workflow"),
        ("why did refunds by reason spike in June", "deep_analysis_workflow"),
    ],
)
def test_reason_as_a_dimension_is_a_query_and_reason_as_why_is_an_analysis(question: str, route: str) -> None:
    assert classify_route(question) == route
