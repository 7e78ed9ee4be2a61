"""Intent -> one Redshift-dialect SELECT over the warehouse schema (DuckDB runs it after sqlglot).

What the SQL always does, so every planner and every cached query agree:

- Order-line metrics read paid, non-test lines only (``paid_at IS NOT NULL AND is_test = FALSE``)
  and take their period from ``paid_at``; prescriptions take theirs from ``rx_date``.
- Refunds are summed per order line in a CTE (``refund_by_line``) and LEFT JOINed back on
  (order_id, line_id), so net revenue, refund amount and refund rate count a refund in the period
  of the line's ``paid_at`` whenever it was refunded.
- Refund reason (``fact_refund.reason``) is an attribute of the refund, not of the line, so only
  refund amount and refund rate have it, and the query takes another form (``_refund_side``):
  refunds are summed per (order_id, line_id, reason) in ``refund_by_reason`` (reason filters apply
  there, to the refunds only); the window's paid, non-test lines (``window_lines``, with every
  other dimension and filter) are joined to them for the refunds (``window_refunds``) and summed
  on their own for the gross (``window_gross``). Refund amount by reason = the refunds with that
  reason of the window's lines; refund rate by reason = those refunds / the gross revenue of *all*
  the window's lines in the same other groups (not only the refunded ones), so the reasons' rates
  add up to the refund rate. Filtered by reason without grouping by it, every group of lines is
  kept and a group with no such refund shows 0. Comparisons build the same CTEs per period
  (``current_*``, ``previous_*``).
- Time grains are ``CAST(DATE_TRUNC('<grain>', <time column>) AS DATE)`` (weeks start on Monday).
- Columns: each grouping dimension under its catalog name (``month``, ``channel``; values are the
  warehouse's own, Chinese, values), then the metric. Money is rounded to 2 decimals; ratios to 4.
  The unit is part of the metric's column name when it is not 元: ``net_revenue_10k_yuan`` is
  /10000 (万元), ``net_revenue_fen`` is ×100 and rounded to whole 分.
- A comparison returns one row per group (one row without groups) with four measure columns:
  ``<m>`` (current window), ``<m>_previous`` (comparison window), ``<m>_change`` (current −
  previous) and ``<m>_change_rate`` ((current − previous) / previous, a ratio, NULL when previous
  is 0). With a time grain the previous window's buckets are shifted forward by the comparison
  offset, so each month sits next to the same month last year (yoy) or the month before (mom).
  Groups only present in the previous window are not listed (the current window leads).
- Order: a top-N or ranking orders by the (current) metric; otherwise time grains ascending, or
  the metric descending for categorical groups; dimension values break ties. ``LIMIT`` only for
  top-N.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from types import MappingProxyType
from typing import Literal

from memtool.semantic.catalog import Catalog, DimensionSpec, MetricSpec, load_catalog
from memtool.semantic.intent import Filter, Intent, TimeWindow
from memtool.semantic.time_expressions import window_offset

# Aggregate expressions over the fact alias; ``rf`` is the refund-by-line CTE.
_ORDER_LINE_MEASURES = {
    "gross_revenue": "SUM(ol.gross_amount)",
    "net_revenue": "SUM(ol.gross_amount - ol.discount_amount) - SUM(COALESCE(rf.refund_amount, 0))",
    "refund_amount": "SUM(COALESCE(rf.refund_amount, 0))",
    "refund_rate": (
        "CAST(SUM(COALESCE(rf.refund_amount, 0)) AS DOUBLE PRECISION) / NULLIF(CAST(SUM(ol.gross_amount) AS DOUBLE PRECISION), 0)"
    ),
    "units": "SUM(ol.qty)",
    "order_count": "COUNT(DISTINCT ol.order_id)",
    "avg_order_value": "CAST(SUM(ol.gross_amount) AS DOUBLE PRECISION) / NULLIF(COUNT(DISTINCT ol.order_id), 0)",
}
_PRESCRIPTION_MEASURES = {"rx_volume": "SUM(fp.qty)"}
_NEEDS_REFUNDS = {"net_revenue", "refund_amount", "refund_rate"}
_REFUND_TABLE = "fact_refund"  # dimensions on this table describe the refund, not the order line
_REFUND_SIDE_METRICS = {"refund_amount", "refund_rate"}
_DIM_ALIASES = {"dim_region": "dr", "dim_channel": "dc", "dim_product": "dp"}
_UNIT_SUFFIX = {"元": "", "万元": "_10k_yuan", "分": "_fen"}

REFUND_BY_LINE_CTE = (
    "refund_by_line AS (\n"
    "  SELECT order_id, line_id, SUM(refund_amount) AS refund_amount\n"
    "  FROM fact_refund\n"
    "  GROUP BY order_id, line_id\n"
    ")"
)


@dataclass(frozen=True)
class CompileOptions:
    """What verified lessons from diagnosis change in the SQL an intent compiles to.

    The defaults are the catalog's definitions; every other value was verified by running it
    (memtool.diagnosis) before it is ever applied to a question.
    """

    time_columns: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # metric -> time column
    include_test_lines: bool = False  # order-line metrics keep is_test lines
    include_unpaid_lines: bool = False  # order-line metrics keep lines without paid_at
    window_end_inclusive: bool = False  # the window's last day counts (end + 1 day, exclusive)
    window_start_exclusive: bool = False  # the window's first day does not count
    dimension_join: Literal["inner", "left"] = "inner"  # how dimension tables join the fact table
    refunds_by_refund_date: frozenset[str] = frozenset()  # metrics whose refunds count in the period of refunded_at

    def with_time_column(self, metric: str, column: str) -> CompileOptions:
        return replace(self, time_columns=MappingProxyType({**self.time_columns, metric: column}))

    @property
    def is_default(self) -> bool:
        return self == CompileOptions()


DEFAULT_OPTIONS = CompileOptions()


class CompileError(ValueError):
    """The intent names something the catalog cannot express (a planner bug, not a user error)."""


@dataclass(frozen=True)
class _PeriodSource:
    """One period's rows before presentation: its own CTEs, the grouping columns and the raw measure."""

    ctes: list[str]
    select_dims: list[str]  # "<expression> AS <dimension name>", in the intent's order
    measure: str  # the unrounded measure expression
    body: str  # FROM ... [WHERE ...] [GROUP BY ...]


