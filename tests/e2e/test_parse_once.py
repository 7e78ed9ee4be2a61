"""One ask reads its question once: the route classifier, the SQL cache, the planner, a follow-up
and the analysis steps share the parser's one reading of the raw string (``Vocabulary.scan``),
over the real AskFlow on the local engine (docs/asking.md, "One reading per question")."""

from __future__ import annotations

import pytest

from memtool.runtime import container


def _scans() -> int:
    return container.rule_planner().parser.vocabulary.scans


@pytest.mark.parametrize(
    ("question", "route"),
    [
        ("上个月各渠道的净收入", "nl2sql_query"),
        ("top 5 cities by net revenue last month", "nl2sql_query"),
        ("上个月净收入是多少", "kpi_lookup"),
        ("为什么9月武汉的净收入下降了", "deep_analysis_workflow"),
    ],
)
def test_an_ask_reads_its_question_once(api, question, route):
    before = _scans()

    reply = api.call("POST", "/ask", {"question": question})

    assert reply.status == 200, reply.body
    answer = reply.json()
    assert answer["status"] == "answered", answer
    assert answer["route"] == route
    assert _scans() - before == 1


def test_a_follow_up_reads_only_the_new_words(api):
    first = api.call("POST", "/ask", {"question": "上个月各渠道的净收入", "session_id": "s-once"}).json()
    assert first["status"] == "answered", first
    before = _scans()

    follow_up = api.call("POST", "/ask", {"question": "那订单数呢", "session_id": "s-once"}).json()

    assert follow_up["status"] == "answered", follow_up
    assert "channel" in follow_up["columns"]  # the grouping carried over from the first turn
    assert _scans() - before == 1


def test_the_same_question_on_another_day_is_read_again() -> None:
    from datetime import date

    vocabulary = container.rule_planner().parser.vocabulary
    before = vocabulary.scans
    first = vocabulary.scan("上个月的净收入", date(2026, 3, 1))
    assert vocabulary.scan("上个月的净收入", date(2026, 3, 1)) is first
    other_day = vocabulary.scan("上个月的净收入", date(2026, 4, 1))
    assert vocabulary.scans - before == 2
    [march] = [s.payload for s in first if s.kind == "time"]
    [april] = [s.payload for s in other_day if s.kind == "time"]
    assert march.window.start == date(2026, 2, 1) and april.window.start == date(2026, 3, 1)
