"""Data-shape analysis: what a query result looks like (roles of its columns, the kind of shape),
so that chart matching can apply rules instead of guessing.

Pure Python on purpose: this runs in the Visualize step on a Lambda cold path, where importing
numpy or pandas would cost more than the analysis itself.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, TypedDict

__all__ = [
    "ColumnProfile",
    "ColumnRole",
    "DataShape",
    "MAX_SHARE_SLICES",
    "MIN_DISTRIBUTION_ROWS",
    "ShapeHints",
    "ShapeKind",
    "analyze_shape",
    "as_number",
    "is_null",
    "parse_temporal",
]

MAX_SHARE_SLICES = 8  # more slices than this and a pie stops being readable
MIN_DISTRIBUTION_ROWS = 20  # fewer bare numbers than this are a list, not a distribution
_TEMPORAL_MIN_RATIO = 0.8  # share of non-null values that must parse as dates for a temporal role


class ShapeKind(StrEnum):
    SINGLE_KPI = "single_kpi"
    TIME_SERIES = "time_series"
    CATEGORICAL_SHARE = "categorical_share"
    RANKING = "ranking"
    DISTRIBUTION = "distribution"
    MULTI_MEASURE = "multi_measure"
    TABLE = "table"
    EMPTY = "empty"


class ColumnRole(StrEnum):
    TEMPORAL = "temporal"
    CATEGORICAL = "categorical"
    MEASURE = "measure"
    UNKNOWN = "unknown"  # every value is null: nothing to infer from


_SHARE_WORDS = ("share", "ratio", "pct", "percent", "percentage", "proportion", "mix", "占比", "比例", "份额", "构成", "比重")


@dataclass(frozen=True)
class ShapeHints:
    """What the planner's intent says about the result, so the question can steer the chart
    (占比/share → pie, top 10 → ranking, 同比/环比 → comparison bar)."""

    metric: str | None = None
    dimensions: tuple[str, ...] = ()
    is_share: bool = False
    top_n: int | None = None
    is_comparison: bool = False

    @classmethod
    def from_intent(cls, intent: Any, question: str = "") -> ShapeHints:
        """Hints from a planner `Intent` (duck-typed, to keep pydantic models out of this module)
        and the user's words, which are the only place a share question shows."""
        words = question.lower()
        metric = getattr(intent, "metric", None)
        is_share = any(w in words for w in _SHARE_WORDS) or (metric is not None and _is_share_name(metric))
        limit = getattr(intent, "limit", None)
        order = getattr(intent, "order", None)
        return cls(
            metric=metric,
            dimensions=tuple(getattr(intent, "dimensions", ()) or ()),
            is_share=is_share,
            top_n=limit if (limit is not None and order is not None) else None,
            is_comparison=getattr(intent, "comparison", None) is not None,
        )


@dataclass(frozen=True)
class ColumnProfile:
    name: str
    index: int
    role: ColumnRole
    non_null: int
    nulls: int
    distinct: int
    is_identifier: bool = False  # product_id, channel_code: numbers that name things
    granularity: str | None = None  # temporal: year|quarter|month|week|day|timestamp|ordinal|label
    non_negative: bool | None = None  # measure only
    min_value: float | None = None  # measure only
    max_value: float | None = None  # measure only
    order: str | None = None  # measure only, in row order: "desc" | "asc" | None

    @property
    def null_ratio(self) -> float:
        total = self.non_null + self.nulls
        return self.nulls / total if total else 0.0

    @property
    def magnitude(self) -> float:
        """The largest absolute value: what sets the scale of an axis."""
        if self.min_value is None or self.max_value is None:
            return 0.0
        return max(abs(self.min_value), abs(self.max_value))


@dataclass(frozen=True)
class DataShape:
    kind: ShapeKind
    row_count: int
    columns: tuple[ColumnProfile, ...]
    measures: tuple[str, ...] = ()  # plotted measures, the primary one first
    temporal: str | None = None  # the x axis of a time series
    dimension: str | None = None  # the categorical axis / label / bin column
    series: str | None = None  # the categorical column that splits a time series into lines
    category_count: int = 0  # distinct values on the dimension (or time) axis
    ordered: str | None = None  # "desc" | "asc" when the rows arrive ranked
    prebinned: bool = False  # distribution given as bins + counts
    context: tuple[str, ...] = ()  # dimension columns with one value: a label, not an axis
    reasons: tuple[str, ...] = ()
    hints: ShapeHints = field(default_factory=ShapeHints)

    def column(self, name: str) -> ColumnProfile:
        for profile in self.columns:
            if profile.name == name:
                return profile
        raise KeyError(name)

    @property
    def primary_measure(self) -> str | None:
        return self.measures[0] if self.measures else None


