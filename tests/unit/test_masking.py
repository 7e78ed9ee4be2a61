"""Masked questions and rebinding: a few-shot's shape matches other values, never another meaning.

Where the parser can parse the new question on its own, rebinding the example must give exactly
the parser's intent; that is the check that the bound values are the right ones.
"""

from __future__ import annotations

from datetime import date

import pytest

from memtool.semantic.catalog import load_catalog
from memtool.semantic.entities import EntityIndex
from memtool.semantic.intent import Intent, TimeWindow
from memtool.semantic.masking import MaskedQuestion, mask_question, rebind_intent, shape_key
from memtool.semantic.parser import QuestionParser

TODAY = date(2026, 11, 29)
RECORDED = date(2026, 10, 15)  # the example was answered six weeks earlier


@pytest.fixture(scope="module")
def parser() -> QuestionParser:
    catalog = load_catalog()
    return QuestionParser(catalog, EntityIndex.static(catalog))


def masked(parser: QuestionParser, question: str) -> MaskedQuestion:
    return mask_question(parser.recognise(question, today=TODAY))


def example_intent(parser: QuestionParser, question: str) -> dict:
    """The intent the example's answer ran with, as stored (JSON), resolved on the day it was asked."""
    result = parser.parse(question, today=RECORDED)
    assert result.intent is not None, result.clarification
    return result.intent.model_dump(mode="json")


def parsed_intent(parser: QuestionParser, question: str) -> Intent:
    result = parser.parse(question, today=TODAY)
    assert result.intent is not None, result.clarification
    return result.intent


# ---- masking ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "text"),
    [
        ("上周华东的动销", "{window}{region}的动销"),
        ("上个月华南的动销", "{window}{region}的动销"),
        ("上个月上海净收入前5名城市", "{window}{city}净收入前{n}名城市"),
        ("上周北京净收入前三名城市", "{window}{city}净收入前{n}名城市"),
        ("除了上海以外华东各城市上个月的净收入", "除了{city}以外{region}各城市{window}的净收入"),
        ("上个月上海净收入（万元）", "{window}{city}净收入{unit}"),
        ("net revenue in Shanghai last month", "net revenue in {city} {window}"),
        ("top 5 cities by net revenue last month in 万元", "top {n} cities by net revenue {window} in {unit}"),
        ("top three cities by net revenue last week", "top {n} cities by net revenue {window}"),
    ],
)
def test_values_become_typed_slots_and_everything_else_stays(parser, question, text):
    assert masked(parser, question).text == text


def test_the_slots_hold_the_values_they_replaced(parser):
    question = masked(parser, "除了上海以外华东各城市上个月的净收入前三名")

    assert [(s.kind, s.name, s.text, s.negated) for s in question.slots] == [
        ("entity", "city", "上海", True),
        ("entity", "region", "华东", False),
        ("window", "window", "上个月", False),
        ("n", "n", "三", False),
    ]
    assert [s.value for s in question.slots if s.kind != "window"] == ["上海", "华东", 3]
    assert question.slots[2].value == TimeWindow(start=date(2026, 10, 1), end=date(2026, 11, 1), label="上个月")


def test_english_names_resolve_to_the_warehouse_value(parser):
    english, chinese = masked(parser, "net revenue in Shanghai last month"), masked(parser, "上海上个月净收入")
    assert english.slots[0].value == chinese.slots[0].value == "上海"


@pytest.mark.parametrize(
    ("question", "other"),
    [
        ("上周华东的动销", "上周华东的净收入"),  # another (unknown vs known) metric
        ("上个月上海净收入", "上个月上海销量"),  # another metric
        ("上个月上海净收入", "除了上海上个月净收入"),  # a negation
        ("上个月各城市净收入前5名", "上个月各城市净收入后5名"),  # the other end of a ranking
        ("net revenue in Shanghai last month", "units in Shanghai last month"),
        ("net revenue in Shanghai last month", "net revenue excluding Shanghai last month"),
    ],
)
def test_another_metric_or_a_negation_is_another_shape(parser, question, other):
    assert masked(parser, question).key != masked(parser, other).key


