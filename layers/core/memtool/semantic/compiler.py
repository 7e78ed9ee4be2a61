"""Intent -> one Redshift-dialect SELECT, built only from the semantic model in force.

What the SQL always does, so every planner and every cached query agree:

- A metric is its ``expression`` over its source's fact table (``FROM <table> AS <alias>``), with
  the source's row exclusions (test lines, unpaid lines) and the metric's own ``filters`` in the
  WHERE clause, and its period read from its ``time_column`` (the source's by default).
- Every model table a dimension, filter, time column or the expression needs is joined along the
  model's ``joins`` (fewest hops from the fact table, many side to one side).
- A detail the metric ``uses`` (refunds of an order line) is summed per fact row in a CTE named
  after it and LEFT JOINed back on its keys, so a detail counts in the period of its fact row.
- An attribute of a detail (refund reason) is an attribute of the detail, not of the fact row, so
  only metrics with ``by_detail`` have it, and the query takes another form (``_detail_side``):
  the details are summed per (keys, attribute) in ``<detail>_by_attribute`` (attribute filters
  apply there); the window's fact rows (``<period>_lines``, with every other dimension and filter)
  are joined to them (``<period>_details``) and, for a ratio, the ``denominator`` column is summed
  over all the window's rows (``<period>_base``), so the attribute's shares add up to the whole.
  Filtered by the attribute without grouping by it, every group is kept and shows 0 when nothing
  matched. Comparisons build the same CTEs per period (``current_*``, ``previous_*``).
- Time grains are ``CAST(DATE_TRUNC('<grain>', <time column>) AS DATE)`` (weeks start on Monday).
- Columns: each grouping dimension under its model name (``month``, ``channel``; values are the
  warehouse's own), then the metric. Money is rounded to 2 decimals; ratios to 4. The unit is
  part of the metric's column name when it is not the model's currency: ``net_revenue_10k_yuan``
  is /10000 (万元), ``net_revenue_fen`` is ×100 and rounded to whole 分.
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

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from types import MappingProxyType
from typing import Literal

from memtool.semantic.catalog import Catalog, DetailSpec, DimensionSpec, JoinSpec, MetricSpec, SourceSpec, load_catalog
from memtool.semantic.intent import Filter, Intent, TimeWindow
from memtool.semantic.time_expressions import window_offset
from memtool.sql.literals import date_literal, in_list, string_literal

# Money units with a column suffix and a scale; any other unit (the model's currency) is as stored.
_UNIT_SUFFIX = {"万元": "_10k_yuan", "分": "_fen"}


@dataclass(frozen=True)
class CompileOptions:
    """What verified lessons from diagnosis change in the SQL an intent compiles to.

    The defaults are the model's definitions; every other value was verified by running it
    (memtool.diagnosis) before it is ever applied to a question.
    """

    time_columns: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # metric -> time column
    include_test_lines: bool = False  # the source's test_rows exclusions are dropped
    include_unpaid_lines: bool = False  # the source's incomplete_rows exclusions are dropped
    window_end_inclusive: bool = False  # the window's last day counts (end + 1 day, exclusive)
    window_start_exclusive: bool = False  # the window's first day does not count
    dimension_join: Literal["inner", "left"] = "inner"  # how joined tables join the fact table
    refunds_by_refund_date: frozenset[str] = frozenset()  # metrics whose details count in the period of their own date

    def with_time_column(self, metric: str, column: str) -> CompileOptions:
        return replace(self, time_columns=MappingProxyType({**self.time_columns, metric: column}))

    @property
    def is_default(self) -> bool:
        return self == CompileOptions()


DEFAULT_OPTIONS = CompileOptions()


class CompileError(ValueError):
    """The intent names something the model cannot express (a planner bug, not a user error)."""


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
    unit: str | None  # money unit of the metric columns (the currency, "万元", "分"); None for counts and ratios
    shape: str  # "single" | "grouped" | "comparison"


class IntentCompiler:
    def __init__(self, catalog: Catalog | None = None, options: CompileOptions = DEFAULT_OPTIONS) -> None:
        self.catalog = catalog or load_catalog()
        self.options = options

    def with_options(self, options: CompileOptions) -> IntentCompiler:
        return self if options == self.options else IntentCompiler(self.catalog, options)

    def time_column(self, metric: MetricSpec) -> str:
        """The metric's period column as the model names it: ``column`` of the fact or ``table.column``."""
        column = self.options.time_columns.get(metric.name) or metric.time_column or self._source(metric).time_column
        assert column is not None  # the model validator requires one
        return column

    def refunds_by_refund_date_expressible(self, intent: Intent) -> bool:
        """Whether the intent's details can be counted by their own date: a metric with a dated detail
        over one window, without time grains, comparisons or detail attributes (a detail's month is not its row's)."""
        if not self.catalog.has_metric(intent.metric):
            return False
        metric = self.catalog.metric(intent.metric)
        if self._dated_detail(metric) is None or intent.time_window is None or intent.comparison is not None:
            return False
        grains = any(self.catalog.has_dimension(d) and self.catalog.dimension(d).kind == "time" for d in intent.dimensions)
        return not grains and not self._detail_side(intent)

    def _dated_detail(self, metric: MetricSpec) -> DetailSpec | None:
        details = self._details(metric)
        return next((d for d in details if d.time_column), None)

    def _refunds_by_refund_date(self, metric: MetricSpec) -> bool:
        return metric.name in self.options.refunds_by_refund_date and self._dated_detail(metric) is not None

    def _by_date(self, metric: str, column: str) -> IntentCompiler:
        """This compiler with ``metric``'s period read from ``column``, one of the dates its model
        offers (``Catalog.time_column_choices``); any other name is refused."""
        if column not in self.catalog.time_column_choices(metric):
            raise CompileError(f"{column[:60]!r} is not a date {metric} may be read by")
        return self.with_options(self.options.with_time_column(metric, column))

    def time_range_sql(self, metric: str, time_column: str | None = None) -> str:
        """The first and last value of the metric's period column (``SELECT MIN, MAX``), to tell an
        empty answer for a period outside the data from an honest empty one."""
        if time_column is not None:
            return self._by_date(metric, time_column).time_range_sql(metric)
        spec = self.catalog.metric(metric)
        table, _, bare = self.time_column(spec).rpartition(".")
        physical = self.catalog.table(table).physical if table else self._fact(spec)[0]
        return f"SELECT MIN({bare}) AS first_day, MAX({bare}) AS last_day FROM {physical}"

    def fact_table(self, metric: str) -> str:
        """The warehouse table a metric is measured on."""
        return self._fact(self.catalog.metric(metric))[0]

    def metric_tables(self, metric: str) -> tuple[str, ...]:
        """The warehouse tables a metric's SQL may read (its fact, details and joined tables)."""
        spec = self.catalog.metric(metric)
        names = [self._source(spec).table, *(d.table for d in self._details(spec)), *spec.tables]
        return tuple(dict.fromkeys(self.catalog.table(n).physical for n in names))

    def compile(self, intent: Intent) -> CompiledQuery:
        if not self.catalog.has_metric(intent.metric):
            raise CompileError(f"unknown metric {intent.metric!r}")
        if intent.time_column is not None:
            return self._by_date(intent.metric, intent.time_column).compile(intent.model_copy(update={"time_column": None}))
        metric = self.catalog.metric(intent.metric)
        dims = [self._dimension(name, metric) for name in intent.dimensions]
        for f in intent.filters:
            spec = self._dimension(f.dimension, metric)
            if spec.kind != "attribute":
                raise CompileError(f"cannot filter on the time grain {f.dimension!r}")
        if self._detail_side(intent) and metric.by_detail is None:
            raise CompileError(f"no SQL for metric {metric.name} by an attribute of its details")
        # 万元 and 分 are scales of the yuan: a model in another currency shows its own unit, unscaled.
        yuan_scale = intent.unit if self.catalog.currency == "元" else None
        unit = (yuan_scale or self.catalog.currency) if metric.kind == "money" else None
        value_column = metric.name + (_UNIT_SUFFIX.get(unit, "") if unit else "")
        dim_columns = [d.name for d in dims]
        if self._refunds_by_refund_date(metric) and not self.refunds_by_refund_date_expressible(intent):
            raise CompileError("details by their own date: only for one window, without time grains, comparisons or detail attributes")
        if intent.share is not None:
            if intent.comparison is not None or metric.kind == "ratio" or not metric.additive or self._detail_side(intent):
                raise CompileError("a share is of an additive metric over one window, without detail attributes")
            unit, value_column = None, f"{metric.name}_share"
            sql = self._share(intent, metric, dims, value_column)
            shape = "grouped" if dims else "single"
            columns = (*dim_columns, value_column)
        elif intent.comparison is None:
            sql = self._single(intent, metric, dims, unit, value_column)
            shape = "grouped" if dims else "single"
            columns = (*dim_columns, value_column)
        else:
            sql = self._comparison(intent, metric, dims, unit, value_column)
            shape = "comparison"
            columns = (*dim_columns, value_column, f"{value_column}_previous", f"{value_column}_change", f"{value_column}_change_rate")
        return CompiledQuery(sql=sql, columns=columns, value_column=value_column, unit=unit, shape=shape)

    # ---- the model's pieces ----------------------------------------------------------------

    def _dimension(self, name: str, metric: MetricSpec) -> DimensionSpec:
        if not self.catalog.has_dimension(name):
            raise CompileError(f"unknown dimension {name!r}")
        if name not in metric.dimensions:
            raise CompileError(f"metric {metric.name} has no dimension {name!r}")
        return self.catalog.dimension(name)

    def _source(self, metric: MetricSpec) -> SourceSpec:
        try:
            return self.catalog.source(metric.source)
        except KeyError:
            raise CompileError(f"metric {metric.name} names unknown source {metric.source!r}") from None

    def _fact(self, metric: MetricSpec) -> tuple[str, str]:
        table = self.catalog.table(self._source(metric).table)
        return table.physical, table.alias

    def _details(self, metric: MetricSpec) -> list[DetailSpec]:
        source = self._source(metric)
        return [source.detail(name) for name in metric.uses]

    def _alias(self, table: str) -> str:
        return self.catalog.table(table).alias

    def _time_ref(self, metric: MetricSpec) -> tuple[str | None, str]:
        """(model table or None for the fact, qualified column) of the metric's period."""
        column = self.time_column(metric)
        table, _, bare = column.rpartition(".")
        if table:
            return table, f"{self._alias(table)}.{bare}"
        return None, f"{self._fact(metric)[1]}.{column}"

    def _measure(self, metric: MetricSpec) -> str:
        return metric.expression

    def _dim_expr(self, dim: DimensionSpec, metric: MetricSpec, shift: tuple[str, int] | None = None) -> str:
        if dim.kind == "time":
            column = self._time_ref(metric)[1]
            if shift is not None:
                unit, amount = shift
                column = f"DATEADD({unit}, {amount}, {column})"
            return f"CAST(DATE_TRUNC({string_literal(dim.grain)}, {column}) AS DATE)"
        assert dim.table is not None
        return f"{self._alias(dim.table)}.{dim.column}"

    def _joins(self, metric: MetricSpec, needed: list[str]) -> list[JoinSpec]:
        """The joins that reach every needed model table from the fact table, each once, in path order."""
        start = self._source(metric).table
        joins: list[JoinSpec] = []
        for table in needed:
            if table == start:
                continue
            try:
                path = self.catalog.join_path(start, table)
            except KeyError as exc:
                raise CompileError(str(exc.args[0])) from None
            joins.extend(j for j in path if j not in joins)
        return joins

    def _from_where(
        self,
        intent: Intent,
        metric: MetricSpec,
        dims: list[DimensionSpec],
        window: TimeWindow | None,
        *,
        filters: tuple[Filter, ...] | None = None,
        join_details: bool = True,
    ) -> str:
        table, fact = self._fact(metric)
        filters = intent.filters if filters is None else filters
        lines = [f"FROM {table} AS {fact}"]
        if join_details:
            for detail in self._details(metric):
                on = " AND ".join(f"{detail.alias}.{key} = {fact}.{key}" for key in detail.keys)
                lines.append(f"LEFT JOIN {detail.name} AS {detail.alias} ON {on}")
        lines += self._join_lines(metric, dims, window, filters)
        conditions = self._conditions(metric, window, filters, join_details=join_details)
        if conditions:
            lines.append("WHERE " + "\n  AND ".join(conditions))
        return "\n".join(lines)

    def _join_lines(
        self, metric: MetricSpec, dims: list[DimensionSpec], window: TimeWindow | None, filters: tuple[Filter, ...]
    ) -> list[str]:
        """A JOIN per model table the metric, its period, its dimensions and its filters need."""
        needed = [*metric.tables]
        time_table = self._time_ref(metric)[0]
        if time_table and (window is not None or any(d.kind == "time" for d in dims)):
            needed.append(time_table)
        for spec in [*dims, *(self.catalog.dimension(f.dimension) for f in filters)]:
            if spec.kind == "attribute" and spec.table:
                needed.append(spec.table)
        join = "LEFT JOIN" if self.options.dimension_join == "left" else "JOIN"
        lines: list[str] = []
        for edge in self._joins(metric, list(dict.fromkeys(needed))):
            left, right = self._alias(edge.left), self.catalog.table(edge.right)
            on = " AND ".join(f"{right.alias}.{r} = {left}.{col}" for col, r in edge.pairs())
            lines.append(f"{join} {right.physical} AS {right.alias} ON {on}")
        return lines

    def _conditions(self, metric: MetricSpec, window: TimeWindow | None, filters: tuple[Filter, ...], *, join_details: bool) -> list[str]:
        """The WHERE conditions: the source's exclusions (unless the options include them), the
        metric's filters, the window, and the intent's filters."""
        conditions: list[str] = []
        for exclusion in self._source(metric).exclusions:
            if exclusion.role == "test_rows" and self.options.include_test_lines:
                continue
            if exclusion.role == "incomplete_rows" and self.options.include_unpaid_lines:
                continue
            conditions.append(exclusion.condition)
        conditions += list(metric.filters)
        if window is not None:
            in_window = self._in_window(metric, window)
            dated = self._dated_detail(metric)
            if join_details and dated is not None and self._refunds_by_refund_date(metric):
                # the window's rows, and the rows whose details fall in the window whenever they were dated
                conditions.append(f"({in_window} OR {dated.alias}.{dated.keys[0]} IS NOT NULL)")
            else:
                conditions.append(in_window)
        conditions += [self._filter_sql(f) for f in filters]
        return conditions

    def _in_window(self, metric: MetricSpec, window: TimeWindow) -> str:
        column = self._time_ref(metric)[1]
        start = window.start + timedelta(days=1) if self.options.window_start_exclusive else window.start
        end = window.end + timedelta(days=1) if self.options.window_end_inclusive else window.end
        return f"{column} >= {date_literal(start)} AND {column} < {date_literal(end)}"

    def _filter_sql(self, f: Filter) -> str:
        spec = self.catalog.dimension(f.dimension)
        assert spec.table is not None
        column = f"{self._alias(spec.table)}.{spec.column}"
        values = in_list(f.values)
        return f"{column} {'NOT IN' if f.op == 'not_in' else 'IN'} ({values})"

    @staticmethod
    def _present(expression: str, metric: MetricSpec, unit: str | None) -> str:
        """The measure in its display unit, rounded: money 2 decimals (分 whole), ratios 4, decimals 2."""
        if metric.kind == "ratio":
            return f"ROUND({expression}, 4)"
        if metric.kind == "decimal":
            return f"ROUND({expression}, 2)"
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

    def _detail_cte(self, detail: DetailSpec, window: TimeWindow | None = None) -> str:
        keys = ", ".join(detail.keys)
        lines = [f"  SELECT {keys}, SUM({detail.amount}) AS {detail.amount}", f"  FROM {self.catalog.table(detail.table).physical}"]
        if window is not None and detail.time_column:
            column = detail.time_column
            lines.append(f"  WHERE {column} >= {date_literal(window.start)} AND {column} < {date_literal(window.end)}")
        lines.append(f"  GROUP BY {keys}")
        return f"{detail.name} AS (\n" + "\n".join(lines) + "\n)"

    def _with(self, intent: Intent, metric: MetricSpec, extra: list[str] | None = None) -> str:
        if self._detail_side(intent):
            ctes = [self._by_attribute_cte(intent, metric)]
        elif self._refunds_by_refund_date(metric) and intent.time_window is not None:
            ctes = [self._detail_cte(d, intent.time_window if d.time_column else None) for d in self._details(metric)]
        else:
            ctes = [self._detail_cte(d) for d in self._details(metric)]
        ctes += extra or []
        return ("WITH " + ",\n".join(ctes) + "\n") if ctes else ""

    def _single(self, intent: Intent, metric: MetricSpec, dims: list[DimensionSpec], unit: str | None, value_column: str) -> str:
        source = self._period("window", intent, metric, dims, intent.time_window, None)
        select = [*source.select_dims, f"{self._present(source.measure, metric, unit)} AS {value_column}"]
        parts = [self._with(intent, metric, source.ctes) + "SELECT " + ",\n  ".join(select), source.body]
        order = self._order_by(intent, dims, value_column)
        if order:
            parts.append(order)
        return "\n".join(parts)

    def _share(self, intent: Intent, metric: MetricSpec, dims: list[DimensionSpec], value_column: str) -> str:
        """A share of a total, as a ratio (4 decimals).

        ``share == "groups"``: each group's measure over the sum of the groups (per time bucket when
        the question has a grain). ``share == <dimension>``: the measure with every filter over the
        measure without that dimension's filter, per time bucket."""
        if intent.share == "groups":
            time_refs = [d.name for d in dims if d.kind == "time"]
            source = self._period("window", intent, metric, dims, intent.time_window, None)
            over = f"PARTITION BY {', '.join(self._dim_expr(d, metric) for d in dims if d.kind == 'time')}" if time_refs else ""
            ratio = f"CAST({source.measure} AS DOUBLE PRECISION) / NULLIF(SUM({source.measure}) OVER ({over}), 0)"
            select = [*source.select_dims, f"ROUND({ratio}, 4) AS {value_column}"]
            parts = [self._with(intent, metric, source.ctes) + "SELECT " + ",\n  ".join(select), source.body]
        else:
            if not any(f.dimension == intent.share and f.op == "in" for f in intent.filters):
                raise CompileError(f"a share of {intent.share!r} needs a filter on it")
            whole = intent.model_copy(update={"filters": tuple(f for f in intent.filters if f.dimension != intent.share)})
            ctes = [
                *self._period_cte("part_period", intent, metric, dims, intent.time_window, None),
                *self._period_cte("whole_period", whole, metric, dims, intent.time_window, None),
            ]
            select = [f"w.{d.name} AS {d.name}" for d in dims]
            ratio = "CAST(p.metric_value AS DOUBLE PRECISION) / NULLIF(CAST(w.metric_value AS DOUBLE PRECISION), 0)"
            select.append(f"ROUND(COALESCE({ratio}, 0), 4) AS {value_column}")
            if dims:
                on = " AND ".join(f"p.{d.name} = w.{d.name}" for d in dims)
                source_sql = f"FROM whole_period AS w\nLEFT JOIN part_period AS p ON {on}"
            else:
                source_sql = "FROM whole_period AS w\nCROSS JOIN part_period AS p"
            parts = [self._with(intent, metric, ctes) + "SELECT " + ",\n  ".join(select), source_sql]
        order = self._order_by(intent, dims, value_column)
        if order:
            parts.append(order)
        return "\n".join(parts)

    def _period(
        self,
        prefix: str,
        intent: Intent,
        metric: MetricSpec,
        dims: list[DimensionSpec],
        window: TimeWindow | None,
        shift: tuple[str, int] | None,
    ) -> _PeriodSource:
        """The rows of one window: straight from the fact table, or through the detail CTEs."""
        if self._detail_side(intent):
            return self._detail_side_period(prefix, intent, metric, dims, window, shift)
        exprs = [self._dim_expr(d, metric, shift if d.kind == "time" else None) for d in dims]
        body = self._from_where(intent, metric, dims, window)
        if dims:
            body += "\nGROUP BY " + ", ".join(exprs)
        measure = self._measure(metric)
        if window is not None and self._refunds_by_refund_date(metric):
            # Rows whose details fall in the window but which are dated outside it bring their details, not themselves.
            in_window = self._in_window(metric, window)
            fact = re.escape(self._fact(metric)[1])
            column = re.compile(rf"\b{fact}\.[A-Za-z_][A-Za-z0-9_]*")
            measure = column.sub(lambda m: f"CASE WHEN {in_window} THEN {m.group(0)} ELSE 0 END", measure)
        return _PeriodSource([], [f"{e} AS {d.name}" for e, d in zip(exprs, dims, strict=True)], measure, body)

    # ---- attributes of a detail (refund reason) -------------------------------------------------

    def _detail_of(self, name: str, metric: MetricSpec) -> DetailSpec | None:
        """The metric's detail whose table holds dimension ``name``, or None."""
        if not self.catalog.has_dimension(name):
            return None
        table = self.catalog.dimension(name).table
        return next((d for d in self._source(metric).details if d.table == table), None) if table else None

    def _on_detail(self, name: str, metric: MetricSpec) -> bool:
        return self._detail_of(name, metric) is not None

    def _detail_side(self, intent: Intent) -> bool:
        if not self.catalog.has_metric(intent.metric):
            return False
        metric = self.catalog.metric(intent.metric)
        return any(self._on_detail(n, metric) for n in (*intent.dimensions, *(f.dimension for f in intent.filters)))

    def _split_detail(self, metric: MetricSpec) -> DetailSpec:
        assert metric.by_detail is not None
        return self._source(metric).detail(metric.by_detail.detail)

    def _by_attribute_cte(self, intent: Intent, metric: MetricSpec) -> str:
        """The details per fact row and detail attribute, the attribute filters applied."""
        detail = self._split_detail(metric)
        grouped = [self.catalog.dimension(n) for n in intent.dimensions if self._on_detail(n, metric)]
        keys = [*detail.keys, *(str(d.column) for d in grouped)]
        select = [*detail.keys, *(f"{d.column} AS {d.name}" for d in grouped), f"SUM({detail.amount}) AS detail_amount"]
        lines = [f"  SELECT {', '.join(select)}", f"  FROM {self.catalog.table(detail.table).physical}"]
        conditions = []
        for f in intent.filters:
            if self._on_detail(f.dimension, metric):
                values = in_list(f.values)
                conditions.append(f"{self.catalog.dimension(f.dimension).column} {'NOT IN' if f.op == 'not_in' else 'IN'} ({values})")
        if conditions:
            lines.append("  WHERE " + "\n    AND ".join(conditions))
        lines.append(f"  GROUP BY {', '.join(keys)}")
        return f"{detail.name}_by_attribute AS (\n" + "\n".join(lines) + "\n)"

    def _detail_side_period(
        self,
        prefix: str,
        intent: Intent,
        metric: MetricSpec,
        dims: list[DimensionSpec],
        window: TimeWindow | None,
        shift: tuple[str, int] | None,
    ) -> _PeriodSource:
        """A metric grouped or filtered by an attribute of its details (see the module docstring)."""
        assert metric.by_detail is not None
        detail = self._split_detail(metric)
        denominator = metric.by_detail.denominator
        fact = self._fact(metric)[1]
        line_dims = [d for d in dims if not self._on_detail(d.name, metric)]
        detail_dims = [d for d in dims if self._on_detail(d.name, metric)]
        line_filters = tuple(f for f in intent.filters if not self._on_detail(f.dimension, metric))
        lines_name, details_name, base_name = f"{prefix}_lines", f"{prefix}_details", f"{prefix}_base"

        line_select = [f"{self._dim_expr(d, metric, shift if d.kind == 'time' else None)} AS {d.name}" for d in line_dims]
        line_select += [f"{fact}.{key}" for key in detail.keys]
        if denominator:
            line_select.append(f"{fact}.{denominator}")
        lines_body = "SELECT " + ", ".join(line_select) + "\n" + self._from_where(
            intent, metric, line_dims, window, filters=line_filters, join_details=False
        )
        ctes = [_cte(lines_name, lines_body), _cte(details_name, _details_body(detail, line_dims, detail_dims, lines_name))]
        needs_base = denominator is not None or not detail_dims
        if needs_base:
            ctes.append(_cte(base_name, _base_body(line_dims, lines_name, denominator)))
        body, select_dims, amount = _detail_side_rows(dims, line_dims, detail_dims, details_name, base_name, needs_base=needs_base)
        if denominator:
            measure = f"CAST({amount} AS DOUBLE PRECISION) / NULLIF(CAST(g.base AS DOUBLE PRECISION), 0)"
        else:
            measure = amount
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
        source = self._period(name.removesuffix("_period"), intent, metric, dims, window, shift)
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


