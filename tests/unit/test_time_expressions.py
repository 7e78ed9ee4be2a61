"""Time expressions in Chinese and English resolve to half-open [start, end) windows against today."""

from __future__ import annotations

from datetime import date

import pytest

from memtool.semantic.intent import TimeWindow
from memtool.semantic.time_expressions import (
    find_time_expressions,
    parse_number,
    previous_window,
    resolve_time_expression,
    window_offset,
)

TODAY = date(2026, 11, 29)  # a Sunday
NEW_YEAR = date(2026, 1, 3)  # a Saturday, three days into the year
MONTH_END = date(2026, 3, 31)
LEAP_DAY = date(2024, 2, 29)


def d(text: str) -> date:
    return date.fromisoformat(text)


def window_of(text: str, today: date) -> tuple[date, date]:
    window = resolve_time_expression(text, today)
    assert window is not None, f"{text!r} was not recognised"
    return window.start, window.end


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        # last month
        ("上个月", "2026-10-01", "2026-11-01"),
        ("上月", "2026-10-01", "2026-11-01"),
        ("last month", "2026-10-01", "2026-11-01"),
        ("in the previous month", "2026-10-01", "2026-11-01"),
        # last week: Monday to Sunday before the current week
        ("上周", "2026-11-16", "2026-11-23"),
        ("上个星期", "2026-11-16", "2026-11-23"),
        ("last week", "2026-11-16", "2026-11-23"),
        # this month: month to date, today included
        ("本月", "2026-11-01", "2026-11-30"),
        ("这个月", "2026-11-01", "2026-11-30"),
        ("this month", "2026-11-01", "2026-11-30"),
        ("MTD", "2026-11-01", "2026-11-30"),
        ("month to date", "2026-11-01", "2026-11-30"),
        # this year: year to date
        ("今年", "2026-01-01", "2026-11-30"),
        ("年初至今", "2026-01-01", "2026-11-30"),
        ("this year", "2026-01-01", "2026-11-30"),
        ("YTD", "2026-01-01", "2026-11-30"),
        ("year to date", "2026-01-01", "2026-11-30"),
        ("year-to-date", "2026-01-01", "2026-11-30"),
        # last year
        ("去年", "2025-01-01", "2026-01-01"),
        ("last year", "2025-01-01", "2026-01-01"),
        ("前年", "2024-01-01", "2025-01-01"),
        ("the year before last", "2024-01-01", "2025-01-01"),
        # same period last year, on its own: this month to date, one year back
        ("去年同期", "2025-11-01", "2025-11-30"),
        ("the same period last year", "2025-11-01", "2025-11-30"),
        # the last three months: the three full months before this one
        ("最近三个月", "2026-08-01", "2026-11-01"),
        ("近3个月", "2026-08-01", "2026-11-01"),
        ("过去3个月", "2026-08-01", "2026-11-01"),
        ("the last 3 months", "2026-08-01", "2026-11-01"),
        ("past three months", "2026-08-01", "2026-11-01"),
        ("近半年", "2026-05-01", "2026-11-01"),
        ("the past 12 months", "2025-11-01", "2026-11-01"),
        ("最近两周", "2026-11-09", "2026-11-23"),
        ("the last 2 weeks", "2026-11-09", "2026-11-23"),
        # the last 90 days: full days before today
        ("最近90天", "2026-08-31", "2026-11-29"),
        ("近90天", "2026-08-31", "2026-11-29"),
        ("the last 90 days", "2026-08-31", "2026-11-29"),
        ("past 7 days", "2026-11-22", "2026-11-29"),
        # a bare month: the most recent one that has started
        ("1月", "2026-01-01", "2026-02-01"),
        ("一月", "2026-01-01", "2026-02-01"),
        ("11月", "2026-11-01", "2026-12-01"),
        ("十一月", "2026-11-01", "2026-12-01"),
        ("12月", "2025-12-01", "2026-01-01"),
        ("12月份", "2025-12-01", "2026-01-01"),
        ("January", "2026-01-01", "2026-02-01"),
        ("in Jan", "2026-01-01", "2026-02-01"),
        ("December", "2025-12-01", "2026-01-01"),
        ("in May", "2026-05-01", "2026-06-01"),
        ("去年3月", "2025-03-01", "2025-04-01"),
        ("March last year", "2025-03-01", "2025-04-01"),
        # quarters
        ("2026年Q1", "2026-01-01", "2026-04-01"),
        ("Q1 2026", "2026-01-01", "2026-04-01"),
        ("2026 Q1", "2026-01-01", "2026-04-01"),
        ("2026年第一季度", "2026-01-01", "2026-04-01"),
        ("2026年一季度", "2026-01-01", "2026-04-01"),
        ("the first quarter of 2026", "2026-01-01", "2026-04-01"),
        ("Q3 '25", "2025-07-01", "2025-10-01"),
        ("Q4", "2026-10-01", "2027-01-01"),  # the current quarter has started: it counts
        ("Q3", "2026-07-01", "2026-10-01"),
        ("第二季度", "2026-04-01", "2026-07-01"),
        ("上季度", "2026-07-01", "2026-10-01"),
        ("last quarter", "2026-07-01", "2026-10-01"),
        ("本季度", "2026-10-01", "2026-11-30"),
        ("QTD", "2026-10-01", "2026-11-30"),
        # years
        ("2025年", "2025-01-01", "2026-01-01"),
        ("2025全年", "2025-01-01", "2026-01-01"),
        ("in 2025", "2025-01-01", "2026-01-01"),
        # a specific month or day
        ("2026年3月", "2026-03-01", "2026-04-01"),
        ("2026年03月份", "2026-03-01", "2026-04-01"),
        ("March 2026", "2026-03-01", "2026-04-01"),
        ("Mar 2026", "2026-03-01", "2026-04-01"),
        ("2026-03", "2026-03-01", "2026-04-01"),
        ("2026-03-05", "2026-03-05", "2026-03-06"),
        ("2026年3月5日", "2026-03-05", "2026-03-06"),
        # days and weeks
        ("昨天", "2026-11-28", "2026-11-29"),
        ("昨日", "2026-11-28", "2026-11-29"),
        ("yesterday", "2026-11-28", "2026-11-29"),
        ("今天", "2026-11-29", "2026-11-30"),
        ("本周", "2026-11-23", "2026-11-30"),
        ("这周", "2026-11-23", "2026-11-30"),
        ("this week", "2026-11-23", "2026-11-30"),
        # future windows (forecast horizons)
        ("下个月", "2026-12-01", "2027-01-01"),
        ("next month", "2026-12-01", "2027-01-01"),
        ("未来三个月", "2026-12-01", "2027-03-01"),
        ("the next 3 months", "2026-12-01", "2027-03-01"),
    ],
)
def test_expression_resolves_against_today(text: str, start: str, end: str) -> None:
    assert window_of(text, TODAY) == (d(start), d(end))


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("上个月", "2025-12-01", "2026-01-01"),
        ("last month", "2025-12-01", "2026-01-01"),
        ("上周", "2025-12-22", "2025-12-29"),
        ("last week", "2025-12-22", "2025-12-29"),
        ("本周", "2025-12-29", "2026-01-04"),
        ("this week", "2025-12-29", "2026-01-04"),
        ("本月", "2026-01-01", "2026-01-04"),
        ("今年", "2026-01-01", "2026-01-04"),
        ("YTD", "2026-01-01", "2026-01-04"),
        ("去年", "2025-01-01", "2026-01-01"),
        ("去年同期", "2025-01-01", "2025-01-04"),
        ("最近三个月", "2025-10-01", "2026-01-01"),
        ("the last 3 months", "2025-10-01", "2026-01-01"),
        ("最近90天", "2025-10-05", "2026-01-03"),
        ("the last 90 days", "2025-10-05", "2026-01-03"),
        ("1月", "2026-01-01", "2026-02-01"),
        ("2月", "2025-02-01", "2025-03-01"),
        ("February", "2025-02-01", "2025-03-01"),
        ("12月", "2025-12-01", "2026-01-01"),
        ("Q1", "2026-01-01", "2026-04-01"),
        ("Q4", "2025-10-01", "2026-01-01"),
        ("上季度", "2025-10-01", "2026-01-01"),
        ("昨天", "2026-01-02", "2026-01-03"),
        ("yesterday", "2026-01-02", "2026-01-03"),
    ],
)
def test_expression_on_the_third_of_january(text: str, start: str, end: str) -> None:
    assert window_of(text, NEW_YEAR) == (d(start), d(end))


