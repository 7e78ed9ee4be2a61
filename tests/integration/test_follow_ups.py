"""Follow-ups and clarification replies, planned by the rule planner against the session's turns and
run on the demo warehouse: each must return the rows of the same question asked in full."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any

import pytest

from memtool.planning.context import PlanContext, PreviousTurn
from memtool.planning.plan import Plan
from memtool.planning.rule_planner import RulePlanner
from memtool.semantic.catalog import load_catalog
from memtool.semantic.entities import EntityIndex
from memtool.sql.demo_warehouse import build_demo_warehouse
from memtool.sql.duckdb_warehouse import DuckDBWarehouse

ANCHOR = date(2026, 11, 29)


@dataclass
class Demo:
    planner: RulePlanner
    warehouse: DuckDBWarehouse

    def rows(self, plan: Plan) -> list[tuple[Any, ...]]:
        assert plan.status == "planned" and plan.sql, plan
        result = self.warehouse.run(plan.sql, max_rows=5000, timeout_seconds=20)
        return sorted(tuple(str(v) for v in row) for row in result.rows)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    path = tmp_path_factory.mktemp("warehouse") / "demo.duckdb"
    build_demo_warehouse(path, seed=7, scale=0.05, anchor=ANCHOR)
    warehouse = DuckDBWarehouse(path)
    catalog = load_catalog()
    try:
        yield Demo(RulePlanner(catalog, EntityIndex.from_warehouse(warehouse, catalog), ANCHOR), warehouse)
    finally:
        warehouse.close()


class Session:
    """The turns a session's working memory would hold, fed to the planner as AskFlow does."""

    def __init__(self, planner: RulePlanner) -> None:
        self.planner = planner
        self.turns: list[PreviousTurn] = []

    def ask(self, question: str) -> Plan:
        plan = self.planner.plan(question, context=PlanContext(turns=self.turns))
        status = "answered" if plan.status == "planned" else plan.status
        self.turns.append(
            PreviousTurn(
                episode_id=f"ep-{len(self.turns)}",
                question=question,
                status=status,
                intent=plan.intent.model_dump(mode="json") if plan.intent and status == "answered" else None,
                clarification=plan.clarification.model_dump() if plan.clarification else None,
            )
        )
        return plan


# (the conversation so far, the follow-up, the same question asked in full)
FOLLOW_UPS = [
    (["上个月各大区净收入"], "那按渠道拆分呢", "上个月各渠道净收入"),
    (["上个月各大区净收入"], "只看华东", "上个月华东各大区净收入"),
    (["上个月上海各渠道的净收入"], "换成杭州", "上个月杭州各渠道的净收入"),
    (["上个月华东各渠道的净收入"], "换成杭州", "上个月杭州各渠道的净收入"),
    (["net revenue by region last month"], "by product instead", "net revenue by product last month"),
    (["net revenue by channel last month"], "only Shanghai", "net revenue by channel in Shanghai last month"),
    (["net revenue by channel last month"], "and in September?", "net revenue by channel in September"),
    (["上个月各大区净收入"], "去年同期呢", "2025年10月各大区净收入"),
    (["上个月各大区净收入"], "换成处方量", "上个月各大区处方量"),
    (["上个月各产品净收入"], "只要前3", "上个月净收入前3的产品"),
    (["上个月电商渠道各大区的净收入"], "不限渠道", "上个月各大区的净收入"),
    (["orders by channel last month"], "regardless of channel", "orders last month"),
    (["上个月各渠道净收入"], "再按大区拆分", "上个月各渠道各大区净收入"),
    (["上个月各大区净收入"], "那销售额呢", "上个月各大区销售额"),
    (["每月净收入趋势"], "只看电商", "每月电商渠道净收入趋势"),
    (["上个月各大区净收入", "那按渠道拆分呢"], "只看华东", "上个月华东各渠道净收入"),
    (["上个月各大区净收入", "只看华东", "换成处方量"], "and in September?", "9月华东各大区处方量"),
    (["上个月各产品净收入", "只要前3"], "换成销量", "上个月销量前3的产品"),
    (["上个月各渠道的销售额", "只看华东"], "那北京呢", "上个月北京各渠道的销售额"),
    (["net revenue by channel in Shanghai last month"], "what about Hangzhou?", "net revenue by channel in Hangzhou last month"),
    (["上个月各渠道的销售额"], "不看电商", "上个月除了电商各渠道的销售额"),
    (["2026年Q1华东各渠道的销售额"], "那订单数按大区呢", "2026年Q1华东各大区的订单数"),
    (["2026年Q1华东各渠道的销售额"], "也看一下订单数", "2026年Q1华东各渠道的订单数"),
    (["net revenue by channel in Shanghai last month"], "also Hangzhou", "net revenue by channel in Shanghai and Hangzhou last month"),
    # a carried grouping the new metric lacks is dropped, with a word
    (["上个月各渠道的净收入"], "换成处方量", "上个月处方量"),
    (["上个月上海各渠道的净收入"], "也看一下北京", "上个月上海和北京各渠道的净收入"),
    (["今年每月的销售额"], "by city instead", "gross revenue by city this year"),
    (["本月华东的销售额"], "那上个月的订单数呢", "上个月华东的订单数"),
]


