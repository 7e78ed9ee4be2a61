"""The tables an analysis needs, built from the question's intent and its answered series.

- **anomaly** and **forecast** read the series the ask already ran (a month grain, widened for
  context by the planner), grouped when the question grouped it (one series per region).
- **attribution** needs the change broken down: the metric by each of the dimensions that can
  explain it (region or city, channel, product; for refunds also the refund reason), for the
  period asked about and the period before it. Those queries are compiled from the intent by the
  semantic layer, so the same definitions (and lessons) hold, and run through the guardrails.
  A ratio (refund rate, average order value) is not additive: its numerator and denominator
  metrics (found from its expression) are read for the whole and by each dimension instead, for
  the rate/mix decomposition, after checking the pair gives back the ratio itself.
- **clustering**, **correlation** and **regression** need several measures per member: the asked
  metric with the catalog's other measures, by the question's grouping (cities by default).

Windows: the period asked about (*focus*) is the question's own time words, before the planner
widened them; a future period is the forecast *horizon*.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from memtool.semantic.catalog import Catalog
from memtool.semantic.intent import Filter, Intent, TimeWindow
from memtool.semantic.time_expressions import add_months, month_start

GRAINS = ("day", "week", "month", "quarter", "year")
ADDITIVE_KINDS = ("money", "count")


def _drill_dimensions(model: Catalog, intent: Intent) -> list[str]:
    """The dimensions a change or an anomaly is broken down by: the model's drill-downs (those of a
    detail for a metric measured by detail, e.g. refunds by reason), the metric's own, none the
    question filters on, nor any on a filtered dimension's table (a city filtered: not its region)."""
    metric = model.metric(intent.metric)
    hints = model.analysis
    candidates = hints.detail_drill_dimensions if metric.by_detail is not None and hints.detail_drill_dimensions else hints.drill_dimensions
    filtered = {f.dimension for f in intent.filters if f.op == "in"}
    filtered_tables = {model.dimension(d).table for d in filtered if model.has_dimension(d)}
    return [
        d
        for d in candidates
        if d in metric.dimensions and d not in filtered and model.dimension(d).table not in filtered_tables
    ]


@dataclass(frozen=True)
class AnalysisWindows:
    focus: TimeWindow | None = None  # the period the question asks about (not the widened context)
    horizon: TimeWindow | None = None  # a future period: what to forecast


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Any]]
    params: dict[str, Any] = field(default_factory=dict)
    queries: list[str] = field(default_factory=list)  # the SQL that built it (beyond the ask's own)
    notes: list[str] = field(default_factory=list)


def analysis_windows(times: Sequence[Any], today: date) -> AnalysisWindows:
    """The focus and the horizon from the question's time matches (``ParsedQuestion.times``)."""
    future = [t.window for t in times if t.window.start > today]
    past = [t.window for t in times if t.window.start <= today and t.family != "same_period_last_year"]
    return AnalysisWindows(focus=max(past, key=lambda w: w.start) if past else None, horizon=future[0] if future else None)


def series_shape(columns: Sequence[str], intent: Intent | None) -> tuple[str | None, list[str], str | None]:
    """(the period column, the group columns, the value column) of an answered table."""
    if not columns:
        return None, [], None
    period = next((c for c in columns if c in GRAINS), None)
    value = columns[-1]
    groups = [c for c in columns if c not in (period, value)]
    return period, groups, value


def month_labels(window: TimeWindow) -> list[str]:
    """The YYYY-MM labels a window covers."""
    labels, current = [], month_start(window.start)
    while current < window.end:
        labels.append(current.strftime("%Y-%m"))
        current = add_months(current, 1)
    return labels


def _label(value: Any) -> str:
    text = str(value)
    return text[:7] if len(text) >= 7 and text[4] == "-" else text


def series_table(columns: list[str], rows: list[list[Any]], intent: Intent | None, windows: AnalysisWindows) -> Table:
    """The answered series, as {period, [group], value} with YYYY-MM labels and the focus marked."""
    period, groups, value = series_shape(columns, intent)
    params: dict[str, Any] = {"period_column": period, "value_column": value, "group_columns": groups, "season_length": 12}
    if windows.focus is not None:
        params["focus"] = month_labels(windows.focus)
    out_rows = [[_label(cell) if name == period else cell for name, cell in zip(columns, row, strict=False)] for row in rows]
    return Table(columns=list(columns), rows=out_rows, params=params)


