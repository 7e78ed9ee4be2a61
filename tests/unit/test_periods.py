"""Partial periods of a trend: which time-grain buckets an answer holds only part of, and why."""

from __future__ import annotations

from datetime import date

import pytest

from memtool.semantic.intent import Intent, TimeWindow
from memtool.semantic.periods import PartialBucket, bucket_bounds, partial_buckets, partial_note

TODAY = date(2026, 11, 29)  # a Sunday; data are complete up to 2026-11-28


def trend(grain: str, start: str, end: str, *, metric: str = "net_revenue", extra: tuple[str, ...] = ()) -> Intent:
    window = TimeWindow(start=date.fromisoformat(start), end=date.fromisoformat(end))
    return Intent(metric=metric, dimensions=(grain, *extra), time_window=window)


def summary(buckets: list[PartialBucket]) -> list[tuple[str, str]]:
    return [(b.label, b.reason) for b in buckets]


def test_this_years_months_end_with_november_to_date() -> None:
    # Given "今年每月净收入" on 2026-11-29: the window is [2026-01-01, 2026-11-30)
    buckets = partial_buckets(trend("month", "2026-01-01", "2026-11-30"), TODAY)

    # Then November is the one partial month, held up to yesterday
    assert summary(buckets) == [("2026-11-01", "month to date: 2026-11-01..2026-11-28")]
    assert (buckets[0].start, buckets[0].end) == (date(2026, 11, 1), date(2026, 12, 1))
    assert (buckets[0].covered_start, buckets[0].covered_end) == (date(2026, 11, 1), date(2026, 11, 29))


def test_a_window_starting_mid_month_marks_its_first_month() -> None:
    buckets = partial_buckets(trend("month", "2026-06-15", "2026-09-01"), TODAY)

    assert summary(buckets) == [("2026-06-01", "window starts 2026-06-15")]
    assert buckets[0].covered_start == date(2026, 6, 15)


def test_a_window_ending_mid_month_marks_its_last_month() -> None:
    buckets = partial_buckets(trend("month", "2026-03-01", "2026-05-20"), TODAY)

    assert summary(buckets) == [("2026-05-01", "window ends 2026-05-19")]


def test_both_ends_can_be_partial() -> None:
    buckets = partial_buckets(trend("month", "2026-09-10", "2026-11-30"), TODAY)

    assert summary(buckets) == [
        ("2026-09-01", "window starts 2026-09-10"),
        ("2026-11-01", "month to date: 2026-11-01..2026-11-28"),
    ]


@pytest.mark.parametrize(
    ("grain", "start", "end"),
    [
        ("month", "2025-11-01", "2026-11-01"),  # the last 12 full months
        ("week", "2026-08-31", "2026-11-23"),  # the last 12 full weeks (Mondays)
        ("day", "2026-10-30", "2026-11-29"),  # the last 30 full days
        ("quarter", "2025-10-01", "2026-10-01"),  # the last 4 full quarters
        ("year", "2024-01-01", "2026-01-01"),  # two full years
    ],
)
def test_full_windows_have_no_partial_bucket(grain: str, start: str, end: str) -> None:
    assert partial_buckets(trend(grain, start, end), TODAY) == []


def test_this_weeks_days_mark_today_in_progress() -> None:
    # "本周每天销售额": [Monday 2026-11-23, 2026-11-30); today's day has begun but is not over
    buckets = partial_buckets(trend("day", "2026-11-23", "2026-11-30"), TODAY)

    assert summary(buckets) == [("2026-11-29", "in progress: 2026-11-29 is today")]


def test_weeks_to_date_and_a_week_cut_by_the_window_start() -> None:
    # 2026-11-01 is a Sunday: its week started Monday 2026-10-26
    buckets = partial_buckets(trend("week", "2026-11-01", "2026-11-30"), TODAY)

    assert summary(buckets) == [
        ("2026-10-26", "window starts 2026-11-01"),
        ("2026-11-23", "week to date: 2026-11-23..2026-11-28"),
    ]


def test_quarters_and_years_to_date() -> None:
    quarters = partial_buckets(trend("quarter", "2026-01-01", "2026-11-30"), TODAY)
    years = partial_buckets(trend("year", "2025-01-01", "2026-11-30"), TODAY)

    assert summary(quarters) == [("2026-10-01", "quarter to date: 2026-10-01..2026-11-28")]
    assert summary(years) == [("2026-01-01", "year to date: 2026-01-01..2026-11-28")]


def test_buckets_after_today_hold_no_rows_and_are_not_listed() -> None:
    # "2026年每月": the whole calendar year, but December has not started
    buckets = partial_buckets(trend("month", "2026-01-01", "2027-01-01"), TODAY)

    assert [b.label for b in buckets] == ["2026-11-01"]


def test_a_grain_next_to_another_dimension_still_counts() -> None:
    intent = trend("month", "2026-01-01", "2026-11-30", extra=("channel",))

    assert [b.label for b in partial_buckets(intent, TODAY)] == ["2026-11-01"]


def test_no_grain_or_no_window_means_nothing_to_mark() -> None:
    by_channel = Intent(metric="net_revenue", dimensions=("channel",), time_window=TimeWindow(start=date(2026, 11, 1), end=date(2026, 11, 30)))
    no_window = Intent(metric="net_revenue", dimensions=("month",))

    assert partial_buckets(by_channel, TODAY) == []
    assert partial_buckets(no_window, TODAY) == []


def test_the_note_names_each_partial_bucket() -> None:
    buckets = partial_buckets(trend("month", "2026-06-15", "2026-11-30"), TODAY)

    assert partial_note(buckets) == (
        "partial periods: 2026-06-01 is a partial month (window starts 2026-06-15); "
        "2026-11-01 is a partial month (month to date: 2026-11-01..2026-11-28)"
    )
    assert partial_note([]) is None


@pytest.mark.parametrize(
    ("day", "grain", "bounds"),
    [
        ("2026-11-29", "week", ("2026-11-23", "2026-11-30")),
        ("2026-02-14", "month", ("2026-02-01", "2026-03-01")),
        ("2026-12-31", "quarter", ("2026-10-01", "2027-01-01")),
        ("2026-05-05", "year", ("2026-01-01", "2027-01-01")),
        ("2026-05-05", "day", ("2026-05-05", "2026-05-06")),
    ],
)
def test_bucket_bounds_follow_the_sql_truncation(day: str, grain: str, bounds: tuple[str, str]) -> None:
    assert bucket_bounds(date.fromisoformat(day), grain) == tuple(date.fromisoformat(b) for b in bounds)  # type: ignore[arg-type]