@pytest.mark.parametrize(("before", "follow_up", "in_full"), FOLLOW_UPS, ids=[f"{b[-1]} / {f}" for b, f, _ in FOLLOW_UPS])
def test_a_follow_up_returns_the_rows_of_the_full_question(demo: Demo, before: list[str], follow_up: str, in_full: str) -> None:
    session = Session(demo.planner)
    for question in before:
        assert session.ask(question).status == "planned"

    plan = session.ask(follow_up)

    assert demo.rows(plan) == demo.rows(demo.planner.plan(in_full)), plan.notes
    assert plan.carried_over
    assert any(note.startswith("carried over from the previous question") for note in plan.notes)


@pytest.mark.parametrize(
    "question", ["上个月各渠道销售额", "net revenue by city in September", "上个月华东的订单数"]
)
def test_a_question_that_stands_on_its_own_is_not_merged(demo: Demo, question: str) -> None:
    session = Session(demo.planner)
    session.ask("上个月杭州各大区的净收入")
    plan = session.ask(question)
    assert plan.carried_over == []
    assert demo.rows(plan) == demo.rows(demo.planner.plan(question))


def test_the_unit_of_a_this_time_condition_is_not_carried_over(demo: Demo) -> None:
    session = Session(demo.planner)
    session.ask("上个月各大区净收入")
    assert session.ask("这次用分").intent.unit == "分"  # type: ignore[union-attr]
    assert session.ask("只看华东").intent.unit is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("pending", "reply", "in_full"),
    [
        ("上个月华东各渠道的收入", "净收入", "上个月华东各渠道的净收入"),
        ("上个月华东各渠道的收入", "第一个", "上个月华东各渠道的销售额"),
        ("上个月华东各渠道的收入", "the second one", "上个月华东各渠道的净收入"),
        ("gross or net? revenue by channel in September", "net sales", "net revenue by channel in September"),
        ("上个月浙北各渠道的净收入", "杭州", "上个月杭州各渠道的净收入"),
        ("上个月西安的净收入", "上海", "上个月上海的净收入"),
        ("上个月净收入前5", "产品", "上个月净收入前5的产品"),
    ],
)
def test_a_clarification_reply_keeps_what_the_pending_question_had(demo: Demo, pending: str, reply: str, in_full: str) -> None:
    session = Session(demo.planner)
    asked = session.ask(pending)
    assert asked.status == "needs_clarification", asked

    plan = session.ask(reply)

    assert demo.rows(plan) == demo.rows(demo.planner.plan(in_full)), plan.notes


def test_only_a_clarified_unknown_or_ambiguous_term_is_learned(demo: Demo) -> None:
    ambiguous = Session(demo.planner)
    ambiguous.ask("上个月各大区的营收")
    learned = ambiguous.ask("净收入").learned
    assert learned is not None and (learned.term, learned.maps_to) == ("营收", {"metric": "net_revenue"})
    assert learned.episode_id == "ep-0"

    outside = Session(demo.planner)  # 西安 is a real city the data lacks: choosing 上海 teaches nothing
    outside.ask("上个月西安的净收入")
    assert outside.ask("上海").learned is None


def test_a_reply_that_leads_to_another_clarification_keeps_the_original_question_waiting(demo: Demo) -> None:
    session = Session(demo.planner)
    assert session.ask("江浙沪9月的营收").clarification.term == "营收"  # type: ignore[union-attr]
    second = session.ask("净收入")
    assert second.status == "needs_clarification" and second.clarification.term == "江浙沪"  # type: ignore[union-attr]
    assert second.learned is not None and second.learned.term == "营收"

    answer = session.ask("华东")

    assert demo.rows(answer) == demo.rows(demo.planner.plan("9月华东的净收入"))  # the window 9月 is kept
    assert answer.learned is not None and answer.learned.maps_to == {"dimension": "region", "value": "华东"}


