"""The shapes people ask first, over HTTP on the local runtime: right, no_data, or a question back.

Issue 22's demo shapes: a comparison of two values, a share, a period outside the data. For each,
``answered`` is the claim that every part of the question is in the SQL, so every answered case
is checked against hand-written SQL on the same warehouse, and every other case by its status.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memtool.demo import ApiClient
from memtool.runtime import container
from memtool.runtime.local import LocalRuntime
from memtool.settings import use_settings
from tests.support import ROOT

# The demo's test lines and unpaid lines never count; net revenue is gross - discount - refunds.
NET = (
    "SELECT {keys} ROUND(SUM(ol.gross_amount - ol.discount_amount) - SUM(COALESCE(rf.refund_amount, 0)), 2) AS v "
    "FROM fact_order_line ol "
    "LEFT JOIN (SELECT order_id, line_id, SUM(refund_amount) AS refund_amount FROM fact_refund GROUP BY 1, 2) rf "
    "ON rf.order_id = ol.order_id AND rf.line_id = ol.line_id "
    "JOIN dim_region dr ON dr.region_id = ol.region_id JOIN dim_channel dc ON dc.channel_id = ol.channel_id "
    "WHERE NOT ol.is_test AND ol.paid_at IS NOT NULL AND ol.paid_at >= DATE '{start}' AND ol.paid_at < DATE '{end}' {where} {group}"
)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    started = LocalRuntime(home=tmp_path_factory.mktemp("shapes") / "home", port=0, root=ROOT, warehouse_scale=0.02).start()
    try:
        yield started
    finally:
        use_settings(started.settings)
        started.stop()


@pytest.fixture(autouse=True)
def _runtime_settings(runtime: LocalRuntime) -> None:
    use_settings(runtime.settings)  # the suite resets the settings after every test


def ask(runtime: LocalRuntime, question: str) -> dict:
    reply = ApiClient(runtime.api_url or "", "acme", "li").call("POST", "/ask", {"question": question})
    assert reply.status == 200, reply.body
    return reply.body


def reference(sql: str) -> list[list]:
    return container.warehouse("acme").run(sql, max_rows=1000, timeout_seconds=30).rows


def window_of(answer: dict) -> tuple[str, str]:
    """The window the answer's SQL used: its two CAST('…' AS DATE) bounds."""
    import re

    dates = re.findall(r"CAST\('(\d{4}-\d{2}-\d{2})' AS DATE\)", answer["sql"])
    assert len(dates) >= 2, answer["sql"]
    return dates[0], dates[1]


@pytest.mark.parametrize("question", ["北京和上海今年每月的净收入对比", "compare Beijing and Shanghai net revenue by month this year"])
def test_two_values_compared_are_one_series_each(runtime: LocalRuntime, question: str) -> None:
    answer = ask(runtime, question)
    assert answer["status"] == "answered", answer
    assert answer["columns"] == ["month", "city", "net_revenue"], answer["columns"]
    start, end = window_of(answer)
    expected = reference(
        NET.format(
            keys="CAST(DATE_TRUNC('month', ol.paid_at) AS DATE) AS m, dr.city,",
            start=start,
            end=end,
            where="AND dr.city IN ('北京', '上海')",
            group="GROUP BY 1, 2",
        )
    )
    assert sorted((str(r[0]), r[1], float(r[2])) for r in answer["rows"]) == sorted((str(r[0]), r[1], float(r[2])) for r in expected)
    assert {r[1] for r in answer["rows"]} == {"北京", "上海"}  # never one sum of both
    assert any(n.startswith("compared: city") for n in answer["notes"]), answer["notes"]


def test_two_values_asked_for_together_are_one_sum(runtime: LocalRuntime) -> None:
    answer = ask(runtime, "北京和上海上个月合计的净收入")
    assert answer["status"] == "answered" and answer["columns"] == ["net_revenue"], answer
    start, end = window_of(answer)
    expected = reference(NET.format(keys="", start=start, end=end, where="AND dr.city IN ('北京', '上海')", group=""))
    assert float(answer["rows"][0][0]) == float(expected[0][0])


@pytest.mark.parametrize(
    "question",
    [
        "上个月医院渠道的净收入占比是多少",
        "what share of last month's net revenue came from the hospital channel?",
        # phrasings found by asking questions the code was not written for
        "what percent of last month's net revenue came from the hospital channel?",
        "上个月医院渠道净收入所占比例",
    ],
)
def test_a_share_of_one_value_is_its_part_of_the_whole(runtime: LocalRuntime, question: str) -> None:
    answer = ask(runtime, question)
    assert answer["status"] == "answered", answer
    assert answer["columns"] == ["net_revenue_share"], answer["columns"]
    start, end = window_of(answer)
    part = reference(NET.format(keys="", start=start, end=end, where="AND dc.channel_name = '医院'", group=""))[0][0]
    whole = reference(NET.format(keys="", start=start, end=end, where="", group=""))[0][0]
    share = answer["rows"][0][0]
    assert 0 < share < 1 and share == round(float(part) / float(whole), 4), (share, part, whole)


def test_a_share_by_group_adds_up_to_one(runtime: LocalRuntime) -> None:
    answer = ask(runtime, "上个月各渠道净收入占比")
    assert answer["status"] == "answered" and answer["columns"] == ["channel", "net_revenue_share"], answer
    start, end = window_of(answer)
    rows = reference(NET.format(keys="dc.channel_name,", start=start, end=end, where="", group="GROUP BY 1"))
    by_channel = {r[0]: float(r[1]) for r in rows}
    total = sum(by_channel.values())
    assert {r[0]: r[1] for r in answer["rows"]} == {k: round(v / total, 4) for k, v in by_channel.items()}
    assert abs(sum(r[1] for r in answer["rows"]) - 1) < 0.001


@pytest.mark.parametrize(
    ("question", "reason"),
    [
        ("上个月退款率占比", "share_of_ratio"),  # a rate has no share of a total
        ("上个月净收入占比", "share_of_what"),  # nothing named to be a part
        ("上海上个月医院渠道的净收入占比", "share_of_which"),  # two parts: which whole?
    ],
)
def test_a_share_that_cannot_be_read_is_asked_about(runtime: LocalRuntime, question: str, reason: str) -> None:
    answer = ask(runtime, question)
    assert answer["status"] == "needs_clarification" and not answer.get("sql"), answer
    assert answer["clarification"]["reason"] == reason, answer["clarification"]


@pytest.mark.parametrize("question", ["2030年1月的净收入", "net revenue in January 2015", "上海2019年的净收入"])
def test_a_period_outside_the_data_is_no_data_with_the_datas_range(runtime: LocalRuntime, question: str) -> None:
    answer = ask(runtime, question)
    assert answer["status"] == "no_data", answer
    first, last = reference("SELECT MIN(paid_at)::DATE, MAX(paid_at)::DATE FROM fact_order_line")[0]
    assert any(n.startswith("no data for ") and f"runs from {first} to {last}" in n for n in answer["notes"]), answer["notes"]
    again = ask(runtime, question)  # never cached: the same question is planned and run again
    assert again["status"] == "no_data", again
    assert not any("SQL from the cache" in n for n in again["notes"]), again["notes"]