def _details_body(detail: DetailSpec, line_dims: list[DimensionSpec], detail_dims: list[DimensionSpec], lines_name: str) -> str:
    """``<period>_details``: the window's fact rows joined to their details per attribute, summed
    per line grouping and detail attribute."""
    split = f"{detail.name}_by_attribute"
    line_keys = [f"l.{d.name}" for d in line_dims]
    detail_keys = [*line_keys, *(f"dd.{d.name}" for d in detail_dims)]
    on_keys = " AND ".join(f"dd.{key} = l.{key}" for key in detail.keys)
    return (
        "SELECT " + ", ".join([*(f"{k} AS {k.split('.')[1]}" for k in detail_keys), "SUM(dd.detail_amount) AS detail_amount"])
        + f"\nFROM {lines_name} AS l"
        + f"\nJOIN {split} AS dd ON {on_keys}"
        + (f"\nGROUP BY {', '.join(detail_keys)}" if detail_keys else "")
    )


def _base_body(line_dims: list[DimensionSpec], lines_name: str, denominator: str | None) -> str:
    """``<period>_base``: the ``denominator`` summed (else the rows counted) over all the window's rows."""
    line_keys = [f"l.{d.name}" for d in line_dims]
    base_measure = f"SUM(l.{denominator})" if denominator else "COUNT(*)"
    return (
        "SELECT " + ", ".join([*(f"{k} AS {k.split('.')[1]}" for k in line_keys), f"{base_measure} AS base"])
        + f"\nFROM {lines_name} AS l"
        + (f"\nGROUP BY {', '.join(line_keys)}" if line_keys else "")
    )