def test_with_two_unknown_words_and_no_metric_the_metric_word_is_asked_about_first(demo: Demo) -> None:
    session = Session(demo.planner)
    first = session.ask("魔都上个月的单子数")
    assert first.clarification is not None and first.clarification.term == "单子数"
    assert "订单数" in first.clarification.options
    assert session.ask("订单数").clarification.term == "魔都"  # type: ignore[union-attr]
    answer = session.ask("上海")
    assert demo.rows(answer) == demo.rows(demo.planner.plan("上个月上海的订单数"))


def test_excluding_words_exclude_in_a_question_too(demo: Demo) -> None:
    plan = demo.planner.plan("上个月各渠道的销售额，不看电商")
    assert [(f.dimension, f.op, f.values) for f in plan.intent.filters] == [("channel", "not_in", ("电商",))]  # type: ignore[union-attr]


@pytest.mark.parametrize("reply", ["第三个", "都要", "neither"])
def test_a_reply_that_picks_no_option_asks_again_and_keeps_the_question_waiting(demo: Demo, reply: str) -> None:
    session = Session(demo.planner)
    session.ask("上个月华东各渠道的收入")
    again = session.ask(reply)
    assert again.status == "needs_clarification" and again.learned is None
    assert again.clarification.term == "收入" and again.clarification.pending_question == "上个月华东各渠道的收入"  # type: ignore[union-attr]
    answer = session.ask("净收入")
    assert demo.rows(answer) == demo.rows(demo.planner.plan("上个月华东各渠道的净收入"))
    assert answer.learned is not None and answer.learned.term == "收入"


def test_a_reply_may_settle_the_other_open_question_first(demo: Demo) -> None:
    session = Session(demo.planner)
    assert session.ask("上个月西安各渠道的收入").clarification.term == "西安"  # type: ignore[union-attr]
    second = session.ask("净收入")
    assert second.status == "needs_clarification" and second.clarification.term == "西安"  # type: ignore[union-attr]
    answer = session.ask("北京")
    assert demo.rows(answer) == demo.rows(demo.planner.plan("上个月北京各渠道的净收入"))


def test_a_preference_said_in_a_session_is_remembered_not_merged(demo: Demo) -> None:
    session = Session(demo.planner)
    session.ask("上个月各大区净收入")
    plan = session.ask("以后默认用万元")
    assert plan.status == "remembered" and plan.remember is not None and plan.remember.unit == "万元"


def test_a_preference_said_while_a_clarification_waits_leaves_it_waiting(demo: Demo) -> None:
    session = Session(demo.planner)
    session.ask("上个月各大区的收入")
    assert session.ask("以后默认用万元").status == "remembered"
    answer = session.ask("第二个")
    assert demo.rows(answer) == demo.rows(demo.planner.plan("上个月各大区的净收入"))


@pytest.mark.parametrize("reply", ["两个都不要", "全要", "都可以吧"])
def test_more_ways_of_declining_ask_again(demo: Demo, reply: str) -> None:
    session = Session(demo.planner)
    session.ask("上个月各大区的收入")
    again = session.ask(reply)
    assert again.status == "needs_clarification" and again.clarification.term == "收入"  # type: ignore[union-attr]


def test_words_of_the_conversation_are_never_learned_as_terms(demo: Demo) -> None:
    session = Session(demo.planner)
    first = session.ask("第二个")  # nothing waits: "第二" is asked about
    assert first.status == "needs_clarification"
    assert session.ask("订单数").learned is None


@pytest.mark.parametrize(("question", "term"), [("takings by region in September 2026", "takings"), ("今年各品牌的动销", "动销")])
def test_a_question_whose_unknown_word_may_be_its_metric_is_asked_about_not_merged(demo: Demo, question: str, term: str) -> None:
    session = Session(demo.planner)
    session.ask("上个月各大区处方量")
    asked = session.ask(question)
    assert asked.status == "needs_clarification" and asked.clarification.term == term  # type: ignore[union-attr]
    assert "销量" in asked.clarification.options or "units" in asked.clarification.options  # type: ignore[union-attr]
