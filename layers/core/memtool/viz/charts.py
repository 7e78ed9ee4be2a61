"""Chart matching: rules from a result's data shape to a chart type, a confidence, a checkpoint
status for the ask flow, and the ECharts option that draws it.

Rule table (base confidence of the best candidate; a null-heavy measure lowers chart confidences):

| shape             | condition                                   | best chart      | conf |
|-------------------|---------------------------------------------|-----------------|------|
| empty             | no rows / all null                          | table           | 0.00 |
| single_kpi        | 1 row × 1 measure                           | kpi_card        | 0.95 |
| time_series       | ≥ 4 points                                  | line            | 0.90 |
| time_series       | ≤ 3 points, or 同比/环比 comparison          | bar             | 0.85 / 0.90 |
| time_series       | ≥ 2 measures, scales differ > 10×           | dual_axis_line  | 0.85 |
| categorical_share | ≤ 8 non-negative slices, share asked        | pie             | 0.90 (0.80 for 7–8) |
| ranking           | sorted, top-N asked, or > 8 categories      | horizontal_bar  | 0.88 |
| ranking           | ≤ 8 unsorted categories                     | bar             | 0.80 |
| distribution      | ≥ 20 bare values, or bins + counts          | histogram       | 0.85 |
| multi_measure     | scales within 10×                           | grouped_bar     | 0.85 |
| multi_measure     | scales differ > 10×                         | dual_axis_line  | 0.82 |
| table             | text only / too many dimensions             | table           | 0.40 / 0.50 |

Checkpoint: confidence ≥ 0.7 → auto_pass, < 0.3 → blocked, otherwise needs_review.
A user's preferred chart wins when it fits the shape; a pie never draws a time series.

Partial periods (``partial``: bucket labels such as "2026-11-01", from
``memtool.semantic.periods.partial_buckets``) are marked where the chart draws time: the point or
bar is hollow with a dashed border and a grey ``markArea`` labelled "partial period" shades it (on a
line, the segment into it), so a month-to-date bucket does not read as a drop. A KPI card says
"(partial)"; a table lists the partial rows. ``partial_buckets`` in the output are the labels the
result holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from memtool.viz.shape import (
    MAX_SHARE_SLICES,
    DataShape,
    ShapeHints,
    ShapeKind,
    analyze_shape,
    as_number,
    is_null,
    parse_temporal,
)

__all__ = [
    "AUTO_PASS_THRESHOLD",
    "BLOCKED_THRESHOLD",
    "MAX_POINTS",
    "ChartCandidate",
    "ChartRecommendation",
    "ChartType",
    "checkpoint_status",
    "recommend_chart",
]

AUTO_PASS_THRESHOLD = 0.7
BLOCKED_THRESHOLD = 0.3
MAX_POINTS = 500  # points per series in an option: more is unreadable and bloats the response
MAX_SERIES = 10  # lines in one time series chart; the rest are dropped by total
SCALE_SPLIT = 10.0  # measures whose magnitudes differ by more than this get their own y-axis
NULL_LABEL = "(null)"
PARTIAL_LABEL = "partial period"


class ChartType(StrEnum):
    LINE = "line"
    BAR = "bar"
    HORIZONTAL_BAR = "horizontal_bar"
    GROUPED_BAR = "grouped_bar"
    DUAL_AXIS_LINE = "dual_axis_line"
    PIE = "pie"
    KPI_CARD = "kpi_card"
    HISTOGRAM = "histogram"
    TABLE = "table"


@dataclass(frozen=True)
class ChartCandidate:
    chart_type: str
    confidence: float  # in [0, 1]
    reason: str


@dataclass
class ChartRecommendation:
    chart_type: str
    confidence: float
    checkpoint_status: str  # "auto_pass" | "needs_review" | "blocked"
    candidates: list[ChartCandidate]  # up to 3, best first
    option: dict[str, Any]  # ECharts option for chart_type (kpi_card/table: see _kpi_option/_table_option)
    shape: DataShape
    notes: list[str] = field(default_factory=list)  # truncation, dropped nulls, ignored preference
    partial_buckets: list[str] = field(default_factory=list)  # partial-period labels the result holds, in time order

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for the Record step and the API response."""
        return {
            "chart_type": self.chart_type,
            "confidence": self.confidence,
            "checkpoint_status": self.checkpoint_status,
            "candidates": [asdict(c) for c in self.candidates],
            "option": self.option,
            "shape": {
                "kind": str(self.shape.kind),
                "row_count": self.shape.row_count,
                "measures": list(self.shape.measures),
                "temporal": self.shape.temporal,
                "dimension": self.shape.dimension,
                "series": self.shape.series,
                "reasons": list(self.shape.reasons),
            },
            "notes": list(self.notes),
            "partial_buckets": list(self.partial_buckets),
        }


