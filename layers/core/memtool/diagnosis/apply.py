"""Applying repairs to what an episode ran: its intent (recompiled) and its SQL (rewritten).

A ``Subject`` is the query as the episode had it: the question, the resolved intent (None for SQL
a model wrote), the SQL that ran, and the lessons already in force (compile options and SQL-level
repairs). Applying a hypothesis starts from there, so a repair is tested on top of what the
episode really did, never on a bare recompile.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from memtool.diagnosis.model import Repair
from memtool.diagnosis.sql_rewrite import rename_column, rename_table
from memtool.semantic.compiler import DEFAULT_OPTIONS, CompiledQuery, CompileError, CompileOptions, IntentCompiler
from memtool.semantic.intent import Filter, Intent


class NotApplicable(ValueError):
    """The repair needs something the episode does not have (an intent, this metric, this filter)."""


@dataclass(frozen=True)
class Subject:
    question: str
    intent: Intent | None
    sql: str
    options: CompileOptions = DEFAULT_OPTIONS
    sql_repairs: tuple[Repair, ...] = ()  # SQL-level lessons already applied to ``sql``


@dataclass(frozen=True)
class Applied:
    sql: str
    intent: Intent | None
    options: CompileOptions
    value_column: str | None = None  # the metric column, when the SQL came from an intent
    unit: str | None = None  # its money unit
    sql_repairs: tuple[Repair, ...] = field(default_factory=tuple)


def apply_repairs(subject: Subject, repairs: Sequence[Repair], compiler: IntentCompiler) -> Applied:
    """The subject's query with ``repairs`` applied on top of what it already had."""
    intent, options = subject.intent, subject.options
    intent_level = [r for r in repairs if not r.sql_level]
    for repair in intent_level:
        if intent is None:
            raise NotApplicable("the episode has no intent to change (its SQL was written by a model)")
        intent, options = change_intent(repair, intent, options)
    compiled: CompiledQuery | None = None
    if intent is not None and (intent_level or subject.intent is not None):
        try:
            compiled = compiler.with_options(options).compile(intent)
        except CompileError as exc:
            raise NotApplicable(f"the repaired intent does not compile: {exc}") from exc
    if intent_level and compiled is not None:
        sql = rewrite(compiled.sql, subject.sql_repairs)  # recompiled: the lessons in force again
    else:
        sql = subject.sql
    sql_repairs = [r for r in repairs if r.sql_level]
    sql = rewrite(sql, sql_repairs)
    return Applied(
        sql=sql,
        intent=intent,
        options=options,
        value_column=compiled.value_column if compiled is not None else None,
        unit=compiled.unit if compiled is not None else None,
        sql_repairs=(*subject.sql_repairs, *sql_repairs),
    )


def rewrite(sql: str, repairs: Iterable[Repair]) -> str:
    """SQL-level repairs on parsed SQL: columns first (they resolve through the old table names)."""
    ordered = sorted(repairs, key=lambda r: {"rename_column": 0, "rename_table": 1, "replace_sql": 2}.get(r.kind, 3))
    for repair in ordered:
        if repair.kind == "rename_column":
            assert repair.table and repair.column and repair.to
            sql = rename_column(sql, repair.table, repair.column, repair.to)
        elif repair.kind == "rename_table":
            assert repair.table and repair.to
            sql = rename_table(sql, repair.table, repair.to)
        elif repair.kind == "replace_sql":
            assert repair.sql
            sql = repair.sql
    return sql


def options_from(repairs: Iterable[Repair], base: CompileOptions = DEFAULT_OPTIONS) -> CompileOptions:
    """The compile options a set of intent-level lessons amounts to (metric swaps and filter
    values change the intent, not the options, and are left out here)."""
    options = base
    for repair in repairs:
        if repair.kind in ("time_column", "include_rows", "window_edges", "join_type", "refund_period"):
            options = _option(repair, options)
    return options


def change_intent(repair: Repair, intent: Intent, options: CompileOptions) -> tuple[Intent, CompileOptions]:
    if repair.kind == "time_column":
        if repair.metric != intent.metric:
            raise NotApplicable(f"the episode asked for {intent.metric}, not {repair.metric}")
        return intent, _option(repair, options)
    if repair.kind in ("include_rows", "window_edges", "join_type"):
        return intent, _option(repair, options)
    if repair.kind == "refund_period":
        if repair.metric != intent.metric:
            raise NotApplicable(f"the episode asked for {intent.metric}, not {repair.metric}")
        return intent, _option(repair, options)
    if repair.kind == "metric_definition":
        if repair.metric != intent.metric or not repair.to:
            raise NotApplicable(f"the episode asked for {intent.metric}, not {repair.metric}")
        return intent.model_copy(update={"metric": repair.to}), options
    if repair.kind == "filter_value":
        filters, changed = [], False
        for f in intent.filters:
            if f.dimension == repair.dimension and repair.value in f.values and repair.to:
                values = tuple(dict.fromkeys(repair.to if v == repair.value else v for v in f.values))
                filters.append(Filter(dimension=f.dimension, op=f.op, values=values))
                changed = True
            else:
                filters.append(f)
        if not changed:
            raise NotApplicable(f"the episode has no filter {repair.dimension} = {repair.value!r}")
        return intent.model_copy(update={"filters": tuple(filters)}), options
    raise NotApplicable(f"{repair.kind} is not a change to the intent")


def _option(repair: Repair, options: CompileOptions) -> CompileOptions:
    if repair.kind == "time_column":
        assert repair.metric and repair.to
        return options.with_time_column(repair.metric, repair.to)
    if repair.kind == "include_rows":
        return replace(options, include_test_lines=True) if repair.rows == "test" else replace(options, include_unpaid_lines=True)
    if repair.kind == "window_edges":
        if repair.edge == "end_inclusive":
            return replace(options, window_end_inclusive=True)
        return replace(options, window_start_exclusive=True)
    if repair.kind == "join_type":
        return replace(options, dimension_join="left")
    if repair.kind == "refund_period" and repair.metric:
        return replace(options, refunds_by_refund_date=options.refunds_by_refund_date | {repair.metric})
    return options