# --------------------------------------------------------------------------- values


def as_number(value: Any) -> float | None:
    """A finite float for numeric cells (int, float, Decimal, numeric text); None otherwise."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float, Decimal)):
        number = float(value)
    elif isinstance(value, str):
        text = value.strip().replace(",", "")
        if not _NUMERIC_TEXT.match(text):
            return None
        number = float(text)
    else:
        return None
    return number if math.isfinite(number) else None


def is_null(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and value.strip() == ""


_NUMERIC_TEXT = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")

_DATE = re.compile(
    r"^(\d{4})[-/](\d{1,2})[-/](\d{1,2})"
    r"(?:[ T](\d{1,2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?$"
)
_MONTH = re.compile(r"^(\d{4})[-/](\d{1,2})$")
_WEEK = re.compile(r"^(\d{4})-?W(\d{1,2})$", re.IGNORECASE)
_QUARTER = re.compile(r"^(\d{4})\s*[-年]?\s*(?:Q|第)([1-4])(?:季度)?$", re.IGNORECASE)
_CN_DAY = re.compile(r"^(\d{4})年(\d{1,2})月(\d{1,2})日$")
_CN_MONTH = re.compile(r"^(\d{4})年(\d{1,2})月$")
_CN_YEAR = re.compile(r"^(\d{4})年$")

# granularity → what one unit means, for a name that carries only a small integer (month = 3)
_NAME_INT_RANGES = {"year": (1900, 2100), "quarter": (1, 4), "month": (1, 12), "week": (1, 53), "day": (1, 31), "hour": (0, 23)}


def parse_temporal(value: Any, name_granularity: str | None = None) -> tuple[tuple[int, ...], str] | None:
    """(sort key, granularity) when the cell is a date, a timestamp or a period label.

    Integers count only when the column's name says which period they are (month = 1..12).
    """
    if isinstance(value, datetime):
        midnight = (value.hour, value.minute, value.second, value.microsecond) == (0, 0, 0, 0)
        return (value.year, value.month, value.day, value.hour, value.minute, value.second), ("day" if midnight else "timestamp")
    if isinstance(value, date):
        return (value.year, value.month, value.day), "day"
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if name_granularity in _NAME_INT_RANGES:
            low, high = _NAME_INT_RANGES[name_granularity]
            if low <= value <= high:
                return (value,), "year" if name_granularity == "year" else "ordinal"
        return None
    if not isinstance(value, str):
        return None
    return _parse_temporal_text(value.strip(), name_granularity)


def _parse_temporal_text(text: str, name_granularity: str | None) -> tuple[tuple[int, ...], str] | None:
    """parse_temporal of a stripped text cell: a date or timestamp, a month, a week, a quarter or a
    year (ISO and Chinese spellings); a bare four-digit year only under a year-named column."""
    if m := _DATE.match(text):
        y, mo, d = int(m[1]), int(m[2]), int(m[3])
        if not (1 <= mo <= 12 and 1 <= d <= 31):
            return None
        if m[4] is None:
            return (y, mo, d), "day"
        return (y, mo, d, int(m[4]), int(m[5]), int(m[6] or 0)), "timestamp"
    if (m := _MONTH.match(text)) or (m := _CN_MONTH.match(text)):
        y, mo = int(m[1]), int(m[2])
        return ((y, mo), "month") if 1 <= mo <= 12 else None
    if m := _CN_DAY.match(text):
        y, mo, d = int(m[1]), int(m[2]), int(m[3])
        return ((y, mo, d), "day") if (1 <= mo <= 12 and 1 <= d <= 31) else None
    if m := _WEEK.match(text):
        y, w = int(m[1]), int(m[2])
        return ((y, w), "week") if 1 <= w <= 53 else None
    if m := _QUARTER.match(text):
        return (int(m[1]), int(m[2])), "quarter"
    if m := _CN_YEAR.match(text):
        return (int(m[1]),), "year"
    if name_granularity == "year" and re.fullmatch(r"\d{4}", text):
        return (int(text),), "year"
    return None


# --------------------------------------------------------------------------- names

_TEMPORAL_TOKENS = {
    "date": "day", "day": "day", "dt": "day", "week": "week", "wk": "week", "month": "month", "ym": "month",
    "yyyymm": "month", "year": "year", "yr": "year", "quarter": "quarter", "qtr": "quarter", "time": "timestamp",
    "timestamp": "timestamp", "datetime": "timestamp", "ts": "timestamp", "hour": "hour", "period": "label",
}
_TEMPORAL_CN = (("日期", "day"), ("月份", "month"), ("年月", "month"), ("年份", "year"), ("季度", "quarter"),
                ("时间", "timestamp"), ("周次", "week"), ("星期", "week"), ("期间", "label"))
_TEMPORAL_CN_EXACT = {"年": "year", "月": "month", "周": "week", "日": "day", "天": "day"}
_MEASURE_TOKENS = {
    "revenue", "amount", "amt", "sales", "qty", "quantity", "count", "cnt", "sum", "avg", "mean", "total",
    "price", "cost", "rate", "ratio", "share", "pct", "percent", "value", "gmv", "growth", "margin", "profit",
    "num", "number", "units", "volume", "days", "hours",
}
_MEASURE_CN = ("额", "量", "数", "率", "收入", "金额", "占比", "均")
_IDENTIFIER_TOKENS = {"id", "code", "key", "no", "rank", "idx", "index", "seq", "sku", "zip"}
_IDENTIFIER_CN = ("编号", "代码", "编码", "排名", "序号")
_BIN_TOKENS = {"bin", "bucket", "range", "band", "interval", "histogram"}
_BIN_CN = ("区间", "分段", "分档", "档位")
_BIN_LABEL = re.compile(
    r"^\s*[\[\(]?\s*[<>≤≥]?=?\s*-?\d+(?:\.\d+)?\s*(?:-|–|~|～|,|to|至)?\s*(?:-?\d+(?:\.\d+)?)?\s*[\]\)]?\s*\+?\s*$"
)


def _tokens(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)  # orderDate → order_Date
    return [t for t in re.split(r"[^a-z0-9]+", spaced.lower()) if t]


def _name_granularity(name: str) -> str | None:
    """The period a column's name promises (month, 月份, order_date, paid_at), or None."""
    stripped = name.strip()
    if stripped in _TEMPORAL_CN_EXACT:
        return _TEMPORAL_CN_EXACT[stripped]
    tokens = _tokens(stripped)
    if any(t in _MEASURE_TOKENS for t in tokens) or any(w in stripped for w in _MEASURE_CN):
        return None  # monthly_revenue, 月销售额: a measure that mentions a period
    for token in tokens:
        if token in _TEMPORAL_TOKENS:
            return _TEMPORAL_TOKENS[token]
    if tokens and tokens[-1] == "at":
        return "timestamp"  # paid_at, refunded_at
    for word, grain in _TEMPORAL_CN:
        if word in stripped:
            return grain
    return None