def forecast_table(columns: list[str], rows: list[list[Any]], intent: Intent | None, windows: AnalysisWindows, today: date) -> Table:
    table = series_table(columns, rows, intent, windows)
    labels = sorted({row[columns.index(table.params["period_column"])] for row in table.rows}) if table.params["period_column"] else []
    horizon = windows.horizon
    if horizon is None:  # "预测…" with no period: the next month after the history
        start = add_months(month_start(today), 1) if not labels else add_months(date.fromisoformat(labels[-1] + "-01"), 1)
        horizon = TimeWindow(start=start, end=add_months(start, 1), label="next month")
        table.notes.append(f"no forecast period named: forecasting {start:%Y-%m}")
    wanted = month_labels(horizon)
    last = date.fromisoformat(labels[-1] + "-01") if labels else month_start(today)
    final = date.fromisoformat(wanted[-1] + "-01")
    steps = max(1, (final.year - last.year) * 12 + final.month - last.month)
    table.params.update({"horizon": steps, "report_periods": wanted, "horizon_label": horizon.label})
    return table


Run = Callable[[Intent], tuple[list[str], list[list[Any]], str]]


def _compared_windows(
    windows: AnalysisWindows, series_labels: Sequence[str], today: date | None
) -> tuple[TimeWindow, TimeWindow, list[str]]:
    """(the month before, the month asked about, notes): the focus when it is one month, else the
    series' last month; a month not over yet is compared as month to date with the same days of
    the month before."""
    focus = windows.focus
    if focus is None or add_months(month_start(focus.start), 1) < focus.end:
        # No single month named (or a longer period): the last month of the series against the one before.
        last = series_labels[-1] if series_labels else None
        if last is None:
            raise ValueError("there is no period to explain")
        start = date.fromisoformat(last + "-01")
        focus = TimeWindow(start=start, end=add_months(start, 1), label=last)
    after = TimeWindow(start=month_start(focus.start), end=add_months(month_start(focus.start), 1), label=f"{focus.start:%Y-%m}")
    before = TimeWindow(start=add_months(after.start, -1), end=after.start, label=f"{add_months(after.start, -1):%Y-%m}")
    notes: list[str] = []
    if today is not None and after.start < today < after.end:
        days = (today - after.start).days
        after = TimeWindow(start=after.start, end=today, label=after.label)
        before = TimeWindow(start=before.start, end=before.start + timedelta(days=days), label=before.label)
        notes.append(
            f"{after.label} is not over: it is compared as month to date ({after.start:%m-%d}..{today - timedelta(days=1):%m-%d}) "
            f"with the same days of {before.label}"
        )
    return before, after, notes


def attribution_table(
    intent: Intent,
    windows: AnalysisWindows,
    run: Run,
    model: Catalog,
    series_labels: Sequence[str],
    today: date | None = None,
) -> Table:
    """The metric by every explaining dimension, for the month asked about and the one before.

    One query per period, grouped by all the dimensions at once, so each dimension's parts add up
    to the same total change. A month not over yet is compared as month to date with the same
    days of the month before. ``run(intent) -> (columns, rows, sql)`` compiles, guards and runs.
    A ratio (refund rate, average order value) gets its numerator and denominator by segment
    instead (``rate_attribution_table``), for the rate/mix decomposition.
    """
    before, after, notes = _compared_windows(windows, series_labels, today)
    if not model.metric(intent.metric).additive:
        table = rate_attribution_table(intent, before, after, run, model)
        table.notes[:0] = notes
        return table
    dims = _drill_dimensions(model, intent)
    queries: list[str] = []
    if dims and _DISTINCT_COUNT.search(model.metric(intent.metric).expression):
        dims = _partitioning_dimensions(intent, dims, (before, after), run, queries, notes)
    if not dims:
        raise ValueError(f"{intent.metric} has no dimension to break its change down by")
    rows: list[list[Any]] = []
    value = intent.metric
    for window in (before, after):
        # In the base unit: parts rounded in 万元 would not add up to the total.
        drill = Intent(metric=intent.metric, dimensions=tuple(dims), filters=tuple(intent.filters), time_window=window, unit=None)
        columns, result, sql = run(drill)
        queries.append(sql)
        value = columns[-1]
        rows.extend([window.label, *row] for row in result)
    return Table(
        columns=["month", *dims, value],
        rows=rows,
        params={
            "period_column": "month",
            "value_column": value,
            "dimensions": dims,
            "before_period": before.label,
            "after_period": after.label,
        },
        queries=queries,
        notes=notes,
    )


