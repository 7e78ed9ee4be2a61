"""The rule planner: intents and SQL, clarifications instead of guesses, corrections, units, knowledge."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from memtool.errors import ValidationFailed
from memtool.planning.context import KnowledgeItem, PlanContext, TermMapping, normalize_unit
from memtool.planning.rule_planner import RulePlanner
from memtool.clock import FrozenClock
from memtool.semantic.catalog import load_catalog
from memtool.semantic.entities import EntityIndex

TODAY = date(2026, 11, 29)
TENANT = "acme"


@pytest.fixture(scope="module")
def planner() -> RulePlanner:
    catalog = load_catalog()
    return RulePlanner(catalog, EntityIndex.static(catalog), TODAY)


def signature(planner: RulePlanner, question: str, **kwargs) -> str:
    plan = planner.plan(question, **kwargs)
    assert plan.status == "planned", plan
    assert plan.intent is not None
    return plan.intent.signature(tenant=TENANT, model_version=planner.catalog.model_version_for(plan.intent))


def mapping(term: str, memory_id: str = "mem_1", version: int = 1, **maps_to: str) -> TermMapping:
    return TermMapping.model_validate({"term": term, "maps_to": maps_to, "memory_id": memory_id, "version": version})


# ---- planned questions --------------------------------------------------------------------


def test_a_breakdown_question_plans_an_intent_and_sql(planner: RulePlanner) -> None:
    plan = planner.plan("上个月各渠道净收入是多少", route="nl2sql_query")

    assert plan.status == "planned" and plan.planner == "rules"
    assert plan.intent is not None
    assert plan.intent.metric == "net_revenue"
    assert plan.intent.dimensions == ("channel",)
    assert (plan.intent.time_window.start, plan.intent.time_window.end) == (date(2026, 10, 1), date(2026, 11, 1))
    assert plan.sql is not None and "refund_by_line" in plan.sql and "AS channel" in plan.sql
    assert any(c.source == "catalog:metric/net_revenue@2026.11.1" for c in plan.citations)


def test_english_and_chinese_of_the_same_question_share_an_intent(planner: RulePlanner) -> None:
    zh = planner.plan("上个月各渠道净收入")
    en = planner.plan("net revenue by channel last month")

    assert zh.intent is not None and en.intent is not None
    assert zh.sql == en.sql
    assert signature(planner, "上个月各渠道净收入") == signature(planner, "net revenue by channel last month")


def test_route_is_classified_when_not_forced(planner: RulePlanner) -> None:
    assert planner.plan("上个月净收入是多少").route == "kpi_lookup"
    assert planner.plan("上个月各渠道净收入").route == "nl2sql_query"


def test_a_question_without_a_window_gets_the_documented_default(planner: RulePlanner) -> None:
    single = planner.plan("净收入", route="kpi_lookup")
    trend = planner.plan("每月净收入", route="nl2sql_query")

    assert single.intent is not None and trend.intent is not None
    assert (single.intent.time_window.start, single.intent.time_window.end) == (date(2026, 10, 1), date(2026, 11, 1))
    assert (trend.intent.time_window.start, trend.intent.time_window.end) == (date(2025, 11, 1), date(2026, 11, 1))
    assert any("default window" in note for note in single.notes)


def test_deep_analysis_gets_a_monthly_series(planner: RulePlanner) -> None:
    plan = planner.plan("预测下个月净收入", route="deep_analysis_workflow")

    assert plan.status == "planned" and plan.intent is not None
    assert plan.intent.dimensions == ("month",)
    assert plan.intent.time_window.end <= TODAY
    assert any("forecast horizon" in note for note in plan.notes)


def test_today_may_be_a_callable_or_a_clock() -> None:
    catalog = load_catalog()
    entities = EntityIndex.static(catalog)
    by_callable = RulePlanner(catalog, entities, lambda: date(2026, 3, 15)).plan("上个月净收入")
    by_clock = RulePlanner(catalog, entities, FrozenClock(datetime(2026, 3, 15, 9, 0, tzinfo=UTC))).plan("上个月净收入")

    assert by_callable.intent is not None and by_clock.intent is not None
    assert by_callable.intent.time_window.start == by_clock.intent.time_window.start == date(2026, 2, 1)


@pytest.mark.parametrize(
    ("question", "kind", "current", "previous"),
    [
        ("10月和9月的净收入", "mom", ("2026-10-01", "2026-11-01"), ("2026-09-01", "2026-10-01")),
        ("销售额 本月 vs 上月", "mom", ("2026-11-01", "2026-11-30"), ("2026-10-01", "2026-11-01")),
        ("net revenue 2026 vs 2025", "yoy", ("2026-01-01", "2027-01-01"), ("2025-01-01", "2026-01-01")),
        ("上个月净收入同比", "yoy", ("2026-10-01", "2026-11-01"), ("2025-10-01", "2025-11-01")),
        ("本月净收入环比", "mom", ("2026-11-01", "2026-11-30"), ("2026-10-01", "2026-10-30")),
        ("gross revenue week over week last week", "wow", ("2026-11-16", "2026-11-23"), ("2026-11-09", "2026-11-16")),
    ],
)
def test_comparisons_name_both_windows(planner: RulePlanner, question: str, kind: str, current: tuple[str, str], previous: tuple[str, str]) -> None:
    plan = planner.plan(question)

    assert plan.intent is not None and plan.intent.comparison is not None
    window, other = plan.intent.time_window, plan.intent.comparison.window
    assert plan.intent.comparison.kind == kind
    assert (window.start.isoformat(), window.end.isoformat()) == current
    assert (other.start.isoformat(), other.end.isoformat()) == previous
    assert "_previous" in (plan.sql or "") and "_change_rate" in (plan.sql or "")


def test_two_windows_that_do_not_line_up_ask_which_one(planner: RulePlanner) -> None:
    plan = planner.plan("上周和去年的销售额")

    assert plan.status == "needs_clarification" and plan.clarification is not None
    assert plan.clarification.options == ["上周", "去年"]


# ---- clarifications -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "term", "expected_options"),
    [
        ("上个月收入是多少", "收入", ["销售额", "净收入"]),
        ("GMV last month", "GMV", ["gross revenue", "net revenue"]),
        ("revenue by channel last month", "revenue", ["gross revenue", "net revenue"]),
    ],
)
def test_an_ambiguous_metric_word_asks_with_the_candidates(planner: RulePlanner, question: str, term: str, expected_options: list[str]) -> None:
    plan = planner.plan(question)

    assert plan.status == "needs_clarification"
    assert plan.sql is None and plan.intent is None
    assert plan.clarification is not None
    assert plan.clarification.term == term
    assert plan.clarification.options == expected_options


def test_a_city_outside_the_warehouse_asks_which_city(planner: RulePlanner) -> None:
    plan = planner.plan("西安上个月销售额")

    assert plan.status == "needs_clarification" and plan.clarification is not None
    assert plan.clarification.term == "西安"
    assert "上海" in plan.clarification.options and "西安" not in plan.clarification.options
    assert "西安" in plan.clarification.question


@pytest.mark.parametrize(
    ("question", "term"),
    [("上个月利润是多少", "利润"), ("profit by region last month", "profit"), ("魔都上个月销售额", "魔都"), ("net revenue for Lhasa last month", "Lhasa")],
)
def test_an_unknown_term_asks_instead_of_guessing(planner: RulePlanner, question: str, term: str) -> None:
    plan = planner.plan(question)

    assert plan.status == "needs_clarification" and plan.sql is None
    assert plan.clarification is not None and plan.clarification.term == term
    assert plan.clarification.options


@pytest.mark.parametrize(
    ("question", "term"),
    [
        ("which product category had the highest refund amount in September?", "category"),
        ("net revenue by city tier last month", "tier"),
    ],
)
def test_a_word_that_renames_a_dimension_asks_instead_of_grouping_by_the_dimension(
    planner: RulePlanner, question: str, term: str
) -> None:
    """"product category" is not the product: answering by product and dropping the word would be
    an answer to another question."""
    plan = planner.plan(question)

    assert plan.status == "needs_clarification" and plan.sql is None
    assert plan.clarification is not None and plan.clarification.term == term


@pytest.mark.parametrize(
    ("question", "dimension"),
    [("top 3 products ordered in September by net revenue", "product"), ("net revenue by channel paid last month", "channel")],
)
def test_a_participle_after_a_dimension_describes_the_rows_and_is_answered(
    planner: RulePlanner, question: str, dimension: str
) -> None:
    plan = planner.plan(question)

    assert plan.status == "planned" and plan.intent is not None
    assert plan.intent.dimensions == (dimension,)


def test_a_question_with_no_metric_offers_the_metrics(planner: RulePlanner) -> None:
    plan = planner.plan("how many widgets last month")

    assert plan.status == "needs_clarification" and plan.clarification is not None
    assert "net revenue" in plan.clarification.options and len(plan.clarification.options) == 8


def test_a_dimension_the_metric_lacks_asks_for_another_metric(planner: RulePlanner) -> None:
    plan = planner.plan("各渠道处方量")

    assert plan.status == "needs_clarification" and plan.clarification is not None
    assert "处方量" not in plan.clarification.options and "销量" in plan.clarification.options


# ---- corrections teach terms ----------------------------------------------------------------


def test_a_correction_teaches_a_metric_word(planner: RulePlanner) -> None:
    before = planner.plan("GMV by channel last month")
    context = PlanContext(corrections=[mapping("GMV", "mem_gmv", 3, metric="gross_revenue")])
    after = planner.plan("GMV by channel last month", context=context)

    assert before.status == "needs_clarification"
    assert after.status == "planned" and after.intent is not None
    assert after.intent.metric == "gross_revenue"
    assert any("mem_gmv@v3" in note for note in after.notes)
    assert any(c.source == "memory:mem_gmv@v3" for c in after.citations)


def test_a_correction_teaches_a_value_and_a_grouping(planner: RulePlanner) -> None:
    context = PlanContext(
        corrections=[
            mapping("魔都", "mem_city", 1, dimension="city", value="Shanghai"),
            mapping("战区", "mem_group", 2, dimension="region"),
        ]
    )
    city = planner.plan("魔都上个月销售额", context=context)
    grouped = planner.plan("各战区上个月净收入", context=context)

    assert city.intent is not None and grouped.intent is not None
    assert [(f.dimension, f.values) for f in city.intent.filters] == [("city", ("上海",))]
    assert grouped.intent.dimensions == ("region",)


def test_a_correction_to_something_unknown_is_skipped_and_noted(planner: RulePlanner) -> None:
    context = PlanContext(corrections=[mapping("GMV", "mem_bad", 1, metric="gmv_total"), mapping("魔都", "mem_bad2", 1, dimension="city", value="西安")])
    plan = planner.plan("GMV last month", context=context)

    assert plan.status == "needs_clarification"
    assert any("mem_bad@v1" in note and "skipped" in note for note in plan.notes)
    assert any("mem_bad2@v1" in note and "skipped" in note for note in plan.notes)


# ---- units: conditions beat the profile without changing it ---------------------------------


def test_conditions_win_over_the_profile_without_changing_it(planner: RulePlanner) -> None:
    context = PlanContext(profile_unit="元", conditions={"unit": "万元"})
    this_time = planner.plan("上个月各渠道销售额", context=context)
    next_time = planner.plan("上个月各渠道销售额", context=PlanContext(profile_unit=context.profile_unit))

    assert this_time.intent is not None and this_time.intent.unit == "万元"
    assert "/ 10000.0" in (this_time.sql or "") and "gross_revenue_10k_yuan" in (this_time.sql or "")
    assert any("conditions" in n and "profile unit 元 unchanged" in n for n in this_time.notes)
    assert context.profile_unit == "元"
    assert next_time.intent is not None and next_time.intent.unit is None
    assert "10000" not in (next_time.sql or "")


def test_the_profile_unit_applies_when_nothing_else_is_said(planner: RulePlanner) -> None:
    plan = planner.plan("net revenue last month", context=PlanContext(profile_unit="万元"))

    assert plan.intent is not None and plan.intent.unit == "万元"
    assert "unit 万元 from the profile" in plan.notes


@pytest.mark.parametrize(
    ("question", "unit", "column", "sql_fragment"),
    [
        ("用万元显示上个月销售额", "万元", "gross_revenue_10k_yuan", "/ 10000.0, 2)"),
        ("上个月销售额，单位分", "分", "gross_revenue_fen", "* 100, 0)"),
        ("net revenue last month in 10k yuan", "万元", "net_revenue_10k_yuan", "/ 10000.0, 2)"),
        ("net revenue last month in fen", "分", "net_revenue_fen", "* 100, 0)"),
    ],
)
def test_unit_words_in_the_question_convert_money_in_sql(planner: RulePlanner, question: str, unit: str, column: str, sql_fragment: str) -> None:
    plan = planner.plan(question, context=PlanContext(conditions={"unit": "元"}))

    assert plan.intent is not None and plan.intent.unit == unit
    assert f"AS {column}" in (plan.sql or "") and sql_fragment in (plan.sql or "")


def test_units_do_not_touch_counts(planner: RulePlanner) -> None:
    plan = planner.plan("上个月销量", context=PlanContext(conditions={"unit": "万元"}))

    assert plan.intent is not None and plan.intent.unit is None
    assert "AS units" in (plan.sql or "") and "10000" not in (plan.sql or "")


def test_a_condition_unit_that_names_no_unit_is_a_validation_error(planner: RulePlanner) -> None:
    with pytest.raises(ValidationFailed) as caught:
        planner.plan("上个月销售额", context=PlanContext(conditions={"unit": "dollars"}))

    assert caught.value.field == "conditions.unit"


def test_unit_words_normalise() -> None:
    assert [normalize_unit(v) for v in ("元", "万元", "分", "以后默认用万元", "yuan", "10k", "percent", None)] == [
        "元", "万元", "分", "万元", "元", "万元", None, None,
    ]  # fmt: skip


def test_the_chart_preference_is_recorded(planner: RulePlanner) -> None:
    plan = planner.plan("每月净收入", context=PlanContext(profile_chart="bar", conditions={"chart": "line"}))

    assert "chart line from this request's conditions" in plan.notes


# ---- knowledge questions ------------------------------------------------------------------------


def test_knowledge_qa_answers_with_the_cited_definition_and_no_sql(planner: RulePlanner) -> None:
    catalog = planner.catalog
    context = PlanContext(
        knowledge=[
            KnowledgeItem(memory_id="mem_k1", version=2, key="metric.net_revenue", text="财务口径：净收入按支付月份出账，退款冲回原支付月份。"),
            KnowledgeItem(memory_id="mem_k2", version=1, key="metric.rx_volume", text="处方量只统计院内处方。"),
        ]
    )
    plan = planner.plan("净收入怎么算？", context=context)

    assert plan.route == "business_knowledge_qa" and plan.status == "answered"
    assert plan.sql is None and plan.intent is None
    sources = [c.source for c in plan.citations]
    assert sources == ["catalog:metric/net_revenue@2026.11.1", "memory:mem_k1@v2"]
    assert plan.citations[0].text == catalog.metric("net_revenue").definition_zh
    assert catalog.metric("net_revenue").definition_zh in (plan.answer or "")
    assert "paid_at" in (plan.answer or "") and "处方量只统计院内处方" not in (plan.answer or "")


def test_knowledge_qa_in_english_and_for_an_ambiguous_word(planner: RulePlanner) -> None:
    english = planner.plan("How is refund rate calculated?")
    ambiguous = planner.plan("收入是什么意思")

    assert english.status == "answered" and english.citations[0].source == "catalog:metric/refund_rate@2026.11.1"
    assert english.citations[0].text.startswith("Refund rate")
    assert [c.source for c in ambiguous.citations] == ["catalog:metric/gross_revenue@2026.11.1", "catalog:metric/net_revenue@2026.11.1"]


def test_knowledge_qa_about_nothing_known_asks(planner: RulePlanner) -> None:
    plan = planner.plan("这个怎么算", route="business_knowledge_qa")

    assert plan.status == "needs_clarification" and plan.clarification is not None and plan.clarification.options


# ---- the cache key -----------------------------------------------------------------------------


def test_signature_differs_for_different_cities_and_matches_across_languages(planner: RulePlanner) -> None:
    shanghai = signature(planner, "上海上周销售额")
    beijing = signature(planner, "北京上周销售额")
    english = signature(planner, "Shanghai gross revenue last week")

    assert shanghai != beijing
    assert shanghai == english


def test_signature_differs_for_different_absolute_windows_and_not_for_words() -> None:
    catalog = load_catalog()
    entities = EntityIndex.static(catalog)
    november = RulePlanner(catalog, entities, date(2026, 11, 29))
    december = RulePlanner(catalog, entities, date(2026, 12, 2))

    assert signature(november, "上个月净收入") != signature(december, "上个月净收入")
    assert signature(november, "上个月净收入") == signature(november, "2026年10月净收入")


# ---- the forced route and the flow's context -------------------------------------------------------


def test_a_forced_bad_route_is_a_validation_error(planner: RulePlanner) -> None:
    with pytest.raises(ValidationFailed) as caught:
        planner.plan("上个月净收入", route="sql_please")

    assert caught.value.field == "route"


def test_plan_context_from_the_flow_state() -> None:
    from memtool.flows.ask.state import AskState

    state = AskState.model_validate(
        {
            "episode_id": "ep_1",
            "caller": {"tenant": "acme", "user": "li"},
            "input": {"question": "GMV last month", "conditions": {"unit": "分", "chart": None}},
            "started_at": "2026-11-29T09:00:00Z",
            "profile": {"unit": "以后默认用万元", "chart": "bar"},
            "recalled": [
                {"id": "mem_c", "version": 4, "kind": "correction", "content": "GMV 指销售额", "value": {"term": "GMV", "maps_to": {"metric": "gross_revenue"}}},
                {"id": "mem_flat", "version": 1, "kind": "correction", "content": "华东大区即华东", "value": {"term": "华东大区", "dimension": "region", "value": "华东"}},
                {"id": "mem_rule", "version": 1, "kind": "correction", "content": "a SQL repair rule", "value": {"repair": "x"}},
                {"id": "mem_k", "version": 2, "kind": "knowledge", "content": "净收入按支付月份出账", "key": "metric.net_revenue"},
                {"id": "mem_p", "version": 1, "kind": "episodic", "content": "an episode"},
            ],
        }
    )
    context = state.plan_context()

    assert (context.tenant, context.user, context.profile_unit, context.profile_chart) == ("acme", "li", "万元", "bar")
    assert context.conditions == {"unit": "分"}
    assert [(m.term, m.source) for m in context.corrections] == [("GMV", "memory:mem_c@v4"), ("华东大区", "memory:mem_flat@v1")]
    assert [k.source for k in context.knowledge] == ["memory:mem_k@v2"]


def test_plan_context_carries_the_session_turns_and_the_approved_examples() -> None:
    from memtool.flows.ask.state import AskState

    turns = [{"episode_id": f"ep_{n}", "question": f"q{n}", "status": "answered", "intent": {"metric": "net_revenue"}} for n in range(7)]
    example = {"memory_id": "mem_f", "version": 3, "question": "上周华东的动销", "sql": "SELECT 1", "masked": "上周<region>的动销", "similarity": 0.9}
    state = AskState.model_validate(
        {"episode_id": "ep_7", "caller": {"tenant": "acme", "user": "li"}, "input": {"question": "那按渠道呢"}, "started_at": "2026-11-29T09:00:00Z", "working": turns, "fewshots": [example]}
    )

    context = state.plan_context()

    assert [t.episode_id for t in context.turns] == ["ep_2", "ep_3", "ep_4", "ep_5", "ep_6"]  # the last five, oldest first
    assert [(f.source, f.question) for f in context.fewshots] == [("memory:mem_f@v3", "上周华东的动销")]


# ---- the planner's data: catalog and entity values ------------------------------------------------


def test_every_metric_and_dimension_has_names_definitions_and_a_version() -> None:
    catalog = load_catalog()

    assert {m.name for m in catalog.metrics} == {
        "gross_revenue", "net_revenue", "refund_amount", "refund_rate", "units", "order_count", "avg_order_value", "rx_volume",
    }  # fmt: skip
    assert {d.name for d in catalog.dimensions} >= {"region", "city", "channel", "product", "brand", "therapeutic_area", "month", "week", "day"}
    for spec in [*catalog.metrics, *catalog.dimensions]:
        assert spec.zh and spec.en and spec.definition_zh and spec.definition_en and spec.model_version
    assert catalog.metric("rx_volume").time_column == "rx_date"
    assert {m.time_column for m in catalog.metrics if m.name != "rx_volume"} == {"paid_at"}
    assert "channel" not in catalog.metric("rx_volume").dimensions


def test_static_entities_resolve_chinese_and_english_names_to_warehouse_values() -> None:
    catalog = load_catalog()
    entities = EntityIndex.static(catalog)

    def resolved(name: str) -> list[tuple[str, str]]:
        return [(e.dimension, e.value) for e in entities.lookup(name)]

    assert resolved("上海") == resolved("Shanghai") == resolved("shanghai") == [("city", "上海")]
    assert resolved("华东") == resolved("East China") == [("region", "华东")]
    assert resolved("电商") == resolved("e-commerce") == resolved("ecommerce") == resolved("E-Commerce") == [("channel", "电商")]
    assert resolved("retail pharmacy") == [("channel", "零售药店")]
    assert resolved("oncology") == [("therapeutic_area", "肿瘤")]
    assert resolved("西安") == [] and any(o.name == "西安" for o in entities.outside)
    assert entities.source == "static"


def test_a_session_turn_that_is_not_a_mapping_is_no_conversation_state() -> None:
    from memtool.planning.context import plan_context

    turns: list = ["SELECT 1", 42, None, {"episode_id": "ep_1", "question": "上个月净收入", "status": "answered"}]
    context = plan_context(tenant="acme", user="li", session_turns=turns)
    assert [(t.episode_id, t.question) for t in context.turns] == [("ep_1", "上个月净收入")]


# ---- words that change the number are used or asked about (issue 22) ------------------------


@pytest.mark.parametrize("question", ["上个月净收入最高是多少", "what was the highest net revenue last month?", "上个月最低的销售额"])
def test_a_superlative_with_nothing_to_rank_is_asked_about_not_dropped(planner: RulePlanner, question: str) -> None:
    plan = planner.plan(question)

    assert plan.status == "needs_clarification" and plan.sql is None, plan
    assert plan.clarification is not None and plan.clarification.reason == "superlative_without_dimension"
    assert {"大区", "渠道"} <= set(plan.clarification.options) or {"region", "channel"} <= set(plan.clarification.options)


@pytest.mark.parametrize(
    ("question", "dimensions", "limit"),
    [("上个月哪个区域净收入最高", ("region",), 1), ("北京和上海上个月哪个净收入最高", ("city",), None), ("每月净收入最高的是哪个月", ("month",), None)],
)
def test_a_superlative_over_something_still_ranks_it(planner: RulePlanner, question: str, dimensions: tuple[str, ...], limit: int | None) -> None:
    plan = planner.plan(question)

    assert plan.status == "planned" and plan.intent is not None, plan
    assert plan.intent.dimensions == dimensions and plan.intent.order == "desc"
    assert plan.intent.limit == limit


@pytest.mark.parametrize("question", ["渠道为医院的上个月净收入", "上个月渠道是医院的净收入", "上个月医院渠道的净收入"])
def test_a_dimension_that_names_its_own_value_filters_and_does_not_group(planner: RulePlanner, question: str) -> None:
    plan = planner.plan(question)

    assert plan.status == "planned" and plan.intent is not None, plan
    assert plan.intent.dimensions == ()
    assert [(f.dimension, f.values) for f in plan.intent.filters] == [("channel", ("医院",))]