def _is_measure_name(name: str) -> bool:
    return any(t in _MEASURE_TOKENS for t in _tokens(name)) or any(w in name for w in _MEASURE_CN)


def _is_identifier_name(name: str) -> bool:
    tokens = _tokens(name)
    return any(t in _IDENTIFIER_TOKENS for t in tokens) or name.lower() == "id" or any(w in name for w in _IDENTIFIER_CN)


def _is_share_name(name: str) -> bool:
    lowered = name.lower()
    return any(t in _SHARE_WORDS for t in _tokens(name)) or any(w in lowered for w in _SHARE_WORDS if not w.isascii())


def _is_bin_name(name: str) -> bool:
    return any(t in _BIN_TOKENS for t in _tokens(name)) or any(w in name for w in _BIN_CN)


# --------------------------------------------------------------------------- columns


class _Counts(TypedDict):
    """The fields every ColumnProfile has, whatever its role."""

    name: str
    index: int
    non_null: int
    nulls: int
    distinct: int


def _profile(name: str, index: int, cells: list[Any], hints: ShapeHints) -> ColumnProfile:
    values = [v for v in cells if not is_null(v)]
    nulls = len(cells) - len(values)
    distinct = len({_hashable(v) for v in values})
    base = _Counts(name=name, index=index, non_null=len(values), nulls=nulls, distinct=distinct)
    is_dimension_hint = name in hints.dimensions
    is_metric_hint = hints.metric is not None and name == hints.metric
    if not values:
        # an all-null net_revenue is still the measure asked for (a KPI with no value), not noise
        measure_like = is_metric_hint or _is_measure_name(name)
        return ColumnProfile(role=ColumnRole.MEASURE if measure_like else ColumnRole.UNKNOWN, **base)
    name_grain = _name_granularity(name)

    if not is_metric_hint:
        temporal = _temporal_profile(values, name_grain, base)
        if temporal is not None:
            return temporal

    if all(isinstance(v, bool) for v in values):
        return ColumnProfile(role=ColumnRole.CATEGORICAL, **base)

    numbers = [as_number(v) for v in values]
    if all(n is not None for n in numbers):
        nums = [n for n in numbers if n is not None]
        return _numeric_profile(name, nums, base, is_dimension_hint=is_dimension_hint, is_metric_hint=is_metric_hint)

    if name_grain is not None and all(isinstance(v, str) for v in values):
        # "month" holding "Jan", "Feb": a period named by its column, kept in row order
        return ColumnProfile(role=ColumnRole.TEMPORAL, granularity="label", **base)
    return ColumnProfile(role=ColumnRole.CATEGORICAL, is_identifier=_is_identifier_name(name), **base)