_DISTINCT_COUNT = re.compile(r"COUNT\s*\(\s*DISTINCT\b", re.IGNORECASE)


def _partitioning_dimensions(
    intent: Intent, dims: Sequence[str], windows: Sequence[TimeWindow], run: Run, queries: list[str], notes: list[str]
) -> list[str]:
    """The dimensions a distinct count splits into parts that add up to its total, in both windows.

    An order is in one city but may hold several products: counted by product, it counts once in
    each, and the parts' sum exceeds the orders. Such a dimension is left out of the attribution,
    with a note, rather than reported with parts that do not add up (one grouped query per
    dimension and window, and the total)."""
    def total(rows: list[list[Any]]) -> Decimal:
        return sum((Decimal(str(row[-1])) for row in rows if row and row[-1] is not None), Decimal(0))

    wholes = []
    for window in windows:
        _, rows, sql = run(Intent(metric=intent.metric, filters=tuple(intent.filters), time_window=window, unit=None))
        queries.append(sql)
        wholes.append(total(rows))
    kept = []
    for dim in dims:
        sums = []
        for window in windows:
            grouped = Intent(metric=intent.metric, dimensions=(dim,), filters=tuple(intent.filters), time_window=window, unit=None)
            _, rows, sql = run(grouped)
            queries.append(sql)
            sums.append(total(rows))
        if sums == wholes:
            kept.append(dim)
        else:
            notes.append(
                f"not split by {dim}: one item of {intent.metric} can count in several {dim} members, so the parts "
                f"({', '.join(str(s) for s in sums)}) would not add up to the total ({', '.join(str(w) for w in wholes)})"
            )
    return kept


# ---- ratios: each segment's numerator and denominator ------------------------------------------


def _sql_key(node: Any) -> str:
    return str(node.sql(dialect="redshift", normalize=True, comments=False))


def _bare(node: Any) -> Any:
    """An operand of a ratio without its casts, parentheses and NULLIF(…, 0) guard."""
    from sqlglot import exp

    def guard(node: Any) -> bool:  # NULLIF(x, 0): x, with division by zero made NULL
        return isinstance(node, exp.Nullif) and isinstance(node.expression, exp.Literal) and node.expression.name in ("0", "0.0")

    while isinstance(node, (exp.Cast, exp.TryCast, exp.Paren)) or guard(node):
        node = node.this
    return node


def ratio_parts(model: Catalog, name: str) -> tuple[str, str]:
    """(the numerator metric, the denominator metric) of a ratio metric: the model's metrics whose
    expressions are the two sides of its division (``refund_rate`` = ``refund_amount`` /
    ``gross_revenue``; ``avg_order_value`` = ``gross_revenue`` / ``order_count``), on the same
    source, time column and filters. ValueError when its expression is no such division."""
    from sqlglot import exp, parse_one
    from sqlglot.errors import ParseError, TokenError

    metric = model.metric(name)

    def parsed(expression: str) -> Any:
        try:
            return parse_one(expression, read="redshift")
        except (ParseError, TokenError):
            return None

    def period_of(m: Any) -> str | None:  # a metric's own time column, else its source's
        try:
            return m.time_column or model.source(m.source).time_column
        except KeyError:
            return m.time_column

    top = parsed(metric.expression)
    top = _bare(top) if top is not None else None
    if not isinstance(top, exp.Div):
        raise ValueError(f"{name} is not a ratio of two sums (its expression is not one division): its change cannot be split into parts")
    wanted = {"numerator": _sql_key(_bare(top.this)), "denominator": _sql_key(_bare(top.expression))}
    found: dict[str, str] = {}
    for other in model.metrics:
        if (
            other.name == name
            or not other.additive
            or other.kind == "ratio"
            or other.source != metric.source
            or period_of(other) != period_of(metric)
            or sorted(other.filters) != sorted(metric.filters)
        ):
            continue
        node = parsed(other.expression)
        if node is None:
            continue
        key = _sql_key(_bare(node))
        for side, expected in wanted.items():
            if key == expected and side not in found:
                found[side] = other.name
    missing = [side for side in wanted if side not in found]
    if missing:
        raise ValueError(
            f"{name}'s {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not a metric of the model "
            "(an additive metric on the same source with the same expression): its change cannot be split into parts"
        )
    return found["numerator"], found["denominator"]


