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

The rules and the entry points live here; the ECharts options (and the chart types, caps and
per-result context they share with the rules) live in ``memtool.viz.chart_options``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from memtool.viz.chart_options import (
    MAX_POINTS,
    SCALE_SPLIT,
    ChartContext,
    ChartType,
    build_option,
    period_key,
)
from memtool.viz.shape import MAX_SHARE_SLICES, DataShape, ShapeHints, ShapeKind, analyze_shape, is_null

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
    option: dict[str, Any]  # ECharts option for chart_type (kpi_card/table: see chart_options)
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


def _scale_ratio(shape: DataShape) -> float:
    mags = [shape.column(m).magnitude for m in shape.measures]
    positive = [m for m in mags if m > 0]
    if len(positive) < 2:
        return 1.0
    return max(positive) / min(positive)


def _rules(ctx: ChartContext) -> list[ChartCandidate]:
    """Candidates for a shape, before the user's preference and the null penalty: one family of
    rules per shape kind (the table in this module's docstring)."""
    s = ctx.shape
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
        return _time_series_rules(s)
    if kind is ShapeKind.CATEGORICAL_SHARE:
        slices = s.category_count
        return [
            C(ChartType.PIE, 0.9 if slices <= 6 else 0.8, f"share of {s.primary_measure} across {slices} {s.dimension} values"),
            C(ChartType.BAR, 0.65, "bars compare the parts exactly"),
            C(ChartType.HORIZONTAL_BAR, 0.55, "ranked bars"),
        ]
    if kind is ShapeKind.RANKING:
        return _ranking_rules(s)
    if kind is ShapeKind.DISTRIBUTION:
        return _distribution_rules(s)
    if kind is ShapeKind.MULTI_MEASURE:
        return _multi_measure_rules(s)
    return _table_rules(s)


def _time_series_rules(s: DataShape) -> list[ChartCandidate]:
    """Two y-axes for measures far apart, bars for a comparison or too few points, else a line."""
    h = s.hints
    C = ChartCandidate
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


def _ranking_rules(s: DataShape) -> list[ChartCandidate]:
    """Bars for a comparison, horizontal bars for a ranking, else vertical bars (a pie third when
    the slices fit)."""
    h = s.hints
    C = ChartCandidate
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


def _distribution_rules(s: DataShape) -> list[ChartCandidate]:
    C = ChartCandidate
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


def _multi_measure_rules(s: DataShape) -> list[ChartCandidate]:
    """Grouped bars for a comparison or close scales, two y-axes for scales far apart, plain bars
    for one row of measures."""
    h = s.hints
    C = ChartCandidate
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


def _table_rules(s: DataShape) -> list[ChartCandidate]:
    C = ChartCandidate
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


def fits_kind(chart: str, kind: str) -> bool:
    """Whether ``chart`` can draw a ``kind`` shape at all (a chosen chart is kept per shape kind)."""
    try:
        return chart in _COMPATIBLE[ShapeKind(kind)]
    except ValueError:
        return False


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
    ctx = ChartContext(shape, list(columns), rows, frozenset(period_key(label) for label in held))
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
    option, option_notes = build_option(best.chart_type, ctx)
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
    ctx = ChartContext(shape, list(columns), [list(r) for r in rows], frozenset(period_key(label) for label in held))
    option, notes = build_option(ChartType.KPI_CARD, ctx)
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


def _partial_held(shape: DataShape, rows: list[list[Any]], partial: Sequence[str]) -> list[str]:
    """The partial labels that a temporal column of the result holds, in time order, once each."""
    if not partial:
        return []
    present: dict[str, Any] = {}
    for profile in shape.columns:
        if profile.role.value == "temporal":
            for row in rows:
                if not is_null(row[profile.index]):
                    present.setdefault(period_key(row[profile.index]), row[profile.index])
    held = {period_key(label): str(label) for label in partial if period_key(label) in present}
    return [held[key] for key in sorted(held)]