def _temporal_profile(values: list[Any], name_grain: str | None, base: _Counts) -> ColumnProfile | None:
    """A temporal profile when enough of the non-null values parse as dates or periods (the
    coarsest granularity when they mix), else None."""
    parsed = [parse_temporal(v, name_grain) for v in values]
    hits = [p for p in parsed if p is not None]
    if hits and len(hits) / len(values) >= _TEMPORAL_MIN_RATIO:
        grains = {g for _, g in hits}
        grain = grains.pop() if len(grains) == 1 else _coarsest(grains)
        return ColumnProfile(role=ColumnRole.TEMPORAL, granularity=grain, **base)
    return None


def _numeric_profile(
    name: str, nums: list[float], base: _Counts, *, is_dimension_hint: bool, is_metric_hint: bool
) -> ColumnProfile:
    """An all-numeric column: a measure with its range and row order, unless its name says it is an
    identifier or the intent names it a dimension (and not the metric)."""
    identifier = _is_identifier_name(name) and not is_metric_hint
    if identifier or (is_dimension_hint and not is_metric_hint):
        return ColumnProfile(role=ColumnRole.CATEGORICAL, is_identifier=identifier, **base)
    return ColumnProfile(
        role=ColumnRole.MEASURE,
        non_negative=min(nums) >= 0,
        min_value=min(nums),
        max_value=max(nums),
        order=_order(nums),
        **base,
    )


def _coarsest(grains: set[str]) -> str:
    for grain in ("year", "quarter", "month", "week", "day", "timestamp", "ordinal"):
        if grain in grains:
            return grain
    return "label"


def _order(numbers: list[float]) -> str | None:
    if len(numbers) < 3 or len(set(numbers)) == 1:
        return None
    pairs = list(itertools.pairwise(numbers))
    if all(a >= b for a, b in pairs):
        return "desc"
    if all(a <= b for a, b in pairs):
        return "asc"
    return None


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


# --------------------------------------------------------------------------- shape


class _Common(TypedDict):
    """The fields every DataShape of one result shares, whatever its kind."""

    row_count: int
    columns: tuple[ColumnProfile, ...]
    context: tuple[str, ...]
    hints: ShapeHints


@dataclass
class _ShapeMaker:
    """Builds the DataShape of one result: the fields every kind shares, and the reasons so far
    (a rule that declines a kind adds why, and the kind that follows carries it)."""

    common: _Common
    measures: tuple[str, ...]
    reasons: list[str]

    def shape(self, kind: ShapeKind, why: str, **extra: Any) -> DataShape:
        return DataShape(kind, measures=self.measures, reasons=tuple(self.reasons + [why]), **self.common, **extra)