def _on_detail_of(model: Catalog, metric: Any, dimension: str) -> bool:
    """Whether ``dimension`` is an attribute of the detail a by-detail metric splits by (refund reason)."""
    if metric.by_detail is None or not model.has_dimension(dimension):
        return False
    try:
        detail = model.source(metric.source).detail(metric.by_detail.detail)
    except KeyError:
        return False
    return model.dimension(dimension).table == detail.table


def _cell(value: Any) -> Any:
    return 0 if value is None else value


def _ratio_filters(
    model: Catalog, intent: Intent, numerator: str, denominator: str
) -> tuple[tuple[Filter, ...], tuple[Filter, ...]]:
    """The question's filters for the numerator and for the denominator: a filter on the detail's
    attribute a by-detail ratio reads over the whole's denominator leaves the denominator alone.
    Any other filter the numerator or the denominator cannot take is refused (ValueError)."""
    metric = model.metric(intent.metric)
    num_spec, den_spec = model.metric(numerator), model.metric(denominator)
    filters = tuple(intent.filters)
    for f in filters:
        if f.dimension not in num_spec.dimensions:
            raise ValueError(f"{numerator} (the numerator of {intent.metric}) cannot be filtered by {f.dimension}")
    den_filters = tuple(f for f in filters if not (f.dimension not in den_spec.dimensions and _on_detail_of(model, metric, f.dimension)))
    for f in den_filters:
        if f.dimension not in den_spec.dimensions:
            raise ValueError(f"{denominator} (the denominator of {intent.metric}) cannot be filtered by {f.dimension}")
    return filters, den_filters


def _ratio_dimensions(model: Catalog, intent: Intent, numerator: str, denominator: str) -> tuple[list[str], list[str], list[str]]:
    """The drill-down dimensions both sides of the ratio break down by, those of them whose members
    share the whole's denominator (``shared_denominator``), and a note per dimension left out.
    With none left the ratio's change cannot be split (ValueError)."""
    metric = model.metric(intent.metric)
    num_spec, den_spec = model.metric(numerator), model.metric(denominator)
    notes: list[str] = []
    dims: list[str] = []
    shared: list[str] = []
    for d in _drill_dimensions(model, intent):
        if d not in num_spec.dimensions:
            notes.append(f"{intent.metric} is not broken down by {d}: its numerator {numerator} has no {d}")
        elif d in den_spec.dimensions:
            dims.append(d)
        elif _on_detail_of(model, metric, d) and metric.by_detail is not None and metric.by_detail.denominator:
            dims.append(d)
            shared.append(d)
        else:
            notes.append(f"{intent.metric} is not broken down by {d}: its denominator {denominator} has no {d}")
    if not dims:
        raise ValueError(f"{intent.metric} has no dimension its numerator and denominator can both be broken down by")
    return dims, shared, notes