@dataclass(frozen=True)
class CompiledQuery:
    sql: str  # Redshift dialect
    columns: tuple[str, ...]  # the result's column names, in order
    value_column: str  # the (current) metric column
    unit: str | None  # money unit of the metric columns ("元", "万元", "分"); None for counts and ratios
    shape: str  # "single" | "grouped" | "comparison"


class IntentCompiler:
    def __init__(self, catalog: Catalog | None = None, options: CompileOptions = DEFAULT_OPTIONS) -> None:
        self.catalog = catalog or load_catalog()
        self.options = options

    def with_options(self, options: CompileOptions) -> IntentCompiler:
        return self if options == self.options else IntentCompiler(self.catalog, options)

    def time_column(self, metric: MetricSpec) -> str:
        return self.options.time_columns.get(metric.name, metric.time_column)

    def refunds_by_refund_date_expressible(self, intent: Intent) -> bool:
        """Whether the intent's refunds can be counted by refund date: a metric with refunds over one
        window, without time grains, comparisons or refund attributes (a refund's month is not its line's)."""
        if intent.metric not in _NEEDS_REFUNDS or intent.time_window is None or intent.comparison is not None:
            return False
        grains = any(self.catalog.has_dimension(d) and self.catalog.dimension(d).kind == "time" for d in intent.dimensions)
        return not grains and not self._refund_side(intent)

    def _refunds_by_refund_date(self, metric: MetricSpec) -> bool:
        return metric.name in self.options.refunds_by_refund_date and metric.name in _NEEDS_REFUNDS

    def fact_table(self, metric: str) -> str:
        """The warehouse table a metric is measured on."""
        return self._fact(self.catalog.metric(metric))[0]

    def compile(self, intent: Intent) -> CompiledQuery:
        if not self.catalog.has_metric(intent.metric):
            raise CompileError(f"unknown metric {intent.metric!r}")
        metric = self.catalog.metric(intent.metric)
        dims = [self._dimension(name, metric) for name in intent.dimensions]
        for f in intent.filters:
            spec = self._dimension(f.dimension, metric)
            if spec.kind != "attribute":
                raise CompileError(f"cannot filter on the time grain {f.dimension!r}")
        if self._refund_side(intent) and (metric.name not in _REFUND_SIDE_METRICS or metric.source != "order_line"):
            raise CompileError(f"no SQL for metric {metric.name} by a refund attribute")
        unit = (intent.unit or "元") if metric.kind == "money" else None
        value_column = metric.name + (_UNIT_SUFFIX[unit] if unit else "")
        dim_columns = [d.name for d in dims]
        if self._refunds_by_refund_date(metric) and not self.refunds_by_refund_date_expressible(intent):
            raise CompileError("refunds by refund date: only for one window, without time grains, comparisons or refund reasons")
        if intent.comparison is None:
            sql = self._single(intent, metric, dims, unit, value_column)
            shape = "grouped" if dims else "single"
            columns = (*dim_columns, value_column)
        else:
            sql = self._comparison(intent, metric, dims, unit, value_column)
            shape = "comparison"
            columns = (*dim_columns, value_column, f"{value_column}_previous", f"{value_column}_change", f"{value_column}_change_rate")
        return CompiledQuery(sql=sql, columns=columns, value_column=value_column, unit=unit, shape=shape)

    # ---- pieces ---------------------------------------------------------------------------

    def _dimension(self, name: str, metric: MetricSpec) -> DimensionSpec:
        if not self.catalog.has_dimension(name):
            raise CompileError(f"unknown dimension {name!r}")
        if name not in metric.dimensions:
            raise CompileError(f"metric {metric.name} has no dimension {name!r}")
        return self.catalog.dimension(name)

    @staticmethod
    def _fact(metric: MetricSpec) -> tuple[str, str]:
        return ("fact_order_line", "ol") if metric.source == "order_line" else ("fact_prescription", "fp")

    def _measure(self, metric: MetricSpec) -> str:
        measures = _ORDER_LINE_MEASURES if metric.source == "order_line" else _PRESCRIPTION_MEASURES
        try:
            return measures[metric.name]
        except KeyError:
            raise CompileError(f"no SQL for metric {metric.name!r}") from None

    def _dim_expr(self, dim: DimensionSpec, metric: MetricSpec, shift: tuple[str, int] | None = None) -> str:
        _, fact = self._fact(metric)
        if dim.kind == "time":
            column = f"{fact}.{self.time_column(metric)}"
            if shift is not None:
                unit, amount = shift
                column = f"DATEADD({unit}, {amount}, {column})"
            return f"CAST(DATE_TRUNC('{dim.grain}', {column}) AS DATE)"
        assert dim.table is not None
        return f"{_DIM_ALIASES[dim.table]}.{dim.column}"

    def _from_where(
        self,
        intent: Intent,
        metric: MetricSpec,
        dims: list[DimensionSpec],
        window: TimeWindow | None,
        *,
        filters: tuple[Filter, ...] | None = None,
        join_refunds: bool = True,
    ) -> str:
        table, fact = self._fact(metric)
        filters = intent.filters if filters is None else filters
        lines = [f"FROM {table} AS {fact}"]
        if join_refunds and metric.name in _NEEDS_REFUNDS:
            lines.append("LEFT JOIN refund_by_line AS rf ON rf.order_id = ol.order_id AND rf.line_id = ol.line_id")
        tables: dict[str, str] = {}
        for spec in [*dims, *(self.catalog.dimension(f.dimension) for f in filters)]:
            if spec.kind == "attribute" and spec.table and spec.table not in tables:
                assert spec.join_key is not None
                tables[spec.table] = spec.join_key
        join = "LEFT JOIN" if self.options.dimension_join == "left" else "JOIN"
        for dim_table, key in tables.items():
            alias = _DIM_ALIASES[dim_table]
            lines.append(f"{join} {dim_table} AS {alias} ON {alias}.{key} = {fact}.{key}")
        conditions: list[str] = []
        if metric.source == "order_line":
            if not self.options.include_test_lines:
                conditions.append("ol.is_test = FALSE")
            if not self.options.include_unpaid_lines:
                conditions.append("ol.paid_at IS NOT NULL")
        if window is not None:
            in_window = self._in_window(metric, window)
            if join_refunds and self._refunds_by_refund_date(metric):
                # the window's lines, and the lines refunded in the window whenever they were paid
                conditions.append(f"({in_window} OR rf.order_id IS NOT NULL)")
            else:
                conditions.append(in_window)
        conditions += [self._filter_sql(f) for f in filters]
        if conditions:
            lines.append("WHERE " + "\n  AND ".join(conditions))
        return "\n".join(lines)

    def _in_window(self, metric: MetricSpec, window: TimeWindow) -> str:
        _, fact = self._fact(metric)
        column = f"{fact}.{self.time_column(metric)}"
        start = window.start + timedelta(days=1) if self.options.window_start_exclusive else window.start
        end = window.end + timedelta(days=1) if self.options.window_end_inclusive else window.end
        return f"{column} >= CAST('{start.isoformat()}' AS DATE) AND {column} < CAST('{end.isoformat()}' AS DATE)"

    def _filter_sql(self, f: Filter) -> str:
        spec = self.catalog.dimension(f.dimension)
        assert spec.table is not None
        column = f"{_DIM_ALIASES[spec.table]}.{spec.column}"
        values = ", ".join(_literal(v) for v in f.values)
        return f"{column} {'NOT IN' if f.op == 'not_in' else 'IN'} ({values})"

    @staticmethod
    def _present(expression: str, metric: MetricSpec, unit: str | None) -> str:
        """The measure in its display unit, rounded: money 2 decimals (分 whole), ratios 4."""
        if metric.kind == "ratio":
            return f"ROUND({expression}, 4)"
        if metric.kind != "money":
            return expression
        if unit == "万元":
            return f"ROUND(({expression}) / 10000.0, 2)"
        if unit == "分":
            return f"ROUND(({expression}) * 100, 0)"
        return f"ROUND({expression}, 2)"

    def _order_by(self, intent: Intent, dims: list[DimensionSpec], value_column: str) -> str:
        dim_refs = [d.name for d in dims]
        time_refs = [d.name for d in dims if d.kind == "time"]
        other_refs = [d.name for d in dims if d.kind != "time"]
        if intent.order is not None or intent.limit is not None:
            direction = "ASC" if intent.order == "asc" else "DESC"
            keys = [f"{value_column} {direction}", *time_refs, *other_refs]
        elif time_refs:
            keys = [*time_refs, *other_refs]
        elif dim_refs:
            keys = [f"{value_column} DESC", *dim_refs]
        else:
            return ""
        sql = "ORDER BY " + ", ".join(keys)
        if intent.limit is not None:
            sql += f"\nLIMIT {int(intent.limit)}"
        return sql

    def _with(self, intent: Intent, metric: MetricSpec, extra: list[str] | None = None) -> str:
        if self._refund_side(intent):
            ctes = [self._refund_by_reason_cte(intent)]
        elif self._refunds_by_refund_date(metric) and intent.time_window is not None:
            window = intent.time_window
            ctes = [
                "refund_by_line AS (\n"
                "  SELECT order_id, line_id, SUM(refund_amount) AS refund_amount\n"
                "  FROM fact_refund\n"
                f"  WHERE refunded_at >= CAST('{window.start.isoformat()}' AS DATE)"
                f" AND refunded_at < CAST('{window.end.isoformat()}' AS DATE)\n"
                "  GROUP BY order_id, line_id\n"
                ")"
            ]
        else:
            ctes = [REFUND_BY_LINE_CTE] if metric.name in _NEEDS_REFUNDS else []
        ctes += extra or []
        return ("WITH " + ",\n".join(ctes) + "\n") if ctes else ""

    def _single(self, intent: Intent, metric: MetricSpec, dims: list[DimensionSpec], unit: str | None, value_column: str) -> str:
        source = self._source("window", intent, metric, dims, intent.time_window, None)
        select = [*source.select_dims, f"{self._present(source.measure, metric, unit)} AS {value_column}"]
        parts = [self._with(intent, metric, source.ctes) + "SELECT " + ",\n  ".join(select), source.body]
        order = self._order_by(intent, dims, value_column)
        if order:
            parts.append(order)
        return "\n".join(parts)

    def _source(
        self,
        prefix: str,
        intent: Intent,
        metric: MetricSpec,
        dims: list[DimensionSpec],
        window: TimeWindow | None,
        shift: tuple[str, int] | None,
    ) -> _PeriodSource:
        """The rows of one window: straight from the fact table, or through the refund CTEs."""
        if self._refund_side(intent):
            return self._refund_side_source(prefix, intent, metric, dims, window, shift)
        exprs = [self._dim_expr(d, metric, shift if d.kind == "time" else None) for d in dims]
        body = self._from_where(intent, metric, dims, window)
        if dims:
            body += "\nGROUP BY " + ", ".join(exprs)
        measure = self._measure(metric)
        if window is not None and self._refunds_by_refund_date(metric):
            # Lines refunded in the window but paid outside it bring their refunds, not their sales.
            in_window = self._in_window(metric, window)
            measure = measure.replace("ol.gross_amount", f"CASE WHEN {in_window} THEN ol.gross_amount ELSE 0 END").replace(
                "ol.discount_amount", f"CASE WHEN {in_window} THEN ol.discount_amount ELSE 0 END"
            )
        return _PeriodSource([], [f"{e} AS {d.name}" for e, d in zip(exprs, dims, strict=True)], measure, body)

    # ---- refund attributes (refund reason) ---------------------------------------------------

    def _on_refund(self, name: str) -> bool:
        return self.catalog.has_dimension(name) and self.catalog.dimension(name).table == _REFUND_TABLE

    def _refund_side(self, intent: Intent) -> bool:
        return any(self._on_refund(n) for n in (*intent.dimensions, *(f.dimension for f in intent.filters)))

    def _refund_by_reason_cte(self, intent: Intent) -> str:
        """Refunds per order line and refund attribute, the refund-attribute filters applied."""
        grouped = [self.catalog.dimension(n) for n in intent.dimensions if self._on_refund(n)]
        keys = ["order_id", "line_id", *(str(d.column) for d in grouped)]
        select = ["order_id", "line_id", *(f"{d.column} AS {d.name}" for d in grouped), "SUM(refund_amount) AS refunded"]
        lines = [f"  SELECT {', '.join(select)}", f"  FROM {_REFUND_TABLE}"]
        conditions = []
        for f in intent.filters:
            if self._on_refund(f.dimension):
                values = ", ".join(_literal(v) for v in f.values)
                conditions.append(f"{self.catalog.dimension(f.dimension).column} {'NOT IN' if f.op == 'not_in' else 'IN'} ({values})")
        if conditions:
            lines.append("  WHERE " + "\n    AND ".join(conditions))
        lines.append(f"  GROUP BY {', '.join(keys)}")
        return "refund_by_reason AS (\n" + "\n".join(lines) + "\n)"

    def _refund_side_source(
        self,
        prefix: str,
        intent: Intent,
        metric: MetricSpec,
        dims: list[DimensionSpec],
        window: TimeWindow | None,
        shift: tuple[str, int] | None,
    ) -> _PeriodSource:
        """Refund amount or rate grouped or filtered by a refund attribute (see the module docstring)."""
        line_dims = [d for d in dims if not self._on_refund(d.name)]
        refund_dims = [d for d in dims if self._on_refund(d.name)]
        line_filters = tuple(f for f in intent.filters if not self._on_refund(f.dimension))
        lines_name, refunds_name, gross_name = f"{prefix}_lines", f"{prefix}_refunds", f"{prefix}_gross"

        line_select = [f"{self._dim_expr(d, metric, shift if d.kind == 'time' else None)} AS {d.name}" for d in line_dims]
        line_select += ["ol.order_id", "ol.line_id", "ol.gross_amount"]
        lines_body = "SELECT " + ", ".join(line_select) + "\n" + self._from_where(
            intent, metric, line_dims, window, filters=line_filters, join_refunds=False
        )
        line_keys = [f"l.{d.name}" for d in line_dims]
        refund_keys = [*line_keys, *(f"rr.{d.name}" for d in refund_dims)]
        refunds_body = (
            "SELECT " + ", ".join([*(f"{k} AS {k.split('.')[1]}" for k in refund_keys), "SUM(rr.refunded) AS refunded"])
            + f"\nFROM {lines_name} AS l"
            + "\nJOIN refund_by_reason AS rr ON rr.order_id = l.order_id AND rr.line_id = l.line_id"
            + (f"\nGROUP BY {', '.join(refund_keys)}" if refund_keys else "")
        )
        gross_body = (
            "SELECT " + ", ".join([*(f"{k} AS {k.split('.')[1]}" for k in line_keys), "SUM(l.gross_amount) AS gross"])
            + f"\nFROM {lines_name} AS l"
            + (f"\nGROUP BY {', '.join(line_keys)}" if line_keys else "")
        )
        ctes = [_cte(lines_name, lines_body), _cte(refunds_name, refunds_body)]
        needs_gross = metric.name == "refund_rate" or not refund_dims
        if needs_gross:
            ctes.append(_cte(gross_name, gross_body))

        def on(left: str, right: str) -> str:
            return " AND ".join(f"{left}.{d.name} = {right}.{d.name}" for d in line_dims)

        if refund_dims:  # one row per group that had refunds with that attribute
            body = f"FROM {refunds_name} AS r"
            if needs_gross:
                body += f"\nJOIN {gross_name} AS g ON {on('g', 'r')}" if line_dims else f"\nCROSS JOIN {gross_name} AS g"
            select_dims = [f"r.{d.name} AS {d.name}" for d in dims]
            refunded = "r.refunded"
        else:  # filtered only: every group of lines, 0 where no refund matched the filter
            body = f"FROM {gross_name} AS g"
            body += f"\nLEFT JOIN {refunds_name} AS r ON {on('r', 'g')}" if line_dims else f"\nCROSS JOIN {refunds_name} AS r"
            select_dims = [f"g.{d.name} AS {d.name}" for d in dims]
            refunded = "COALESCE(r.refunded, 0)"
        if metric.name == "refund_rate":
            measure = f"CAST({refunded} AS DOUBLE PRECISION) / NULLIF(CAST(g.gross AS DOUBLE PRECISION), 0)"
        else:
            measure = refunded
        return _PeriodSource(ctes, select_dims, measure, body)

    def _period_cte(
        self,
        name: str,
        intent: Intent,
        metric: MetricSpec,
        dims: list[DimensionSpec],
        window: TimeWindow | None,
        shift: tuple[str, int] | None,
    ) -> list[str]:
        """The period's own CTEs, then ``name`` with its grouping columns and ``metric_value``."""
        source = self._source(name.removesuffix("_period"), intent, metric, dims, window, shift)
        body = "SELECT " + ", ".join([*source.select_dims, f"{source.measure} AS metric_value"]) + "\n" + source.body
        return [*source.ctes, _cte(name, body)]

    def _comparison(self, intent: Intent, metric: MetricSpec, dims: list[DimensionSpec], unit: str | None, value_column: str) -> str:
        assert intent.comparison is not None
        current, previous = intent.time_window, intent.comparison.window
        shift: tuple[str, int] | None = None
        if current is not None:
            shift = window_offset(current, previous)
        ctes = [
            *self._period_cte("current_period", intent, metric, dims, current, None),
            *self._period_cte("previous_period", intent, metric, dims, previous, shift),
        ]
        change_rate = "ROUND(CAST(c.metric_value - p.metric_value AS DOUBLE PRECISION) / NULLIF(p.metric_value, 0), 4)"
        select = [f"c.{d.name} AS {d.name}" for d in dims]
        select += [
            f"{self._present('c.metric_value', metric, unit)} AS {value_column}",
            f"{self._present('p.metric_value', metric, unit)} AS {value_column}_previous",
            f"{self._present('c.metric_value - p.metric_value', metric, unit)} AS {value_column}_change",
            f"{change_rate} AS {value_column}_change_rate",
        ]
        if dims:
            on = " AND ".join(f"p.{d.name} = c.{d.name}" for d in dims)
            source = f"FROM current_period AS c\nLEFT JOIN previous_period AS p ON {on}"
        else:
            source = "FROM current_period AS c\nCROSS JOIN previous_period AS p"
        parts = [self._with(intent, metric, ctes) + "SELECT " + ",\n  ".join(select), source]
        order = self._order_by(intent, dims, value_column)
        if order:
            parts.append(order)
        return "\n".join(parts)


def compile_intent(intent: Intent, catalog: Catalog | None = None, options: CompileOptions = DEFAULT_OPTIONS) -> CompiledQuery:
    return IntentCompiler(catalog, options).compile(intent)


def _cte(name: str, body: str) -> str:
    indented = "\n".join("  " + line for line in body.splitlines())
    return f"{name} AS (\n{indented}\n)"


def _literal(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"