def checkpoint_status(confidence: float) -> str:
    """The Visualize checkpoint: charts the rules are sure of pass; doubtful ones go to review."""
    if confidence >= AUTO_PASS_THRESHOLD:
        return "auto_pass"
    if confidence < BLOCKED_THRESHOLD:
        return "blocked"
    return "needs_review"


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class _Context:
    shape: DataShape
    columns: list[str]
    rows: list[list[Any]]
    partial: frozenset[str] = frozenset()  # period keys (see _period_key) of partial buckets

    def is_partial(self, value: Any) -> bool:
        return bool(self.partial) and _period_key(value) in self.partial

    def cells(self, name: str) -> list[Any]:
        i = self.shape.column(name).index
        return [row[i] if i < len(row) else None for row in self.rows]


def _scale_ratio(shape: DataShape) -> float:
    mags = [shape.column(m).magnitude for m in shape.measures]
    positive = [m for m in mags if m > 0]
    if len(positive) < 2:
        return 1.0
    return max(positive) / min(positive)


def _rules(ctx: _Context) -> list[ChartCandidate]:
    """Candidates for a shape, before the user's preference and the null penalty."""
    s = ctx.shape
    h = s.hints
    kind = s.kind
    C = ChartCandidate
    if kind is ShapeKind.EMPTY:
        return [C(ChartType.TABLE, 0.0, f"nothing to draw: {s.reasons[0]}")]
    if kind is ShapeKind.SINGLE_KPI:
        return [
            C(ChartType.KPI_CARD, 0.95, "one value: a KPI card states it"),
            C(ChartType.TABLE, 0.4, "a one-cell table"),
        ]
    if kind is ShapeKind.TIME_SERIES:
        points = s.category_count
        t = s.temporal
        if len(s.measures) >= 2 and _scale_ratio(s) > SCALE_SPLIT:
            return [
                C(
                    ChartType.DUAL_AXIS_LINE,
                    0.85,
                    f"{len(s.measures)} measures over {t} with scales {_scale_ratio(s):.0f}× apart: two y-axes",
                ),
                C(ChartType.LINE, 0.55, "one axis would flatten the smaller measure"),
                C(ChartType.BAR, 0.45, "bars over time"),
            ]
        if h.is_comparison and points <= 3:
            return [
                C(ChartType.BAR, 0.9, f"{points} periods compared (同比/环比): bars side by side"),
                C(ChartType.LINE, 0.5, "a line over too few points"),
                C(ChartType.TABLE, 0.35, "the periods as a table"),
            ]
        if points <= 3:
            return [
                C(ChartType.BAR, 0.85, f"only {points} point(s) over {t}: bars read better than a line"),
                C(ChartType.LINE, 0.55, "a line over too few points"),
                C(ChartType.TABLE, 0.35, "the values as a table"),
            ]
        lines = f"{s.column(s.series).distinct} lines" if s.series else ("one line per measure" if len(s.measures) > 1 else "a line")
        return [
            C(ChartType.LINE, 0.9, f"{points} points over {t}: {lines} shows the trend"),
            C(ChartType.BAR, 0.6 if points <= 24 else 0.45, "bars over time"),
            C(ChartType.TABLE, 0.3, "the series as a table"),
        ]
    if kind is ShapeKind.CATEGORICAL_SHARE:
        slices = s.category_count
        return [
            C(ChartType.PIE, 0.9 if slices <= 6 else 0.8, f"share of {s.primary_measure} across {slices} {s.dimension} values"),
            C(ChartType.BAR, 0.65, "bars compare the parts exactly"),
            C(ChartType.HORIZONTAL_BAR, 0.55, "ranked bars"),
        ]
    if kind is ShapeKind.RANKING:
        m = s.column(s.primary_measure or "")
        pie_fits = bool(m.non_negative) and 2 <= s.category_count <= MAX_SHARE_SLICES
        if h.is_comparison and s.category_count <= 3:
            return [
                C(ChartType.BAR, 0.88, f"{s.category_count} periods compared (同比/环比): bars side by side"),
                C(ChartType.HORIZONTAL_BAR, 0.6, "ranked bars"),
                C(ChartType.TABLE, 0.35, "the values as a table"),
            ]
        if s.ordered or h.top_n or s.category_count > MAX_SHARE_SLICES:
            why = f"top {h.top_n:d}" if h.top_n else (f"rows ranked {s.ordered}" if s.ordered else f"{s.category_count} categories")
            return [
                C(ChartType.HORIZONTAL_BAR, 0.88, f"a ranking ({why}): horizontal bars, largest on top"),
                C(ChartType.BAR, 0.7, "vertical bars"),
                C(ChartType.TABLE, 0.35, "the ranking as a table"),
            ]
        if pie_fits:
            third = C(ChartType.PIE, 0.45, "parts of a whole, if the question is about share")
        else:
            third = C(ChartType.TABLE, 0.35, "the values as a table")
        return [
            C(ChartType.BAR, 0.8, f"{s.category_count} {s.dimension} values compared on {m.name}"),
            C(ChartType.HORIZONTAL_BAR, 0.7, "ranked bars"),
            third,
        ]
    if kind is ShapeKind.DISTRIBUTION:
        if s.prebinned:
            return [
                C(ChartType.HISTOGRAM, 0.85, f"counts per {s.dimension} bin: a histogram"),
                C(ChartType.TABLE, 0.35, "the bins as a table"),
            ]
        n = s.column(s.primary_measure or "").non_null
        return [
            C(ChartType.HISTOGRAM, 0.85 if n >= 30 else 0.75, f"{n} values of {s.primary_measure}: a histogram shows their spread"),
            C(ChartType.TABLE, 0.3, "the raw values as a table"),
        ]
    if kind is ShapeKind.MULTI_MEASURE:
        ratio = _scale_ratio(s)
        if h.is_comparison and len(s.measures) == 2 and ratio <= SCALE_SPLIT:
            return [
                C(ChartType.GROUPED_BAR, 0.9, f"{s.measures[0]} vs {s.measures[1]} (同比/环比): grouped bars"),
                C(ChartType.TABLE, 0.4, "the comparison as a table"),
            ]
        if ratio > SCALE_SPLIT and s.dimension is not None:
            return [
                C(ChartType.DUAL_AXIS_LINE, 0.82, f"{len(s.measures)} measures with scales {ratio:.0f}× apart: two y-axes"),
                C(ChartType.GROUPED_BAR, 0.55, "grouped bars on one axis would flatten the smaller measure"),
                C(ChartType.TABLE, 0.4, "the measures as a table"),
            ]
        if s.dimension is None:
            return [
                C(ChartType.BAR, 0.75, f"{len(s.measures)} values side by side"),
                C(ChartType.TABLE, 0.4, "a one-row table"),
            ]
        crowded = s.category_count > 20
        return [
            C(ChartType.GROUPED_BAR, 0.65 if crowded else 0.85, f"{len(s.measures)} measures per {s.dimension}: grouped bars"),
            C(ChartType.DUAL_AXIS_LINE, 0.45, "two y-axes (scales are close, one axis suffices)"),
            C(ChartType.TABLE, 0.4, "the measures as a table"),
        ]
    # TABLE
    if s.measures:
        return [
            C(ChartType.TABLE, 0.5, f"no chart rule fits: {s.reasons[-1]}"),
            C(ChartType.GROUPED_BAR, 0.35, "grouped bars over the first dimension, if it reads"),
        ]
    return [C(ChartType.TABLE, 0.4, f"no chart rule fits: {s.reasons[-1]}")]


