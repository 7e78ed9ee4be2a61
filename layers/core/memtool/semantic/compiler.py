"""Intent -> one Redshift-dialect SELECT over the warehouse schema (DuckDB runs it after sqlglot).

What the SQL always does, so every planner and every cached query agree:

- Order-line metrics read paid, non-test lines only (``paid_at IS NOT NULL AND is_test = FALSE``)
  and take their period from ``paid_at``; prescriptions take theirs from ``rx_date``.
- Refunds are summed per order line in a CTE (``refund_by_line``) and LEFT JOINed back on
  (order_id, line_id), so net revenue, refund amount and refund rate count a refund in the period
  of the line's ``paid_at`` whenever it was refunded.
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

from dataclasses import dataclass

from memtool.semantic.catalog import Catalog, DimensionSpec, MetricSpec, load_catalog
from memtool.semantic.intent import Filter, Intent, TimeWindow
from memtool.semantic.time_expressions import window_offset

# Aggregate expressions over the fact alias; ``rf`` is the refund-by-line CTE.
_ORDER_LINE_MEASURES = {
    "gross_revenue": "SUM(ol.gross_amount)",
    "net_revenue": "SUM(ol.gross_amount - ol.discount_amount) - SUM(COALESCE(rf.refund_amount, 0))",
    "refund_amount": "SUM(COALESCE(rf.refund_amount, 0))",
    "refund_rate": "CAST(SUM(COALESCE(rf.refund_amount, 0)) AS DOUBLE PRECISION) / NULLIF(CAST(SUM(ol.gross_amount) AS DOUBLE PRECISION), 0)",
    "units": "SUM(ol.qty)",
    "order_count": "COUNT(DISTINCT ol.order_id)",
    "avg_order_value": "CAST(SUM(ol.gross_amount) AS DOUBLE PRECISION) / NULLIF(COUNT(DISTINCT ol.order_id), 0)",
}
_PRESCRIPTION_MEASURES = {"rx_volume": "SUM(fp.qty)"}
_NEEDS_REFUNDS = {"net_revenue", "refund_amount", "refund_rate"}
_DIM_ALIASES = {"dim_region": "dr", "dim_channel": "dc", "dim_product": "dp"}
_UNIT_SUFFIX = {"元": "", "万元": "_10k_yuan", "分": "_fen"}

REFUND_BY_LINE_CTE = (
    "refund_by_line AS (\n"
    "  SELECT order_id, line_id, SUM(refund_amount) AS refund_amount\n"
    "  FROM fact_refund\n"
    "  GROUP BY order_id, line_id\n"
    ")"
)


class CompileError(ValueError):
    """The intent names something the catalog cannot express (a planner bug, not a user error)."""


@dataclass(frozen=True)
class CompiledQuery:
    sql: str  # Redshift dialect
    columns: tuple[str, ...]  # the result's column names, in order
    value_column: str  # the (current) metric column
    unit: str | None  # money unit of the metric columns ("元", "万元", "分"); None for counts and ratios
    shape: str  # "single" | "grouped" | "comparison"


class IntentCompiler:
    def __init__(self, catalog: Catalog | None = None) -> None:
        self.catalog = catalog or load_catalog()

    def compile(self, intent: Intent) -> CompiledQuery:
        if not self.catalog.has_metric(intent.metric):
            raise CompileError(f"unknown metric {intent.metric!r}")
        metric = self.catalog.metric(intent.metric)
        dims = [self._dimension(name, metric) for name in intent.dimensions]
        for f in intent.filters:
            spec = self._dimension(f.dimension, metric)
            if spec.kind != "attribute":
                raise CompileError(f"cannot filter on the time grain {f.dimension!r}")
        unit = (intent.unit or "元") if metric.kind == "money" else None
        value_column = metric.name + (_UNIT_SUFFIX[unit] if unit else "")
        dim_columns = [d.name for d in dims]
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
            column = f"{fact}.{metric.time_column}"
            if shift is not None:
                unit, amount = shift
                column = f"DATEADD({unit}, {amount}, {column})"
            return f"CAST(DATE_TRUNC('{dim.grain}', {column}) AS DATE)"
        assert dim.table is not None
        return f"{_DIM_ALIASES[dim.table]}.{dim.column}"

    def _from_where(self, intent: Intent, metric: MetricSpec, dims: list[DimensionSpec], window: TimeWindow | None) -> str:
        table, fact = self._fact(metric)
        lines = [f"FROM {table} AS {fact}"]
        if metric.name in _NEEDS_REFUNDS:
            lines.append("LEFT JOIN refund_by_line AS rf ON rf.order_id = ol.order_id AND rf.line_id = ol.line_id")
        tables: dict[str, str] = {}
        for spec in [*dims, *(self.catalog.dimension(f.dimension) for f in intent.filters)]:
            if spec.kind == "attribute" and spec.table and spec.table not in tables:
                assert spec.join_key is not None
                tables[spec.table] = spec.join_key
        for dim_table, key in tables.items():
            alias = _DIM_ALIASES[dim_table]
            lines.append(f"JOIN {dim_table} AS {alias} ON {alias}.{key} = {fact}.{key}")
        conditions: list[str] = []
        if metric.source == "order_line":
            conditions += ["ol.is_test = FALSE", "ol.paid_at IS NOT NULL"]
        if window is not None:
            column = f"{fact}.{metric.time_column}"
            conditions += [f"{column} >= CAST('{window.start.isoformat()}' AS DATE)", f"{column} < CAST('{window.end.isoformat()}' AS DATE)"]
        conditions += [self._filter_sql(f) for f in intent.filters]
        if conditions:
            lines.append("WHERE " + "\n  AND ".join(conditions))
        return "\n".join(lines)

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

    def _with(self, metric: MetricSpec, extra: list[str] | None = None) -> str:
        ctes = [REFUND_BY_LINE_CTE] if metric.name in _NEEDS_REFUNDS else []
        ctes += extra or []
        return ("WITH " + ",\n".join(ctes) + "\n") if ctes else ""

    def _single(self, intent: Intent, metric: MetricSpec, dims: list[DimensionSpec], unit: str | None, value_column: str) -> str:
        select = [f"{self._dim_expr(d, metric)} AS {d.name}" for d in dims]
        select.append(f"{self._present(self._measure(metric), metric, unit)} AS {value_column}")
        parts = [self._with(metric) + "SELECT " + ",\n  ".join(select), self._from_where(intent, metric, dims, intent.time_window)]
        if dims:
            parts.append("GROUP BY " + ", ".join(self._dim_expr(d, metric) for d in dims))
        order = self._order_by(intent, dims, value_column)
        if order:
            parts.append(order)
        return "\n".join(parts)

    def _period_cte(
        self,
        name: str,
        intent: Intent,
        metric: MetricSpec,
        dims: list[DimensionSpec],
        window: TimeWindow | None,
        shift: tuple[str, int] | None,
    ) -> str:
        select = [f"{self._dim_expr(d, metric, shift if d.kind == 'time' else None)} AS {d.name}" for d in dims]
        select.append(f"{self._measure(metric)} AS metric_value")
        body = "SELECT " + ", ".join(select) + "\n" + self._from_where(intent, metric, dims, window)
        if dims:
            body += "\nGROUP BY " + ", ".join(self._dim_expr(d, metric, shift if d.kind == "time" else None) for d in dims)
        indented = "\n".join("  " + line for line in body.splitlines())
        return f"{name} AS (\n{indented}\n)"

    def _comparison(self, intent: Intent, metric: MetricSpec, dims: list[DimensionSpec], unit: str | None, value_column: str) -> str:
        assert intent.comparison is not None
        current, previous = intent.time_window, intent.comparison.window
        shift: tuple[str, int] | None = None
        if current is not None:
            shift = window_offset(current, previous)
        ctes = [
            self._period_cte("current_period", intent, metric, dims, current, None),
            self._period_cte("previous_period", intent, metric, dims, previous, shift),
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
        parts = [self._with(metric, ctes) + "SELECT " + ",\n  ".join(select), source]
        order = self._order_by(intent, dims, value_column)
        if order:
            parts.append(order)
        return "\n".join(parts)


def compile_intent(intent: Intent, catalog: Catalog | None = None) -> CompiledQuery:
    return IntentCompiler(catalog).compile(intent)


def _literal(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"