def analyze_shape(columns: list[str], rows: list[list[Any]], *, hints: ShapeHints | None = None) -> DataShape:
    """Infer column roles and the kind of shape of a query result.

    Rules, in order: empty → no measure (table) → one row (single_kpi, or multi_measure side by
    side) → a temporal column (time_series) → one categorical (share, histogram bins, ranking,
    multi_measure) → bare numbers (distribution) → table.
    """
    hints = hints or ShapeHints()
    rows = [list(r) for r in rows]
    empty = _empty_reason(len(columns), rows)
    if empty is not None:
        return DataShape(ShapeKind.EMPTY, len(rows), (), reasons=(empty,), hints=hints)

    profiles = tuple(
        _profile(name, i, [row[i] if i < len(row) else None for row in rows], hints) for i, name in enumerate(columns)
    )
    n = len(rows)
    measures, temporal, categorical = _by_role(profiles, hints)
    reasons: list[str] = []
    context = _context_labels(temporal, categorical, n, reasons)

    common = _Common(row_count=n, columns=profiles, context=tuple(context), hints=hints)
    maker = _ShapeMaker(common, tuple(p.name for p in measures), reasons)
    shape = maker.shape

    if not measures:
        return shape(ShapeKind.TABLE, "no numeric measure column")
    if n == 1:
        return _one_row_shape(maker, measures, temporal + categorical)
    if temporal:
        return _time_series_shape(maker, temporal, categorical, measures)
    if not categorical:
        if len(measures) == 1 and n >= MIN_DISTRIBUTION_ROWS:
            return shape(ShapeKind.DISTRIBUTION, f"{n} values of {measures[0].name} with no category")
        return shape(ShapeKind.TABLE, f"{n} rows of bare numbers")
    if len(categorical) > 1:
        return shape(ShapeKind.TABLE, f"{len(categorical)} categorical columns")
    return _category_shape(maker, categorical[0], measures, rows, hints)


def _empty_reason(width: int, rows: list[list[Any]]) -> str | None:
    """Why a result has nothing to draw (no rows, no columns, every value null), or None."""
    if width == 0 or not rows or all(is_null(cell) for row in rows for cell in row):
        return "no rows" if not rows else ("no columns" if width == 0 else "every value is null")
    return None


def _by_role(
    profiles: tuple[ColumnProfile, ...], hints: ShapeHints
) -> tuple[list[ColumnProfile], list[ColumnProfile], list[ColumnProfile]]:
    """(measures, temporal, categorical): the asked-for metric leads the measures, and identifiers
    drop out of the categoricals when a named category sits next to them."""
    measures = [p for p in profiles if p.role is ColumnRole.MEASURE]
    if hints.metric is not None:
        measures.sort(key=lambda p: p.name != hints.metric)  # the asked-for metric leads
    temporal = [p for p in profiles if p.role is ColumnRole.TEMPORAL]
    categorical = [p for p in profiles if p.role is ColumnRole.CATEGORICAL]
    if any(not p.is_identifier for p in categorical):
        categorical = [p for p in categorical if not p.is_identifier]  # product_id next to product_name
    return measures, temporal, categorical


def _context_labels(temporal: list[ColumnProfile], categorical: list[ColumnProfile], n: int, reasons: list[str]) -> list[str]:
    """A dimension with one value across many rows (the month of "上个月各渠道净收入") is a
    label for the chart, not an axis: it leaves its list (keeping at least one axis) and is named
    here."""
    context: list[str] = []
    if n > 1:
        for group in (temporal, categorical):
            for p in list(group):
                if p.distinct == 1 and len(temporal) + len(categorical) > 1:
                    group.remove(p)
                    context.append(p.name)
                    reasons.append(f"{p.name} has a single value: used as a label")
    return context


def _one_row_shape(maker: _ShapeMaker, measures: list[ColumnProfile], dims: list[ColumnProfile]) -> DataShape:
    """One row: a KPI, its measures side by side, or a table when dimensions crowd it."""
    if len(measures) == 1 and len(dims) <= 2:
        return maker.shape(ShapeKind.SINGLE_KPI, "one row with one measure", dimension=dims[0].name if dims else None)
    if len(dims) <= 1:
        return maker.shape(
            ShapeKind.MULTI_MEASURE, f"one row with {len(measures)} measures side by side",
            dimension=dims[0].name if dims else None, category_count=len(measures),
        )
    return maker.shape(ShapeKind.TABLE, "one row with several dimensions and measures")


