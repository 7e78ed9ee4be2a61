"""The period a parsed question reads, and the window it is compared with.

A question names at most two periods: one is its window; two that start one year, quarter, month
or week apart are a comparison of the later with the earlier ("本月 vs 上月"); more, or two that do
not compare, are asked about. "去年同期" on its own is the window the question would otherwise
have, a year earlier. With no period named, a follow-up keeps the previous turn's window, a model
whose ``default_window`` is ``all`` reads every row, and otherwise ``default_window`` below
applies (see the parser's module docstring). A comparison word (同比, "vs last month") adds the
window before.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Literal

from memtool.semantic.clarifications import ClarificationNeed, several_windows
from memtool.semantic.followup import shifted_year_back
from memtool.semantic.intent import Comparison, TimeWindow
from memtool.semantic.parsed import ParsedQuestion
from memtool.semantic.time_expressions import (
    ComparisonKind,
    TimeMatch,
    add_months,
    last_full_days,
    last_full_months,
    last_full_quarters,
    last_full_weeks,
    previous_window,
)

ParseRoute = Literal["nl2sql_query", "kpi_lookup", "business_knowledge_qa", "deep_analysis_workflow"]
WindowReading = tuple[TimeWindow | None, Comparison | None, ClarificationNeed | None]


def read_window(
    parsed: ParsedQuestion, today: date, route: ParseRoute | None, notes: list[str], *, every_row_by_default: bool
) -> WindowReading:
    """The question's window and comparison, or what to ask; ``notes`` say how they were read.
    ``every_row_by_default``: the model's ``default_window`` is ``all``."""
    grain = parsed.grain or ("month" if parsed.trend else None)
    same_period = [t for t in parsed.times if t.family == "same_period_last_year"]
    explicit = [t for t in parsed.times if t.family != "same_period_last_year"]
    comparison_kind = parsed.comparison
    if same_period and explicit:
        comparison_kind = comparison_kind or "yoy"  # "今年 vs 去年同期": a yoy of the other window
    elif same_period:
        return _same_period_last_year(parsed, same_period[0], comparison_kind, today, grain, route, notes)
    future = [t for t in explicit if t.window.start > today]
    if future and route == "deep_analysis_workflow":
        notes.append(f"forecast horizon {future[0].window.label}: [{future[0].window.start}, {future[0].window.end}); history below")
        explicit = [t for t in explicit if t.window.start <= today]
    if len(explicit) > 2:
        return None, None, several_windows(parsed, explicit)
    if len(explicit) == 2:
        return _two_windows(parsed, explicit, notes)
    return _one_window(parsed, explicit, comparison_kind, today, grain, route, notes, every_row_by_default=every_row_by_default)


def _one_window(
    parsed: ParsedQuestion,
    explicit: list[TimeMatch],
    comparison_kind: ComparisonKind | Literal["previous"] | None,
    today: date,
    grain: str | None,
    route: ParseRoute | None,
    notes: list[str],
    *,
    every_row_by_default: bool,
) -> WindowReading:
    """One period at most named: it, else the previous turn's, else every row or the default
    window; and the window before it when the question asks for a comparison."""
    if not explicit and parsed.carried_window is None and every_row_by_default and comparison_kind is None:
        notes.append("no period named: every row of the data set (the model's default_window is all)")
        return None, None, None
    if explicit:
        window = explicit[0].window
    elif parsed.carried_window is not None:
        window = parsed.carried_window
    else:
        window = default_window(today, grain=grain, route=route)
        notes.append(f"default window {window.label}: [{window.start}, {window.end})")
    comparison: Comparison | None = None
    if comparison_kind is not None:
        kind_or_none = None if comparison_kind == "previous" else comparison_kind
        kind2, previous = previous_window(window, kind_or_none, grain=grain)
        comparison = Comparison(kind=kind2, window=previous)
    return window, comparison, None


def _same_period_last_year(
    parsed: ParsedQuestion,
    found: TimeMatch,
    comparison_kind: ComparisonKind | Literal["previous"] | None,
    today: date,
    grain: str | None,
    route: ParseRoute | None,
    notes: list[str],
) -> WindowReading:
    """"去年同期" on its own: the window this question would otherwise have (the previous turn's,
    or the default one), a year earlier; not a comparison and not one day."""
    base = parsed.carried_window or default_window(today, grain=grain, route=route)
    window = shifted_year_back(base, f"{found.window.label} ({base.label})")
    notes.append(f"{found.text}: {base.label} a year earlier, [{window.start}, {window.end})")
    if comparison_kind is not None and comparison_kind != "yoy":
        kind2, previous_w = previous_window(window, None if comparison_kind == "previous" else comparison_kind, grain=grain)
        return window, Comparison(kind=kind2, window=previous_w), None
    return window, None, None


def _two_windows(parsed: ParsedQuestion, explicit: list[TimeMatch], notes: list[str]) -> WindowReading:
    """Two named periods: the later compared with the earlier, or asked about when they do not compare."""
    first, second = sorted((t.window for t in explicit), key=lambda w: w.start, reverse=True)
    kind = _comparison_kind_between(first, second)
    if kind is None:
        return None, None, several_windows(parsed, explicit)
    notes.append(f"two windows compared: {first.label} vs {second.label} ({kind})")
    return first, Comparison(kind=kind, window=second), None


def default_window(today: date, *, grain: str | None, route: ParseRoute | None = None) -> TimeWindow:
    """The window used when a question names none (see the module docstring of ``memtool.semantic.parser``)."""
    if grain == "week":
        return last_full_weeks(today, 12, "last 12 full weeks")
    if grain == "day":
        return last_full_days(today, 30, "last 30 full days")
    if grain == "quarter":
        return last_full_quarters(today, 4, "last 4 full quarters")
    if grain == "year":
        return TimeWindow(start=date(today.year - 1, 1, 1), end=today + timedelta(days=1), label="last year and this year to date")
    if route == "deep_analysis_workflow":  # two seasons: an analysis compares each month with a year earlier
        return last_full_months(today, 24, "last 24 full months")
    if grain == "month":
        return last_full_months(today, 12, "last 12 full months")
    return last_full_months(today, 1, "last full month")


def _comparison_kind_between(current: TimeWindow, earlier: TimeWindow) -> ComparisonKind | None:
    """Two named windows compare when the earlier starts one year, quarter, month or week before
    ("本月 vs 上月" compares month to date with the whole of last month, as asked)."""
    if current.start == add_months(earlier.start, 12):
        return "yoy"
    if current.start == add_months(earlier.start, 3) and current.start.day == 1 and current.start.month in (1, 4, 7, 10):
        return "qoq"
    if current.start == add_months(earlier.start, 1) and current.start.day == 1:
        return "mom"
    if (current.start - earlier.start).days == 7 and current.start.weekday() == 0:
        return "wow"
    return None