def _detail_side_rows(
    dims: list[DimensionSpec],
    line_dims: list[DimensionSpec],
    detail_dims: list[DimensionSpec],
    details_name: str,
    base_name: str,
    *,
    needs_base: bool,
) -> tuple[str, list[str], str]:
    """(FROM ..., the grouping columns, the amount) of a detail-side period: grouped by a detail
    attribute, one row per group that had details with it; filtered only, every group of rows,
    0 where no detail matched the filter."""

    def on(left: str, right: str) -> str:
        return " AND ".join(f"{left}.{d.name} = {right}.{d.name}" for d in line_dims)

    if detail_dims:  # one row per group that had details with that attribute
        body = f"FROM {details_name} AS r"
        if needs_base:
            body += f"\nJOIN {base_name} AS g ON {on('g', 'r')}" if line_dims else f"\nCROSS JOIN {base_name} AS g"
        return body, [f"r.{d.name} AS {d.name}" for d in dims], "r.detail_amount"
    # filtered only: every group of rows, 0 where no detail matched the filter
    body = f"FROM {base_name} AS g"
    body += f"\nLEFT JOIN {details_name} AS r ON {on('r', 'g')}" if line_dims else f"\nCROSS JOIN {details_name} AS r"
    return body, [f"g.{d.name} AS {d.name}" for d in dims], "COALESCE(r.detail_amount, 0)"


def _cte(name: str, body: str) -> str:
    indented = "\n".join("  " + line for line in body.splitlines())
    return f"{name} AS (\n{indented}\n)"