# Which chart types can draw a shape at all; a preference outside this set is ignored.
_COMPATIBLE: dict[ShapeKind, frozenset[str]] = {
    ShapeKind.EMPTY: frozenset(),
    ShapeKind.SINGLE_KPI: frozenset({ChartType.KPI_CARD, ChartType.TABLE}),
    ShapeKind.TIME_SERIES: frozenset({ChartType.LINE, ChartType.BAR, ChartType.DUAL_AXIS_LINE, ChartType.TABLE}),
    ShapeKind.CATEGORICAL_SHARE: frozenset({ChartType.PIE, ChartType.BAR, ChartType.HORIZONTAL_BAR, ChartType.TABLE}),
    ShapeKind.RANKING: frozenset({ChartType.HORIZONTAL_BAR, ChartType.BAR, ChartType.PIE, ChartType.TABLE}),
    ShapeKind.DISTRIBUTION: frozenset({ChartType.HISTOGRAM, ChartType.TABLE}),
    ShapeKind.MULTI_MEASURE: frozenset({ChartType.GROUPED_BAR, ChartType.BAR, ChartType.DUAL_AXIS_LINE, ChartType.TABLE}),
    ShapeKind.TABLE: frozenset({ChartType.TABLE}),
}

_PREFERRED_ALIASES = {
    "column": ChartType.BAR, "bar_chart": ChartType.BAR, "柱状图": ChartType.BAR, "柱图": ChartType.BAR,
    "hbar": ChartType.HORIZONTAL_BAR, "horizontal bar": ChartType.HORIZONTAL_BAR, "条形图": ChartType.HORIZONTAL_BAR,
    "line_chart": ChartType.LINE, "折线图": ChartType.LINE, "趋势图": ChartType.LINE,
    "pie_chart": ChartType.PIE, "donut": ChartType.PIE, "饼图": ChartType.PIE,
    "kpi": ChartType.KPI_CARD, "card": ChartType.KPI_CARD, "指标卡": ChartType.KPI_CARD,
    "histogram": ChartType.HISTOGRAM, "直方图": ChartType.HISTOGRAM,
    "grouped bar": ChartType.GROUPED_BAR, "dual_axis": ChartType.DUAL_AXIS_LINE, "双轴图": ChartType.DUAL_AXIS_LINE,
    "table": ChartType.TABLE, "表格": ChartType.TABLE,
}


def _resolve_preferred(preferred: str, shape: DataShape) -> str:
    key = preferred.strip().lower().replace("-", "_")
    resolved = _PREFERRED_ALIASES.get(key) or _PREFERRED_ALIASES.get(key.replace("_", " ")) or key
    # "bar" is a family: it means a histogram for a distribution and grouped bars for several measures
    if resolved == ChartType.BAR:
        if shape.kind is ShapeKind.DISTRIBUTION:
            return ChartType.HISTOGRAM
        if shape.kind is ShapeKind.MULTI_MEASURE and shape.dimension is not None:
            return ChartType.GROUPED_BAR
    return str(resolved)