def _time_series_shape(
    maker: _ShapeMaker, temporal: list[ColumnProfile], categorical: list[ColumnProfile], measures: list[ColumnProfile]
) -> DataShape:
    """A temporal column: its measures over time, or one measure split into series by one
    categorical; more dimensions than that are a table."""
    t = temporal[0]
    if len(temporal) == 1 and not categorical:
        return maker.shape(
            ShapeKind.TIME_SERIES, f"{t.name} is temporal ({t.granularity}) with {len(measures)} measure(s)",
            temporal=t.name, category_count=t.distinct,
        )
    if len(temporal) == 1 and len(categorical) == 1 and len(measures) == 1:
        c = categorical[0]
        return maker.shape(
            ShapeKind.TIME_SERIES, f"{t.name} is temporal ({t.granularity}); {c.name} splits it into {c.distinct} series",
            temporal=t.name, series=c.name, category_count=t.distinct,
        )
    return maker.shape(ShapeKind.TABLE, "too many dimensions for one chart")


def _category_shape(
    maker: _ShapeMaker, c: ColumnProfile, measures: list[ColumnProfile], rows: list[list[Any]], hints: ShapeHints
) -> DataShape:
    """One categorical column: several measures per category, histogram bins, a share, or a ranking."""
    m = measures[0]
    if len(measures) >= 2:
        return maker.shape(
            ShapeKind.MULTI_MEASURE, f"{c.name} with {len(measures)} measures",
            dimension=c.name, category_count=c.distinct,
        )
    if _looks_binned(c, [row[c.index] for row in rows]):
        return maker.shape(
            ShapeKind.DISTRIBUTION, f"{c.name} holds value bins with {m.name} per bin",
            dimension=c.name, category_count=c.distinct, prebinned=True,
        )
    share = _share_shape(maker, c, m, hints)
    if share is not None:
        return share
    return _ranking_shape(maker, c, m, hints)


def _share_shape(maker: _ShapeMaker, c: ColumnProfile, m: ColumnProfile, hints: ShapeHints) -> DataShape | None:
    """A categorical share when one is asked and the slices fit a pie; None otherwise, with the
    reason a share asked for does not fit added to the maker's reasons."""
    share_asked = hints.is_share or _is_share_name(m.name) or (hints.metric is not None and _is_share_name(hints.metric))
    if not share_asked:
        return None
    if not m.non_negative:
        maker.reasons.append(f"share asked but {m.name} has negative values")
    elif c.distinct > MAX_SHARE_SLICES:
        maker.reasons.append(f"share asked but {c.distinct} categories exceed {MAX_SHARE_SLICES} slices")
    elif c.distinct < 2:
        maker.reasons.append("share asked but there is only one category")
    else:
        return maker.shape(
            ShapeKind.CATEGORICAL_SHARE, f"share of {m.name} across {c.distinct} {c.name} values",
            dimension=c.name, category_count=c.distinct,
        )
    return None


def _ranking_shape(maker: _ShapeMaker, c: ColumnProfile, m: ColumnProfile, hints: ShapeHints) -> DataShape:
    """The categories compared on the measure, with why it reads as a ranking."""
    why = "; ".join(
        part
        for part in (
            f"rows ranked {m.order}" if m.order else "",
            f"top {hints.top_n} asked" if hints.top_n else "",
            f"{c.distinct} categories" if c.distinct > MAX_SHARE_SLICES else "",
        )
        if part
    ) or f"{c.distinct} categories compared"
    return maker.shape(ShapeKind.RANKING, f"{c.name} by {m.name}: {why}", dimension=c.name, category_count=c.distinct, ordered=m.order)


def _looks_binned(profile: ColumnProfile, cells: Iterable[Any]) -> bool:
    if _is_bin_name(profile.name):
        return True
    labels = [v for v in cells if isinstance(v, str)]
    if not labels:
        return False
    # "0-100", "[100,200)", "500+": ranges, and at least one must carry a separator or bracket
    ranged = [v for v in labels if _BIN_LABEL.match(v)]
    return len(ranged) == len(labels) and any(re.search(r"[-–~～,\[\(+]|to|至", v) for v in labels)