@pytest.mark.parametrize(
    ("text", "today", "start", "end"),
    [
        ("上个月", MONTH_END, "2026-02-01", "2026-03-01"),
        ("本月", MONTH_END, "2026-03-01", "2026-04-01"),
        ("去年同期", MONTH_END, "2025-03-01", "2025-04-01"),
        ("最近三个月", MONTH_END, "2025-12-01", "2026-03-01"),
        ("最近90天", MONTH_END, "2025-12-31", "2026-03-31"),
        ("3月", MONTH_END, "2026-03-01", "2026-04-01"),
        ("4月", MONTH_END, "2025-04-01", "2025-05-01"),
        ("last week", MONTH_END, "2026-03-23", "2026-03-30"),
        ("去年同期", LEAP_DAY, "2023-02-01", "2023-03-01"),
        ("最近90天", LEAP_DAY, "2023-12-01", "2024-02-29"),
        ("上个月", LEAP_DAY, "2024-01-01", "2024-02-01"),
        ("this month", LEAP_DAY, "2024-02-01", "2024-03-01"),
    ],
)
def test_month_ends_and_leap_days(text: str, today: date, start: str, end: str) -> None:
    assert window_of(text, today) == (d(start), d(end))


@pytest.mark.parametrize("text", ["", "净收入", "hello world", "may I ask a question", "各渠道", "top 5 products", "13月", "Q5"])
def test_unknown_or_absent_expression_is_none(text: str) -> None:
    assert resolve_time_expression(text, TODAY) is None