def _preferred_fits(chart: str, shape: DataShape) -> tuple[bool, str]:
    if chart not in _COMPATIBLE[shape.kind]:
        if chart == ChartType.PIE and shape.kind is ShapeKind.TIME_SERIES:
            return False, "a pie cannot show a time series"
        return False, f"{chart} cannot draw a {shape.kind} shape"
    if chart == ChartType.PIE:
        m = shape.column(shape.primary_measure or "")
        if not m.non_negative or not 2 <= shape.category_count <= MAX_SHARE_SLICES:
            return False, f"a pie needs 2–{MAX_SHARE_SLICES} non-negative slices"
    if chart == ChartType.DUAL_AXIS_LINE and len(shape.measures) < 2:
        return False, "two y-axes need two measures"
    return True, ""


def _clamp(x: float) -> float:
    return round(min(1.0, max(0.0, x)), 2)


# --------------------------------------------------------------------------- entry point


def recommend_chart(
    columns: list[str],
    rows: list[list[Any]],
    *,
    hints: ShapeHints | None = None,
    preferred: str | None = None,
    partial: Sequence[str] = (),
) -> ChartRecommendation:
    """Pick a chart for a query result: the shape's rules, then the user's preference where it
    fits, then an ECharts option for the winner. Deterministic for the same input.

    ``partial`` names the time buckets that are partial periods (their labels as the SQL returns
    them); those the result holds are marked in the option and listed in ``partial_buckets``."""
    width = len(columns)
    rows = [list(r)[:width] + [None] * (width - len(r)) for r in rows]  # ragged rows: pad with nulls
    shape = analyze_shape(columns, rows, hints=hints)
    held = _partial_held(shape, rows, partial)
    ctx = _Context(shape, list(columns), rows, frozenset(_period_key(label) for label in held))
    notes: list[str] = []
    candidates = _rules(ctx)

    # Nulls in the plotted measures make any chart less trustworthy (gaps, dropped slices).
    null_ratio = max((shape.column(m).null_ratio for m in shape.measures), default=0.0)
    if null_ratio > 0 and shape.kind is not ShapeKind.EMPTY:
        penalty = min(0.3, null_ratio * 0.5)
        candidates = [
            c if c.chart_type == ChartType.TABLE else ChartCandidate(c.chart_type, c.confidence - penalty, c.reason)
            for c in candidates
        ]
        notes.append(f"{null_ratio:.0%} of measure values are null: confidence lowered by {penalty:.2f}")

    chosen: str | None = None  # the preference that fits, first among equals
    if preferred:
        chart = _resolve_preferred(preferred, shape)
        fits, why_not = _preferred_fits(chart, shape)
        if fits:
            top = max(c.confidence for c in candidates)
            own = next((c for c in candidates if c.chart_type == chart), None)
            base = own.confidence if own else 0.5
            reason = own.reason if own else f"{chart} can draw a {shape.kind}"
            reason += f"; the user's preferred chart ({preferred}) fits a {shape.kind}"
            boosted = ChartCandidate(chart, min(0.99, max(base + 0.15, top + 0.01)), reason)
            candidates = [boosted] + [c for c in candidates if c.chart_type != chart]
            chosen = chart
        else:
            notes.append(f"preferred chart '{preferred}' ignored: {why_not}")
            head = candidates[0]
            candidates[0] = ChartCandidate(head.chart_type, head.confidence, f"{head.reason}; preferred '{preferred}' ignored: {why_not}")

    order = {str(t): i for i, t in enumerate(ChartType)}
    ranked = sorted(
        (ChartCandidate(str(c.chart_type), _clamp(c.confidence), c.reason) for c in candidates),
        key=lambda c: (-c.confidence, c.chart_type != chosen, order.get(c.chart_type, 99)),
    )[:3]
    best = ranked[0]
    option, option_notes = _build_option(best.chart_type, ctx)
    notes.extend(option_notes)
    if held:
        notes.append("partial periods marked: " + ", ".join(held))
    return ChartRecommendation(
        chart_type=best.chart_type,
        confidence=best.confidence,
        checkpoint_status=checkpoint_status(best.confidence),
        candidates=ranked,
        option=option,
        shape=shape,
        notes=notes,
        partial_buckets=held,
    )


def kpi_card(
    columns: list[str], rows: list[list[Any]], *, hints: ShapeHints | None = None, partial: Sequence[str] = ()
) -> ChartRecommendation | None:
    """The KPI card of a one-number result, without ranking chart candidates (kpi_lookup's path);
    None when the result is not one number."""
    if len(rows) != 1:
        return None
    shape = analyze_shape(columns, [list(r) for r in rows], hints=hints)
    if shape.kind is not ShapeKind.SINGLE_KPI:
        return None
    held = _partial_held(shape, rows, partial)
    ctx = _Context(shape, list(columns), [list(r) for r in rows], frozenset(_period_key(label) for label in held))
    option, notes = _build_option(ChartType.KPI_CARD, ctx)
    return ChartRecommendation(
        chart_type=str(ChartType.KPI_CARD),
        confidence=0.95,
        checkpoint_status=checkpoint_status(0.95),
        candidates=[ChartCandidate(str(ChartType.KPI_CARD), 0.95, "kpi_lookup: one number")],
        option=option,
        shape=shape,
        notes=notes,
        partial_buckets=held,
    )