def test_the_shape_key_ignores_case_spacing_and_trailing_punctuation():
    assert shape_key("Net  Revenue in {city} {window}？") == shape_key("net revenue in {city} {window}")


# ---- rebinding ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("example", "question"),
    [
        ("上个月上海净收入前5名城市", "上周北京净收入前三名城市"),
        ("除了上海以外华东各城市上个月的净收入", "除了杭州以外华南各城市上周的净收入"),
        ("上海和北京上个月净收入", "杭州和南京上周净收入"),
        ("上个月上海净收入同比", "上周北京净收入同比"),
        ("上海净收入环比", "北京净收入环比"),  # no window named: the default one, for today
        ("本月 vs 上月 上海净收入", "本月 vs 上月 北京净收入"),
        ("上个月上海净收入（万元）", "上周北京净收入（元）"),
        ("net revenue in Shanghai last month", "net revenue in Beijing last week"),
        ("top 5 cities by net revenue last month in 万元", "top 3 cities by net revenue last week in 万元"),
    ],
)
def test_rebinding_gives_what_the_parser_gives_for_the_new_question(parser, example, question):
    rebound = rebind_intent(example_intent(parser, example), example, question, parser, TODAY)
    assert rebound == parsed_intent(parser, question)


def test_a_question_the_parser_cannot_answer_is_answered_by_its_example(parser):
    # Given an example for a term the catalog does not know (动销), resolved by hand to units
    example = "上个月华南的动销"
    intent = {
        "metric": "units",
        "filters": [{"dimension": "region", "op": "in", "values": ["华南"]}],
        "time_window": {"start": "2026-09-01", "end": "2026-10-01", "label": "上个月"},
    }
    assert parser.parse("上周华东的动销", today=TODAY).intent is None  # the parser asks instead

    rebound = rebind_intent(intent, example, "上周华东的动销", parser, TODAY)

    assert rebound == Intent(
        metric="units",
        filters=({"dimension": "region", "op": "in", "values": ("华东",)},),
        time_window=TimeWindow(start=date(2026, 11, 16), end=date(2026, 11, 23), label="上周"),
    )


@pytest.mark.parametrize(
    ("example", "question"),
    [
        ("上个月上海净收入", "上个月上海销量"),  # another metric
        ("上个月上海净收入", "除了上海上个月净收入"),  # a negation
        ("除了上海上个月净收入", "上个月上海净收入"),  # the negation dropped
        ("上个月上海净收入", "上个月上海和北京净收入"),  # another slot set
        ("上个月上海净收入", "上海净收入"),  # no window any more
        ("net revenue in Shanghai last month", "units in Shanghai last month"),
        ("net revenue in Shanghai last month", "net revenue excluding Shanghai last month"),
        ("本月 vs 上月 上海净收入", "本周 vs 上周 北京净收入"),  # windows that compare differently
    ],
)
def test_another_shape_or_slot_set_does_not_rebind(parser, example, question):
    assert rebind_intent(example_intent(parser, example), example, question, parser, TODAY) is None


def test_a_slot_the_example_intent_does_not_hold_is_not_bound(parser):
    example = "上个月上海净收入前5名城市"
    stored = example_intent(parser, example)

    other_city = {**stored, "filters": [{"dimension": "city", "op": "in", "values": ["北京"]}]}
    other_limit = {**stored, "limit": 10}
    other_window = {**stored, "time_window": {"start": "2026-01-01", "end": "2026-02-01", "label": "1月"}}
    no_filter = {**stored, "filters": []}

    for intent in (other_city, other_limit, other_window, no_filter):
        assert rebind_intent(intent, example, "上周北京净收入前三名城市", parser, TODAY) is None
    assert rebind_intent({"metric": 7}, example, "上周北京净收入前三名城市", parser, TODAY) is None


def test_a_filter_that_did_not_come_from_the_words_stays(parser):
    example = "上个月上海净收入"
    stored = example_intent(parser, example)
    stored["filters"].append({"dimension": "channel", "op": "in", "values": ["线上"]})  # e.g. a taught term

    rebound = rebind_intent(stored, example, "上周北京净收入", parser, TODAY)

    assert rebound is not None
    assert [(f.dimension, f.values) for f in rebound.filters] == [("city", ("北京",)), ("channel", ("线上",))]
