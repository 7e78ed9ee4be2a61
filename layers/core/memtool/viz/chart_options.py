"""ECharts options: the option that draws a result as the chosen chart type, and the vocabulary
the chart rules share with it (the chart types, the point and series caps, the per-result context,
the period key partial buckets are matched on).

One builder per family: a table and a KPI card (custom shapes a front end renders), a pie and
category bars (category, value pairs, repeated categories summed), a time series (lines or bars
over time, one per measure or per series value, capped and evenly sampled), grouped bars or a
bar + line on two y-axes over a dimension, and a histogram (Sturges' bins, or bins as given).

Partial periods are marked where the chart draws time: the point or bar is hollow with a dashed
border and a grey ``markArea`` labelled "partial period" shades it (on a line, the segment into
it); a KPI card says "(partial)"; a table lists the partial rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from memtool.viz.shape import ColumnProfile, DataShape, ShapeKind, as_number, is_null, parse_temporal

__all__ = [
    "MAX_POINTS",
    "MAX_SERIES",
    "NULL_LABEL",
    "PARTIAL_LABEL",
    "SCALE_SPLIT",
    "ChartContext",
    "ChartType",
    "build_option",
    "period_key",
]

MAX_POINTS = 500  # points per series in an option: more is unreadable and bloats the response
MAX_SERIES = 10  # lines in one time series chart; the rest are dropped by total
SCALE_SPLIT = 10.0  # measures whose magnitudes differ by more than this get their own y-axis
NULL_LABEL = "(null)"
PARTIAL_LABEL = "partial period"


# --------------------------------------------------------------------------- vocabulary


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
class ChartContext:
    shape: DataShape
    columns: list[str]
    rows: list[list[Any]]
    partial: frozenset[str] = frozenset()  # period keys (see period_key) of partial buckets

    def is_partial(self, value: Any) -> bool:
        return bool(self.partial) and period_key(value) in self.partial

    def cells(self, name: str) -> list[Any]:
        i = self.shape.column(name).index
        return [row[i] if i < len(row) else None for row in self.rows]


def period_key(value: Any) -> str:
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


# --------------------------------------------------------------------------- values


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


def _title(ctx: ChartContext, by: str | None) -> dict[str, Any]:
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


# --------------------------------------------------------------------------- ECharts options


def build_option(chart: str, ctx: ChartContext) -> tuple[dict[str, Any], list[str]]:
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


def _table_option(ctx: ChartContext) -> tuple[dict[str, Any], list[str]]:
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


def _kpi_option(ctx: ChartContext) -> tuple[dict[str, Any], list[str]]:
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


def _category_pairs(ctx: ChartContext) -> tuple[list[tuple[str, int | float]], list[str]]:
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


def _pie_option(ctx: ChartContext) -> tuple[dict[str, Any], list[str]]:
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


def _category_bar_option(chart: str, ctx: ChartContext) -> tuple[dict[str, Any], list[str]]:
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


def _value_axes(ctx: ChartContext, dual: bool) -> tuple[list[dict[str, Any]] | dict[str, Any], dict[str, int]]:
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


@dataclass
class _TimeLines:
    """The lines (or bar series) of a time series: name → x label → value, drawn in ``names``
    order, each on the value axis ``axis_index`` gives it."""

    data: dict[str, dict[str, int | float | None]]
    names: list[str]
    value_axis: Any
    axis_index: dict[str, int]


def _time_order(t: ColumnProfile, t_cells: list[Any]) -> list[str]:
    """The x labels in time order (row order for labels that do not parse), each once."""
    name_grain = t.granularity if t.granularity in ("year",) else None
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
    return sorted(keyed, key=lambda label: keyed[label])


def _lines_by_series(ctx: ChartContext, t_cells: list[Any], notes: list[str]) -> _TimeLines:
    """One line per value of the series column, the largest totals first (repeated (x, series)
    pairs summed), capped at MAX_SERIES."""
    s = ctx.shape
    series = s.series or ""
    m = s.primary_measure or ""
    data: dict[str, dict[str, int | float | None]] = {}
    for tv, sv, mv in zip(t_cells, ctx.cells(series), ctx.cells(m), strict=True):
        if is_null(tv):
            continue
        points = data.setdefault(_label(sv), {})
        x = _label(tv)
        points[x] = _add(points[x], _num(mv)) if x in points else _num(mv)
    axis_index = dict.fromkeys(data, 0)
    totals = {name: sum(v for v in pts.values() if v is not None) for name, pts in data.items()}
    names = sorted(data, key=lambda k: (-totals[k], k))
    if len(names) > MAX_SERIES:
        notes.append(f"showing the {MAX_SERIES} largest of {len(names)} {series} series")
        names = names[:MAX_SERIES]
    return _TimeLines(data, names, {"type": "value", "name": m}, axis_index)


def _lines_by_measure(chart: str, ctx: ChartContext, t_cells: list[Any]) -> _TimeLines:
    """One line per measure (repeated x values summed); two y-axes for a dual-axis line."""
    s = ctx.shape
    data: dict[str, dict[str, int | float | None]] = {}
    for m in s.measures:
        points: dict[str, int | float | None] = {}
        for tv, mv in zip(t_cells, ctx.cells(m), strict=True):
            if is_null(tv):
                continue
            x = _label(tv)
            points[x] = _add(points[x], _num(mv)) if x in points else _num(mv)
        data[m] = points
    value_axis, axis_index = _value_axes(ctx, chart == ChartType.DUAL_AXIS_LINE)
    return _TimeLines(data, list(s.measures), value_axis, axis_index)


def _time_series_entries(lines: _TimeLines, xs: list[str], *, series_type: str, time_axis: bool) -> list[dict[str, Any]]:
    """The ECharts series: [x, value] pairs on a time axis, values in x order on a category axis."""
    series = []
    for name in lines.names:
        points = lines.data[name]
        entry: dict[str, Any] = {"name": name, "type": series_type}
        if time_axis:
            entry["data"] = [[x, points[x]] for x in xs if x in points]
            entry["showSymbol"] = len(xs) <= 60
        else:
            entry["data"] = [points.get(x) for x in xs]
        if series_type == "line":
            entry["connectNulls"] = False  # a null is a gap, not a zero
        if lines.axis_index.get(name):
            entry["yAxisIndex"] = lines.axis_index[name]
        series.append(entry)
    return series


def _time_x_axis(xs: list[str], *, series_type: str, time_axis: bool) -> dict[str, Any]:
    x_axis: dict[str, Any] = {"type": "time"} if time_axis else {"type": "category", "data": xs}
    if series_type == "bar" and not time_axis:
        x_axis["boundaryGap"] = True
    elif not time_axis:
        x_axis["boundaryGap"] = False
    return x_axis


def _time_series_option(chart: str, ctx: ChartContext) -> tuple[dict[str, Any], list[str]]:
    s = ctx.shape
    notes: list[str] = []
    t = s.column(s.temporal or "")
    t_cells = ctx.cells(t.name)

    xs = _time_order(t, t_cells)
    null_times = sum(1 for v in t_cells if is_null(v))
    if null_times:
        notes.append(f"{null_times} row(s) with a null {t.name} left out")

    lines = _lines_by_series(ctx, t_cells, notes) if s.series else _lines_by_measure(chart, ctx, t_cells)

    keep = _downsample(len(xs), MAX_POINTS)
    if len(keep) < len(xs):
        notes.append(f"showing {len(keep)} of {len(xs)} points of {t.name} (evenly sampled)")
        xs = [xs[i] for i in keep]

    time_axis = chart != ChartType.BAR and t.granularity in ("day", "timestamp")
    series_type = "bar" if chart == ChartType.BAR else "line"
    series = _time_series_entries(lines, xs, series_type=series_type, time_axis=time_axis)

    partial_xs = [x for x in xs if ctx.is_partial(x)]
    if partial_xs:
        _mark_partial(series, xs, partial_xs, bar=series_type == "bar", time_axis=time_axis)

    option = {
        "title": _title(ctx, t.name),
        "tooltip": {"trigger": "axis"},
        "legend": {"data": lines.names},
        "xAxis": _time_x_axis(xs, series_type=series_type, time_axis=time_axis),
        "yAxis": lines.value_axis,
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


def _multi_measure_option(chart: str, ctx: ChartContext) -> tuple[dict[str, Any], list[str]]:
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


def _histogram_option(ctx: ChartContext) -> tuple[dict[str, Any], list[str]]:
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