def _period_key(value: Any) -> str:
    """A bucket label compared on the date it starts: date(2026, 11, 1), "2026-11-01", a midnight
    "2026-11-01T00:00:00", "2026-11" and "2026年11月" are one key ("2026-Q4" is 2026-10-01);
    other labels compare as text."""
    if isinstance(value, datetime):
        return value.date().isoformat() if value.time() == datetime.min.time() else value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    text = str(value).strip()
    parsed = parse_temporal(text)
    if parsed is None:
        return text
    key, granularity = parsed
    if granularity in ("day", "timestamp") and all(part == 0 for part in key[3:]):
        return f"{key[0]:04d}-{key[1]:02d}-{key[2]:02d}"
    if granularity == "month":
        return f"{key[0]:04d}-{key[1]:02d}-01"
    if granularity == "quarter":
        return f"{key[0]:04d}-{3 * key[1] - 2:02d}-01"
    return text


def _partial_held(shape: DataShape, rows: list[list[Any]], partial: Sequence[str]) -> list[str]:
    """The partial labels that a temporal column of the result holds, in time order, once each."""
    if not partial:
        return []
    present: dict[str, Any] = {}
    for profile in shape.columns:
        if profile.role.value == "temporal":
            for row in rows:
                if not is_null(row[profile.index]):
                    present.setdefault(_period_key(row[profile.index]), row[profile.index])
    held = {_period_key(label): str(label) for label in partial if _period_key(label) in present}
    return [held[key] for key in sorted(held)]


# --------------------------------------------------------------------------- ECharts options


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return str(value)


def _num(value: Any) -> int | float | None:
    """A plottable number: ints stay ints, Decimals become floats, nulls stay None."""
    if is_null(value):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    number = as_number(value)
    if number is None:
        return None
    return int(number) if isinstance(value, str) and number.is_integer() and "." not in value else number


def _label(value: Any) -> str:
    if is_null(value):
        return NULL_LABEL
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _add(a: int | float | None, b: int | float | None) -> int | float | None:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _title(ctx: _Context, by: str | None) -> dict[str, Any]:
    s = ctx.shape
    what = s.hints.metric or " / ".join(s.measures) or "result"
    title: dict[str, Any] = {"text": f"{what} by {by}" if by else what}
    if s.context:
        first = ctx.rows[0]
        title["subtext"] = " · ".join(_label(first[s.column(c).index]) for c in s.context)
    return title


def _downsample(count: int, cap: int) -> list[int]:
    """Evenly spaced indices that keep the first and last point."""
    if count <= cap:
        return list(range(count))
    return sorted({round(i * (count - 1) / (cap - 1)) for i in range(cap)})


def _build_option(chart: str, ctx: _Context) -> tuple[dict[str, Any], list[str]]:
    s = ctx.shape
    if s.kind is ShapeKind.EMPTY or chart == ChartType.TABLE:
        return _table_option(ctx)
    if chart == ChartType.KPI_CARD:
        return _kpi_option(ctx)
    if chart == ChartType.HISTOGRAM:
        return _histogram_option(ctx)
    if chart == ChartType.PIE:
        return _pie_option(ctx)
    if s.kind is ShapeKind.TIME_SERIES:
        return _time_series_option(chart, ctx)
    if chart in (ChartType.BAR, ChartType.HORIZONTAL_BAR) and s.kind in (ShapeKind.RANKING, ShapeKind.CATEGORICAL_SHARE):
        return _category_bar_option(chart, ctx)
    return _multi_measure_option(chart, ctx)


def _table_option(ctx: _Context) -> tuple[dict[str, Any], list[str]]:
    """Not an ECharts series: a documented custom shape `{"table": {"columns", "rows"}}` the
    front end renders as a grid, with an ECharts title so the panel looks like its siblings."""
    notes: list[str] = []
    rows = ctx.rows
    if len(rows) > MAX_POINTS:
        notes.append(f"table capped at {MAX_POINTS} of {len(rows)} rows")
        rows = rows[:MAX_POINTS]
    title: dict[str, Any] = {"text": ctx.shape.hints.metric or "result"}
    if ctx.shape.kind is ShapeKind.EMPTY:
        title["subtext"] = "no data"
    table: dict[str, Any] = {"columns": list(ctx.columns), "rows": [[_json_value(v) for v in row] for row in rows]}
    if ctx.partial:
        temporal = [p.index for p in ctx.shape.columns if p.role.value == "temporal"]
        table["partial_rows"] = [i for i, row in enumerate(rows) if any(ctx.is_partial(row[t]) for t in temporal)]
    option = {"title": title, "table": table}
    return option, notes


def _format_kpi(value: int | float | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.2f}"