def test_expressions_are_found_inside_a_question_with_their_span_and_label() -> None:
    found = find_time_expressions("上海上个月和去年同期的销售额", TODAY)

    assert [(m.text, m.family) for m in found] == [("上个月", "last_month"), ("去年同期", "same_period_last_year")]
    assert found[0].window.label == "上个月"
    assert found[0].start == 2


def test_longer_expression_wins_over_the_one_inside_it() -> None:
    found = find_time_expressions("2026年3月各渠道净收入", TODAY)

    assert len(found) == 1
    assert (found[0].window.start, found[0].window.end) == (d("2026-03-01"), d("2026-04-01"))


def test_english_label_drops_the_preposition() -> None:
    window = resolve_time_expression("net revenue in 2025", TODAY)

    assert window is not None and window.label == "2025"


@pytest.mark.parametrize(("text", "value"), [("3", 3), ("三", 3), ("十二", 12), ("二十", 20), ("九十", 90), ("一百八十", 180), ("两", 2), ("three", 3), ("x", None)])
def test_numbers_in_words(text: str, value: int | None) -> None:
    assert parse_number(text) == value


def test_comparison_windows() -> None:
    last_month = TimeWindow(start=d("2026-10-01"), end=d("2026-11-01"), label="上个月")
    mtd = TimeWindow(start=d("2026-11-01"), end=d("2026-11-30"), label="本月")
    last_week = TimeWindow(start=d("2026-11-16"), end=d("2026-11-23"), label="上周")
    quarter = TimeWindow(start=d("2026-07-01"), end=d("2026-10-01"), label="Q3")
    ninety = TimeWindow(start=d("2026-08-31"), end=d("2026-11-29"), label="90天")

    kind, yoy = previous_window(last_month, "yoy")
    assert (kind, yoy.start, yoy.end) == ("yoy", d("2025-10-01"), d("2025-11-01"))
    kind, mom = previous_window(last_month, None)
    assert (kind, mom.start, mom.end) == ("mom", d("2026-09-01"), d("2026-10-01"))
    kind, mtd_prev = previous_window(mtd, None)
    assert (kind, mtd_prev.start, mtd_prev.end) == ("mom", d("2026-10-01"), d("2026-10-30"))
    kind, wow = previous_window(last_week, None)
    assert (kind, wow.start, wow.end) == ("wow", d("2026-11-09"), d("2026-11-16"))
    kind, qoq = previous_window(quarter, None)
    assert (kind, qoq.start, qoq.end) == ("qoq", d("2026-04-01"), d("2026-07-01"))
    kind, days = previous_window(ninety, None)
    assert (kind, days.start, days.end) == ("mom", d("2026-06-02"), d("2026-08-31"))
    kind, per_month = previous_window(quarter, None, grain="month")
    assert (kind, per_month.start, per_month.end) == ("mom", d("2026-06-01"), d("2026-09-01"))

    assert window_offset(last_month, yoy) == ("year", 1)
    assert window_offset(last_month, mom) == ("month", 1)
    assert window_offset(quarter, qoq) == ("month", 3)
    assert window_offset(ninety, days) == ("day", 90)


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("上上个月的净收入", date(2026, 9, 1), date(2026, 10, 1)),
        ("上上月各渠道", date(2026, 9, 1), date(2026, 10, 1)),
        ("net revenue the month before last", date(2026, 9, 1), date(2026, 10, 1)),
        ("上上周的订单数", date(2026, 11, 9), date(2026, 11, 16)),
        ("orders the week before last", date(2026, 11, 9), date(2026, 11, 16)),
        ("上上季度", date(2026, 4, 1), date(2026, 7, 1)),
        ("the quarter before last", date(2026, 4, 1), date(2026, 7, 1)),
        ("大前年的销售额", date(2023, 1, 1), date(2024, 1, 1)),
    ],
)
def test_the_period_before_last_is_never_read_as_last(text, start, end):
    from memtool.semantic.time_expressions import find_time_expressions

    [found] = find_time_expressions(text, date(2026, 11, 29))
    assert (found.window.start, found.window.end) == (start, end)