def rate_attribution_table(intent: Intent, before: TimeWindow, after: TimeWindow, run: Run, model: Catalog) -> Table:
    """The ratio's numerator and denominator for the whole and per member of every explaining
    dimension, in the two periods: one row per (month, dimension, member) with both, and the
    whole's pair per period in ``params["totals"]``, for ``kernels.rate_attribution_report``.

    Each side is its own metric of the model (``ratio_parts``), compiled by the semantic layer
    like any query. Where the ratio reads a detail's attribute over the whole's denominator
    (refunds by reason / all sales: the reasons' rates add up to the rate), every member's
    denominator is the whole's (``shared_denominator``) and filters on that attribute leave the
    denominator alone, as the compiler reads the ratio. Before anything is split, the pair must
    give back the ratio itself, as the model computes it for each period.
    """
    metric = model.metric(intent.metric)
    numerator, denominator = ratio_parts(model, intent.metric)
    num_spec = model.metric(numerator)
    filters, den_filters = _ratio_filters(model, intent, numerator, denominator)
    dims, shared, notes = _ratio_dimensions(model, intent, numerator, denominator)
    queries: list[str] = []

    def value_of(name: str, window: TimeWindow, by: tuple[str, ...], where: tuple[Filter, ...]) -> list[list[Any]]:
        # In the base unit: parts rounded in 万元 would not add up to the total.
        _, rows, sql = run(Intent(metric=name, dimensions=by, filters=where, time_window=window, unit=None))
        queries.append(sql)
        return rows

    rows: list[list[Any]] = []
    totals: dict[str, list[Any]] = {}
    for window in (before, after):
        whole_n = _cell((value_of(numerator, window, (), filters) or [[None]])[0][-1])
        whole_d = _cell((value_of(denominator, window, (), den_filters) or [[None]])[0][-1])
        if not whole_d:
            raise ValueError(f"{denominator} is 0 in {window.label}: {intent.metric} is undefined there, there is no change to split")
        shown = (value_of(intent.metric, window, (), filters) or [[None]])[0][-1]
        _check_reproduces(intent.metric, metric.kind, shown, whole_n, whole_d, numerator, denominator, window.label)
        totals[window.label] = [whole_n, whole_d]
        for d in dims:
            by_n = {row[0]: _cell(row[-1]) for row in value_of(numerator, window, (d,), filters)}
            if d in shared:
                by_d = dict.fromkeys(by_n, whole_d)
            else:
                by_d = {row[0]: _cell(row[-1]) for row in value_of(denominator, window, (d,), den_filters)}
            for member in dict.fromkeys([*by_d, *by_n]):
                rows.append([window.label, d, member, by_n.get(member, 0), by_d.get(member, 0)])
    return Table(
        columns=["month", "dimension", "member", numerator, denominator],
        rows=rows,
        params={
            "method": "rate_mix",
            "period_column": "month",
            "dimension_column": "dimension",
            "member_column": "member",
            "numerator_column": numerator,
            "denominator_column": denominator,
            "value_column": intent.metric,
            "dimensions": dims,
            "shared_denominator": shared,
            "totals": totals,
            "rounding": 0.005 if num_spec.kind == "money" else 0.0,  # the compiler rounds money to cents
            "before_period": before.label,
            "after_period": after.label,
        },
        queries=queries,
        notes=notes,
    )


def _check_reproduces(
    name: str, kind: str, shown: Any, whole_n: Any, whole_d: Any, numerator: str, denominator: str, period: str
) -> None:
    """The pair must give back the ratio the model computes (rounded as the compiler rounds it:
    ratios to 4 decimals, money to 2); otherwise its parts would explain another number."""
    if shown is None:
        raise ValueError(f"{name} has no value in {period}: there is no change to split")
    ours = float(whole_n) / float(whole_d)
    allowed = 0.5e-4 if kind == "ratio" else 0.005 if kind == "money" else 0.0
    if abs(ours - float(shown)) > allowed + 1e-9 * max(1.0, abs(ours)):
        raise ValueError(
            f"{numerator} / {denominator} is {ours!r} in {period}, but {name} is {shown!r}: "
            f"they are not its numerator and denominator, so its change is not split"
        )