def _kpi_option(ctx: _Context) -> tuple[dict[str, Any], list[str]]:
    """A KPI card: an ECharts `graphic` text element (renders as-is in ECharts) plus the custom
    `{"kpi": {measure, value, formatted, label}}` for front ends that draw their own card."""
    s = ctx.shape
    measure = s.primary_measure or ""
    row = ctx.rows[0]
    value = _num(row[s.column(measure).index])
    label = " · ".join(
        _label(row[p.index]) for p in s.columns if p.name != measure and p.role.value in ("temporal", "categorical")
    )
    formatted = _format_kpi(value)
    notes = [] if value is not None else [f"{measure} is null"]
    partial = any(ctx.is_partial(row[p.index]) for p in s.columns if p.role.value == "temporal")
    if partial:
        label = f"{label} ({PARTIAL_LABEL})" if label else PARTIAL_LABEL
    kpi: dict[str, Any] = {"measure": measure, "value": value, "formatted": formatted, "label": label or None}
    if partial:
        kpi["partial"] = True
    option = {
        "title": {"text": s.hints.metric or measure, "subtext": label, "left": "center"},
        "tooltip": {"show": False},
        "graphic": [
            {
                "type": "text",
                "left": "center",
                "top": "middle",
                "style": {"text": formatted, "fontSize": 48, "fontWeight": "bold", "fill": "#333"},
            }
        ],
        "kpi": kpi,
    }
    return option, notes


def _category_pairs(ctx: _Context) -> tuple[list[tuple[str, int | float]], list[str]]:
    """(category, value) with nulls dropped and repeated categories summed, in row order."""
    s = ctx.shape
    notes: list[str] = []
    totals: dict[str, int | float | None] = {}
    dropped = 0
    repeated = 0
    for cat, val in zip(ctx.cells(s.dimension or ""), ctx.cells(s.primary_measure or ""), strict=True):
        number = _num(val)
        if number is None:
            dropped += 1
            continue
        key = _label(cat)
        if key in totals:
            repeated += 1
        totals[key] = _add(totals.get(key), number)
    if dropped:
        notes.append(f"{dropped} row(s) with a null {s.primary_measure} left out")
    if repeated:
        notes.append(f"{repeated} repeated {s.dimension} value(s) summed")
    return [(k, v) for k, v in totals.items() if v is not None], notes


def _pie_option(ctx: _Context) -> tuple[dict[str, Any], list[str]]:
    s = ctx.shape
    pairs, notes = _category_pairs(ctx)
    pairs.sort(key=lambda kv: -kv[1])
    name = s.primary_measure or ""
    option = {
        "title": _title(ctx, s.dimension),
        "tooltip": {"trigger": "item", "formatter": "{b}: {c} ({d}%)"},
        "legend": {"orient": "vertical", "left": "left", "data": [k for k, _ in pairs]},
        "series": [
            {
                "name": name,
                "type": "pie",
                "radius": "60%",
                "data": [{"name": k, "value": v} for k, v in pairs],
                "label": {"formatter": "{b}: {d}%"},
            }
        ],
    }
    return option, notes


def _category_bar_option(chart: str, ctx: _Context) -> tuple[dict[str, Any], list[str]]:
    s = ctx.shape
    pairs, notes = _category_pairs(ctx)
    ranked = chart == ChartType.HORIZONTAL_BAR or s.ordered is not None or s.hints.top_n is not None
    if ranked:
        pairs.sort(key=lambda kv: -kv[1])  # stable: ties keep row order
    cap = MAX_POINTS
    if s.hints.top_n and len(pairs) > s.hints.top_n:
        cap = min(cap, s.hints.top_n)
    if len(pairs) > cap:
        notes.append(f"showing {cap} of {len(pairs)} {s.dimension} values")
        pairs = pairs[:cap]
    name = s.primary_measure or ""
    categories = [k for k, _ in pairs]
    series = [{"name": name, "type": "bar", "data": [v for _, v in pairs]}]
    if chart == ChartType.HORIZONTAL_BAR:
        # inverse keeps the first (largest) bar on top
        x_axis: dict[str, Any] = {"type": "value", "name": name}
        y_axis: dict[str, Any] = {"type": "category", "data": categories, "inverse": True}
    else:
        x_axis = {"type": "category", "data": categories}
        y_axis = {"type": "value", "name": name}
    option = {
        "title": _title(ctx, s.dimension),
        "tooltip": {"trigger": "axis", "axisPointer": {"type": "shadow"}},
        "legend": {"data": [name]},
        "grid": {"containLabel": True},
        "xAxis": x_axis,
        "yAxis": y_axis,
        "series": series,
    }
    return option, notes


def _value_axes(ctx: _Context, dual: bool) -> tuple[list[dict[str, Any]] | dict[str, Any], dict[str, int]]:
    """One value axis, or two: measures within SCALE_SPLIT of the largest share the left axis."""
    s = ctx.shape
    if not dual:
        return {"type": "value"}, dict.fromkeys(s.measures, 0)
    mags = {m: s.column(m).magnitude for m in s.measures}
    top = max(mags.values()) or 1.0
    index = {m: 0 if mags[m] * SCALE_SPLIT >= top else 1 for m in s.measures}
    left = [m for m in s.measures if index[m] == 0]
    right = [m for m in s.measures if index[m] == 1]
    axes: list[dict[str, Any]] = [
        {"type": "value", "name": " / ".join(left), "position": "left"},
        {"type": "value", "name": " / ".join(right), "position": "right", "splitLine": {"show": False}},
    ]
    return axes, index


