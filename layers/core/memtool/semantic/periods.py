"""Partial periods of a trend: the time-grain buckets an answer shows that are not whole.

A bucket of the intent's time grain (day, week, month, quarter, year) is partial when the window
covers only part of it (a window starting 2026-06-15 cuts June), or when it has not ended yet:
the warehouse is complete only up to yesterday, so on 2026-11-29 the November bucket of "今年每月
净收入" holds 2026-11-01..2026-11-28 plus whatever of today has arrived. A chart that draws such
a bucket next to whole ones shows a drop that is not there; the answer marks it instead.

Only buckets the SQL can return are considered: those that start before the window's end and no
later than today. Labels are the ones the SQL returns for the bucket, the ISO date of its start
(``CAST(DATE_TRUNC('<grain>', …) AS DATE)``, weeks starting on Monday).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from memtool.semantic.catalog import Catalog, load_catalog
from memtool.semantic.intent import Grain, Intent
from memtool.semantic.time_expressions import add_months, quarter_start, week_start

__all__ = ["PartialBucket", "bucket_bounds", "partial_buckets", "partial_note"]

@dataclass(frozen=True)
class PartialBucket:
    label: str  # the bucket as the SQL returns it: the ISO date of its start
    grain: Grain
    start: date  # the bucket's first day
    end: date  # the day after the bucket's last day
    covered_start: date  # the first day the answer holds
    covered_end: date  # the day after the last complete day the answer holds
    reason: str  # "month to date: 2026-11-01..2026-11-28", "window starts 2026-06-15"

    def describe(self) -> str:
        return f"{self.label} is a partial {self.grain} ({self.reason})"


def bucket_bounds(day: date, grain: Grain) -> tuple[date, date]:
    """The [start, end) of the ``grain`` bucket holding ``day``."""
    if grain == "day":
        return day, day + timedelta(days=1)
    if grain == "week":
        start = week_start(day)
        return start, start + timedelta(days=7)
    if grain == "month":
        start = day.replace(day=1)
        return start, add_months(start, 1)
    if grain == "quarter":
        start = quarter_start(day)
        return start, add_months(start, 3)
    start = date(day.year, 1, 1)
    return start, date(day.year + 1, 1, 1)


def partial_buckets(intent: Intent, today: date, *, catalog: Catalog | None = None) -> list[PartialBucket]:
    """The partial buckets of the intent's time grain, oldest first; [] without a grain or window."""
    window = intent.time_window
    grain = _grain_of(intent, catalog or load_catalog())
    if window is None or grain is None:
        return []
    last_complete = today - timedelta(days=1)  # data are complete up to yesterday
    found: list[PartialBucket] = []
    start, end = bucket_bounds(window.start, grain)
    while start < window.end and start <= today:
        covered_start, covered_end = max(start, window.start), min(end, window.end)
        reasons: list[str] = []
        if covered_start > start:
            reasons.append(f"window starts {covered_start.isoformat()}")
        if covered_end > today:  # the bucket runs into today: not over yet
            if last_complete >= covered_start:
                reasons.append(f"{grain} to date: {covered_start.isoformat()}..{last_complete.isoformat()}")
            else:
                reasons.append(f"in progress: {today.isoformat()} is today")
            covered_end = max(today, covered_start)
        elif covered_end < end:
            reasons.append(f"window ends {(covered_end - timedelta(days=1)).isoformat()}")
        if reasons:
            found.append(PartialBucket(start.isoformat(), grain, start, end, covered_start, covered_end, "; ".join(reasons)))
        start, end = end, bucket_bounds(end, grain)[1]
    return found


def partial_note(buckets: Sequence[PartialBucket]) -> str | None:
    """One line for the answer's notes, or None when every bucket is whole."""
    if not buckets:
        return None
    return "partial periods: " + "; ".join(b.describe() for b in buckets)


def _grain_of(intent: Intent, catalog: Catalog) -> Grain | None:
    for name in intent.dimensions:
        if catalog.has_dimension(name):
            spec = catalog.dimension(name)
            if spec.kind == "time" and spec.grain is not None:
                return spec.grain
    return None