def profile_table(
    intent: Intent,
    run: Callable[[Intent], tuple[list[str], list[list[Any]], str]],
    model: Catalog,
    window: TimeWindow | None,
    named: Sequence[str] = (),
) -> Table:
    """Several measures per member of the question's grouping (the model's fallback group, cities
    in the demo): the ones the question named when it named two or more, else the asked metric
    with the model's usual profile (``analysis.profile_metrics``)."""
    fallback = model.analysis.fallback_group or next((d.name for d in model.attribute_dimensions), "")
    group = next((d for d in intent.dimensions if d not in GRAINS), fallback)
    profile = model.analysis.profile_metrics
    metrics = list(dict.fromkeys(named)) if len(set(named)) >= 2 else [intent.metric, *[m for m in profile if m != intent.metric]]
    metrics = [m for m in metrics if model.has_metric(m) and group in model.metric(m).dimensions]
    filters: tuple[Filter, ...] = tuple(intent.filters)
    by_member: dict[str, dict[str, float]] = {}
    queries = []
    for metric in metrics:
        columns, rows, sql = run(Intent(metric=metric, dimensions=(group,), filters=filters, time_window=window or intent.time_window))
        queries.append(sql)
        for row in rows:
            by_member.setdefault(str(row[0]), {})[metric] = float(row[-1] or 0)
    members = sorted(m for m, v in by_member.items() if len(v) == len(metrics))
    return Table(
        columns=[group, *metrics],
        rows=[[m, *[round(by_member[m][k], 2) for k in metrics]] for m in members],
        params={"label_column": group, "target": intent.metric, "features": metrics},
        queries=queries,
    )


# ---- the tools' arguments (memtool.analysis.ml's input models; the templated scripts read the same) ----

MAX_SERIES = 12  # one question scans at most this many series for anomalies


def anomaly_params(table: Table, series_name: str) -> dict[str, Any]:
    return {
        "label_column": table.params["period_column"],
        "value_column": table.params["value_column"],
        "series_name": series_name,
        "period": 12,
    }


def forecast_params(table: Table) -> dict[str, Any]:
    groups = table.params.get("group_columns") or []
    return {
        "period_column": table.params["period_column"],
        "value_column": table.params["value_column"],
        "group_column": groups[0] if groups else None,
        "horizon": int(min(24, max(1, table.params["horizon"]))),
        "period": 12,
    }


def profile_params(kind: str, table: Table) -> dict[str, Any]:
    label, features, target = table.params["label_column"], list(table.params["features"]), table.params["target"]
    if kind == "clustering":
        return {"id_column": label, "feature_columns": features}
    if kind == "correlation":
        return {"numeric_columns": features}
    return {"target": target, "features": [f for f in features if f != target]}


SEGMENTS_PER_DIMENSION = 4  # the members that moved most in the focus month are scanned on their own


def segment_table(
    intent: Intent,
    focus_month: str,
    run: Callable[[Intent], tuple[list[str], list[list[Any]], str]],
    model: Catalog,
) -> Table | None:
    """Where an anomaly sits: for each explaining dimension, the series of the members whose focus
    month is furthest from their own median month, in one table for one segment scan.

    A spike of one product or one refund reason can hide in a noisy total; its own series shows it.
    """
    if not model.metric(intent.metric).additive or intent.time_window is None:
        return None
    dims = _drill_dimensions(model, intent)
    rows_out: list[list[Any]] = []
    queries: list[str] = []
    value_name = intent.metric
    for dim in dims:
        drill = Intent(
            metric=intent.metric, dimensions=("month", dim), filters=tuple(intent.filters), time_window=intent.time_window, unit=None
        )
        columns, rows, sql = run(drill)
        queries.append(sql)
        value_name = columns[-1]
        series: dict[str, dict[str, float]] = {}
        for row in rows:
            series.setdefault(str(row[1]), {})[_label(row[0])] = float(row[-1] or 0)
        moved = []
        for member, values in series.items():
            others = sorted(v for label, v in values.items() if label != focus_month)
            if focus_month not in values or len(others) < 6:
                continue
            moved.append((abs(values[focus_month] - others[len(others) // 2]), member))
        for _, member in sorted(moved, reverse=True)[:SEGMENTS_PER_DIMENSION]:
            rows_out.extend([dim, member, label, round(value, 2)] for label, value in sorted(series[member].items()))
    if not rows_out:
        return None
    return Table(
        columns=["dimension", "member", "month", value_name],
        rows=rows_out,
        params={
            "dimension_column": "dimension",
            "member_column": "member",
            "label_column": "month",
            "value_column": value_name,
            "focus": focus_month,
            "period": 12,
        },
        queries=queries,
    )