def _time_series_option(chart: str, ctx: _Context) -> tuple[dict[str, Any], list[str]]:
    s = ctx.shape
    notes: list[str] = []
    t = s.column(s.temporal or "")
    name_grain = t.granularity if t.granularity in ("year",) else None
    t_cells = ctx.cells(t.name)

    # x values in time order (row order for labels that do not parse), each with its sort key
    keyed: dict[str, tuple[Any, ...]] = {}
    for position, value in enumerate(t_cells):
        if is_null(value):
            continue
        label = _label(value)
        if label not in keyed:
            parsed = parse_temporal(value, name_grain) if t.granularity not in ("label",) else None
            if parsed is None and isinstance(value, int):
                parsed = ((value,), "ordinal")
            keyed[label] = (0, parsed[0]) if parsed else (1, (position,))
    null_times = sum(1 for v in t_cells if is_null(v))
    if null_times:
        notes.append(f"{null_times} row(s) with a null {t.name} left out")
    xs = sorted(keyed, key=lambda label: keyed[label])

    # series name → x → value (repeated (x, series) pairs summed)
    data: dict[str, dict[str, int | float | None]] = {}
    if s.series:
        m = s.primary_measure or ""
        for tv, sv, mv in zip(t_cells, ctx.cells(s.series), ctx.cells(m), strict=True):
            if is_null(tv):
                continue
            points = data.setdefault(_label(sv), {})
            x = _label(tv)
            points[x] = _add(points[x], _num(mv)) if x in points else _num(mv)
        axis_index = dict.fromkeys(data, 0)
        totals = {name: sum(v for v in pts.values() if v is not None) for name, pts in data.items()}
        names = sorted(data, key=lambda k: (-totals[k], k))
        if len(names) > MAX_SERIES:
            notes.append(f"showing the {MAX_SERIES} largest of {len(names)} {s.series} series")
            names = names[:MAX_SERIES]
        value_axis: Any = {"type": "value", "name": m}
    else:
        for m in s.measures:
            points = {}
            for tv, mv in zip(t_cells, ctx.cells(m), strict=True):
                if is_null(tv):
                    continue
                x = _label(tv)
                points[x] = _add(points[x], _num(mv)) if x in points else _num(mv)
            data[m] = points
        names = list(s.measures)
        value_axis, axis_index = _value_axes(ctx, chart == ChartType.DUAL_AXIS_LINE)

    keep = _downsample(len(xs), MAX_POINTS)
    if len(keep) < len(xs):
        notes.append(f"showing {len(keep)} of {len(xs)} points of {t.name} (evenly sampled)")
        xs = [xs[i] for i in keep]

    time_axis = chart != ChartType.BAR and t.granularity in ("day", "timestamp")
    series_type = "bar" if chart == ChartType.BAR else "line"
    series = []
    for name in names:
        points = data[name]
        entry: dict[str, Any] = {"name": name, "type": series_type}
        if time_axis:
            entry["data"] = [[x, points[x]] for x in xs if x in points]
            entry["showSymbol"] = len(xs) <= 60
        else:
            entry["data"] = [points.get(x) for x in xs]
        if series_type == "line":
            entry["connectNulls"] = False  # a null is a gap, not a zero
        if axis_index.get(name):
            entry["yAxisIndex"] = axis_index[name]
        series.append(entry)

    partial_xs = [x for x in xs if ctx.is_partial(x)]
    if partial_xs:
        _mark_partial(series, xs, partial_xs, bar=series_type == "bar", time_axis=time_axis)

    x_axis: dict[str, Any] = {"type": "time"} if time_axis else {"type": "category", "data": xs}
    if series_type == "bar" and not time_axis:
        x_axis["boundaryGap"] = True
    elif not time_axis:
        x_axis["boundaryGap"] = False
    option = {
        "title": _title(ctx, t.name),
        "tooltip": {"trigger": "axis"},
        "legend": {"data": names},
        "xAxis": x_axis,
        "yAxis": value_axis,
        "series": series,
    }
    return option, notes


def _mark_partial(series: list[dict[str, Any]], xs: list[str], partial_xs: list[str], *, bar: bool, time_axis: bool) -> None:
    """Partial points drawn hollow with a dashed border, and a grey band labelled "partial period":
    over the bar, or on a line over the segment that leads into (or out of) the partial point."""
    style: dict[str, Any] = (
        {"opacity": 0.45, "borderType": "dashed", "borderWidth": 1, "borderColor": "#666"}
        if bar
        else {"borderType": "dashed", "borderWidth": 2}
    )
    wanted = set(partial_xs)
    for entry in series:
        marked: list[Any] = []
        for index, point in enumerate(entry["data"]):
            x, value = (point[0], point[1]) if time_axis else (xs[index], point)
            if x not in wanted or value is None:
                marked.append(point)
                continue
            item: dict[str, Any] = {"value": point, "itemStyle": dict(style), "partial": True}
            if not bar:
                item.update(symbol="emptyCircle", symbolSize=9)
            marked.append(item)
        entry["data"] = marked
    areas = []
    for x in partial_xs:
        i = xs.index(x)
        if bar or len(xs) == 1:
            left, right = x, x
        elif i == len(xs) - 1:
            left, right = xs[i - 1], x
        elif i == 0:
            left, right = x, xs[1]
        else:
            left, right = xs[i - 1], xs[i + 1]
        areas.append([{"name": PARTIAL_LABEL, "xAxis": left}, {"xAxis": right}])
    if series:
        series[0]["markArea"] = {
            "silent": True,
            "itemStyle": {"color": "rgba(160, 160, 160, 0.15)"},
            "label": {"show": True, "position": "insideTop", "color": "#888"},
            "data": areas,
        }


def _multi_measure_option(chart: str, ctx: _Context) -> tuple[dict[str, Any], list[str]]:
    """Grouped bars (or bar + line on two y-axes) over a dimension; with no dimension, the
    measures themselves are the categories of one bar series."""
    s = ctx.shape
    notes: list[str] = []
    if s.dimension is None:
        row = ctx.rows[0]
        values = [_num(row[s.column(m).index]) for m in s.measures]
        option = {
            "title": _title(ctx, None),
            "tooltip": {"trigger": "axis"},
            "legend": {"data": ["value"]},
            "xAxis": {"type": "category", "data": list(s.measures)},
            "yAxis": {"type": "value"},
            "series": [{"name": "value", "type": "bar", "data": values}],
        }
        return option, notes

    order: list[str] = []
    sums: dict[str, dict[str, int | float | None]] = {m: {} for m in s.measures}
    for row in ctx.rows:
        key = _label(row[s.column(s.dimension).index])
        if key not in sums[s.measures[0]]:
            order.append(key)
        for m in s.measures:
            v = _num(row[s.column(m).index])
            sums[m][key] = _add(sums[m][key], v) if key in sums[m] else v
    if len(order) < len(ctx.rows):
        notes.append(f"{len(ctx.rows) - len(order)} repeated {s.dimension} value(s) summed")
    if len(order) > MAX_POINTS:
        notes.append(f"showing {MAX_POINTS} of {len(order)} {s.dimension} values")
        order = order[:MAX_POINTS]

    dual = chart == ChartType.DUAL_AXIS_LINE
    y_axis, axis_index = _value_axes(ctx, dual)
    series = []
    for m in s.measures:
        # on two axes the left-axis measures stay bars and the right-axis ones become lines
        kind = "line" if dual and axis_index[m] == 1 else "bar"
        entry: dict[str, Any] = {"name": m, "type": kind, "data": [sums[m].get(k) for k in order]}
        if axis_index[m]:
            entry["yAxisIndex"] = axis_index[m]
        series.append(entry)
    option = {
        "title": _title(ctx, s.dimension),
        "tooltip": {"trigger": "axis", "axisPointer": {"type": "shadow"}},
        "legend": {"data": list(s.measures)},
        "grid": {"containLabel": True},
        "xAxis": {"type": "category", "data": order},
        "yAxis": y_axis,
        "series": series,
    }
    return option, notes


def _fmt_edge(x: float, step: float) -> str:
    digits = max(0, -math.floor(math.log10(step)) + 1) if step > 0 else 0
    return f"{x:,.{min(digits, 6)}f}"


def _histogram_option(ctx: _Context) -> tuple[dict[str, Any], list[str]]:
    """Equal-width bins (Sturges' rule) as a bar series with no gap between bars; a result that
    is already binned is drawn as given."""
    s = ctx.shape
    notes: list[str] = []
    measure = s.primary_measure or ""
    if s.prebinned:
        labels: list[str] = []
        counts: list[int | float | None] = []
        for cat, val in zip(ctx.cells(s.dimension or ""), ctx.cells(measure), strict=True):
            labels.append(_label(cat))
            counts.append(_num(val))
        y_name = measure
    else:
        values = [n for n in (as_number(v) for v in ctx.cells(measure)) if n is not None]
        nulls = len(ctx.rows) - len(values)
        if nulls:
            notes.append(f"{nulls} null {measure} value(s) left out of the bins")
        low, high = (min(values), max(values)) if values else (0.0, 0.0)
        bins = min(50, max(5, math.ceil(math.log2(len(values)) + 1))) if values else 0
        if values and high == low:
            bins = 1
        width = (high - low) / bins if bins > 1 else 1.0
        tally = [0] * bins
        for v in values:
            tally[min(bins - 1, int((v - low) / width)) if bins > 1 else 0] += 1
        labels = [f"{_fmt_edge(low + i * width, width)}–{_fmt_edge(low + (i + 1) * width, width)}" for i in range(bins)]
        if bins == 1:
            labels = [_fmt_edge(low, 1.0)]
        if not values:
            notes.append("no values to bin")
        counts = list(tally)
        y_name = "count"
    option = {
        "title": _title(ctx, None),
        "tooltip": {"trigger": "axis"},
        "legend": {"data": [y_name]},
        "xAxis": {"type": "category", "data": labels, "name": s.dimension or measure},
        "yAxis": {"type": "value", "name": y_name},
        "series": [{"name": y_name, "type": "bar", "data": counts, "barCategoryGap": "0%"}],
    }
    return option, notes
