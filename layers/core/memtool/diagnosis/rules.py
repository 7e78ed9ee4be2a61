"""Rule hypotheses: what could explain a failure, read from the live schema and the intent.

Every candidate name comes from the warehouse's information_schema as it is now (``LiveSchema``),
never from the demo's schema constants, so a renamed column is found under its new name.

- An unknown table or column: the nearest existing one by name (tokens, abbreviations, edit
  similarity) and by meaning (a table that has the columns the query reads from it; a column of
  the type family its use needs, numeric inside SUM/AVG or arithmetic).
- A value that does not match the user's: the metric's time column, test or unpaid lines, the
  metric's definition (gross vs net; refunds by refund date vs payment date), the window's edges,
  the join type.
- An empty result: a filter value spelled differently in the warehouse (case, whitespace,
  full-width characters, the other language's name).
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memtool.diagnosis.apply import Subject
from memtool.diagnosis.model import Failure, Hypothesis, Repair
from memtool.diagnosis.sql_rewrite import ColumnRef, References, references, unknown_references
from memtool.semantic.compiler import IntentCompiler
from memtool.sql.live_schema import LiveSchema

if TYPE_CHECKING:
    from memtool.semantic.catalog import Catalog, MetricSpec

# Abbreviations warehouses use for the same word.
_ABBREVIATIONS = {
    "amt": "amount",
    "qty": "quantity",
    "cnt": "count",
    "num": "number",
    "no": "number",
    "dt": "date",
    "ts": "timestamp",
    "tm": "time",
    "desc": "description",
    "cust": "customer",
    "prod": "product",
    "chan": "channel",
    "chnl": "channel",
    "rgn": "region",
    "dim": "dimension",
    "txn": "transaction",
    "pct": "percent",
}
_NUMERIC = ("INT", "DECIMAL", "NUMERIC", "DOUBLE", "FLOAT", "REAL", "BIGINT", "SMALLINT", "HUGEINT")
_TIME = ("DATE", "TIMESTAMP", "TIME")
MIN_TABLE_SCORE = 0.35
MIN_COLUMN_SCORE = 0.35
CANDIDATES_PER_NAME = 3


@dataclass(frozen=True)
class _Candidate:
    name: str
    score: float


def hypotheses_for(
    failure: Failure,
    subject: Subject,
    schema: LiveSchema,
    compiler: IntentCompiler,
    distinct_values: Callable[[str, Sequence[str]], list[tuple[Any, ...]]] | None = None,
) -> list[Hypothesis]:
    """Rule hypotheses for ``failure``, cheapest first. ``distinct_values(table, columns)`` reads a
    dimension's values (it runs on the warehouse and counts against the budget)."""
    found: list[Hypothesis] = []
    if failure.kind in ("undefined_column", "undefined_table") or (failure.origin == "guard" and subject.sql):
        found += _renames(subject.sql, schema)
    if failure.origin == "logical" and subject.intent is not None:
        if failure.kind == "empty_result" and distinct_values is not None:
            found += _filter_values(subject, compiler, distinct_values)
        if failure.kind in ("expected_value", "reported_wrong"):
            found += _value_causes(subject, schema, compiler)
    numbered = [h.model_copy(update={"id": f"h{i}"}) for i, h in enumerate(sorted(found, key=lambda h: (h.cost, -h.confidence)), start=1)]
    return numbered


# ---- names ------------------------------------------------------------------------------------


def _renames(sql: str, schema: LiveSchema) -> list[Hypothesis]:
    try:
        unknown = unknown_references(sql, schema)
        used = references(sql)
    except Exception:  # noqa: BLE001 - SQL the parser cannot read has no names to map
        return []
    if not unknown and not _columns_of_missing_tables(used.columns, unknown.tables):
        return []
    table_options: dict[str, list[_Candidate]] = {}
    for table in unknown.tables:
        wanted = used.columns_of(table)
        taken = set(used.tables)
        table_options[table] = [c for c in _nearest_tables(table, wanted, schema) if c.name not in taken]
    column_options = _column_options(sql, schema, unknown.columns, used, table_options)
    if any(not options for options in table_options.values()) or any(not o for o in column_options.values()):
        return []  # a name with no plausible replacement: no rule can repair this query
    return _drift_hypotheses(table_options, column_options)


def _column_options(
    sql: str, schema: LiveSchema, unknown_columns: Sequence[ColumnRef], used: References, table_options: dict[str, list[_Candidate]]
) -> dict[tuple[str, str], list[_Candidate]]:
    """The candidates for each column to map: those missing from existing tables, and those of a
    missing table that its best replacement does not have."""
    column_needs: list[tuple[str, str, str]] = []  # (table as the query names it, column, table it lives in now)
    for ref in unknown_columns:
        column_needs.append((ref.table, ref.column, ref.table))
    for table, options in table_options.items():
        if not options:
            continue
        now = options[0].name
        for column in used.columns_of(table):
            if not schema.has_column(now, column):
                column_needs.append((table, column, now))
    column_options: dict[tuple[str, str], list[_Candidate]] = {}
    for table, column, now in column_needs:
        uses = _uses_of(sql, table, column)
        taken = set(used.columns_of(table))
        column_options[(table, column)] = [
            c for c in _nearest_columns(column, now, schema, numeric=uses == "numeric") if c.name not in taken
        ]
    return column_options


def _drift_hypotheses(
    table_options: dict[str, list[_Candidate]], column_options: dict[tuple[str, str], list[_Candidate]]
) -> list[Hypothesis]:
    """Schema drift: every name to its best candidate first, then the runners-up, one name at a time."""
    best: dict[tuple[str, str | None], str] = {(t, None): o[0].name for t, o in table_options.items()}
    best.update({key: o[0].name for key, o in column_options.items()})
    scores = [o[0].score for o in table_options.values()] + [o[0].score for o in column_options.values()]
    hypotheses = [
        Hypothesis(
            id="",
            cause="schema_drift",
            root_cause=_drift_sentence(best),
            repairs=_drift_repairs(best),
            cost=1,
            confidence=round(min(scores), 3),
        )
    ]
    alternatives: list[tuple[tuple[str, str | None], _Candidate]] = []
    for t, options in table_options.items():
        alternatives += [((t, None), c) for c in options[1:]]
    for column_key, options in column_options.items():
        alternatives += [(column_key, c) for c in options[1:]]
    for rank, (key, candidate) in enumerate(sorted(alternatives, key=lambda a: -a[1].score)):
        choice = {**best, key: candidate.name}
        hypotheses.append(
            Hypothesis(
                id="",
                cause="schema_drift",
                root_cause=_drift_sentence(choice),
                repairs=_drift_repairs(choice),
                cost=2 + rank,
                confidence=round(candidate.score, 3),
            )
        )
    return hypotheses


def _drift_repairs(choice: dict[tuple[str, str | None], str]) -> tuple[Repair, ...]:
    out = []
    for (table, column), to in choice.items():
        if column is None:
            out.append(Repair(kind="rename_table", table=table, to=to))
        else:
            out.append(Repair(kind="rename_column", table=table, column=column, to=to))
    return tuple(out)


def _columns_of_missing_tables(columns: Sequence[ColumnRef], tables: Sequence[str]) -> bool:
    return any(c.table in tables for c in columns)


def _drift_sentence(choice: dict[tuple[str, str | None], str]) -> str:
    parts = []
    for (table, column), to in choice.items():
        if column is None:
            parts.append(f"table {table} no longer exists; it is now {to}")
        else:
            parts.append(f"column {table}.{column} no longer exists; it is now {to}")
    return "The warehouse schema changed: " + "; ".join(parts) + "."


# Words too common in warehouse names to say which thing a name means.
_GENERIC = frozenset(
    {
        "amount", "id", "name", "date", "time", "timestamp", "count", "number", "value", "code", "type", "key", "at", "flag",
        "quantity", "table", "total",
    }
)


def _shares_meaning(missing: str, candidate: str) -> bool:
    """A replacement keeps the missing name's distinctive words (gross_amount -> gross_amt, never
    discount_amount): a query that merely runs must not read another thing. A name made only of
    common words (amount, id) leaves the choice to similarity."""
    distinctive = _tokens(missing) - _GENERIC
    return not distinctive or bool(distinctive & _tokens(candidate))


def _nearest_tables(table: str, wanted_columns: Sequence[str], schema: LiveSchema) -> list[_Candidate]:
    scored = []
    for candidate in schema.tables:
        if not _shares_meaning(table, candidate):
            continue
        columns = set(schema.columns_of(candidate))
        coverage = sum(1 for c in wanted_columns if c in columns) / len(wanted_columns) if wanted_columns else 0.0
        score = 0.55 * name_similarity(table, candidate) + 0.45 * coverage
        if score >= MIN_TABLE_SCORE:
            scored.append(_Candidate(candidate, round(score, 4)))
    return sorted(scored, key=lambda c: (-c.score, c.name))[:CANDIDATES_PER_NAME]


def _nearest_columns(column: str, table: str, schema: LiveSchema, *, numeric: bool) -> list[_Candidate]:
    scored = []
    for candidate in schema.columns_of(table):
        kind = (schema.type_of(table, candidate) or "").upper()
        if numeric and not kind.startswith(_NUMERIC):
            continue  # summed or computed with: only a number can take its place
        if not _shares_meaning(column, candidate):
            continue
        score = name_similarity(column, candidate)
        if score >= MIN_COLUMN_SCORE:
            scored.append(_Candidate(candidate, round(score, 4)))
    return sorted(scored, key=lambda c: (-c.score, c.name))[:CANDIDATES_PER_NAME]


def _uses_of(sql: str, table: str, column: str) -> str | None:
    """'numeric' when the query sums, averages or computes with the column."""
    from sqlglot import exp

    from memtool.diagnosis.sql_rewrite import _resolved_columns, parse

    tree = parse(sql)
    for real, name, node in _resolved_columns(tree):
        if real == table and name == column:
            parent = node.parent
            while isinstance(parent, (exp.Paren, exp.Cast, exp.Coalesce)):
                parent = parent.parent
            if isinstance(parent, (exp.Sum, exp.Avg, exp.Add, exp.Sub, exp.Mul, exp.Div)):
                return "numeric"
    return None


def name_similarity(a: str, b: str) -> float:
    """Token overlap after expanding abbreviations, blended with edit similarity (0..1)."""
    ta, tb = _tokens(a), _tokens(b)
    overlap = len(ta & tb) / len(ta | tb) if ta | tb else 0.0
    edit = difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio()
    return max(overlap, 0.6 * overlap + 0.4 * edit, 0.8 * edit)


def _tokens(name: str) -> set[str]:
    words = [w for w in re.split(r"[_\W]+", name.lower()) if w]
    return {_ABBREVIATIONS.get(w, w) for w in words} - {"dimension", "fact"}


# ---- values -----------------------------------------------------------------------------------


def _value_causes(subject: Subject, schema: LiveSchema, compiler: IntentCompiler) -> list[Hypothesis]:
    """What could make the value differ from the user's, one family of causes after another."""
    intent = subject.intent
    assert intent is not None
    catalog = compiler.catalog
    if not catalog.has_metric(intent.metric):
        return []
    metric = catalog.metric(intent.metric)
    fact = compiler.fact_table(metric.name)
    live_fact = _live_name(fact, subject)
    current = compiler.with_options(subject.options).time_column(metric)
    return [
        *_time_column_causes(metric, current, schema.time_columns(live_fact)),
        *_left_out_row_causes(subject, catalog, metric, current, schema, live_fact),
        *_definition_causes(subject, compiler, metric),
        *_window_causes(subject, metric),
        *_join_causes(subject, catalog, metric),
    ]


def _value_cause(cause: str, root_cause: str, repair: Repair, cost: int, confidence: float) -> Hypothesis:
    return Hypothesis(id="", cause=cause, root_cause=root_cause, repairs=(repair,), cost=cost, confidence=confidence)


def _time_column_causes(metric: MetricSpec, current: str, time_columns: Sequence[str]) -> list[Hypothesis]:
    """The metric counted by another of the fact table's time columns."""
    return [
        _value_cause(
            "time_column",
            f"{metric.name} was counted in the period of {current}; the expected value counts it by {column}.",
            Repair(kind="time_column", metric=metric.name, to=column),
            2,
            0.6,
        )
        for column in time_columns
        if column != current
    ]


def _left_out_row_causes(
    subject: Subject, catalog: Catalog, metric: MetricSpec, current: str, schema: LiveSchema, live_fact: str
) -> list[Hypothesis]:
    """Test rows or incomplete (unpaid) rows that the source's exclusions left out."""
    intent = subject.intent
    assert intent is not None
    found: list[Hypothesis] = []
    exclusions = {e.role: e for e in catalog.source(metric.source).exclusions} if catalog.sources else {}
    test_rows, incomplete_rows = exclusions.get("test_rows"), exclusions.get("incomplete_rows")
    has_flag = test_rows is not None and (test_rows.column is None or test_rows.column in schema.columns_of(live_fact))
    if test_rows is not None and has_flag and not subject.options.include_test_lines:
        flag = f" ({test_rows.column})" if test_rows.column else ""
        found.append(
            _value_cause(
                "test_lines",
                f"Test rows{flag} were left out; the expected value includes them.",
                Repair(kind="include_rows", metric=metric.name, rows="test"),
                3,
                0.4,
            )
        )
    if incomplete_rows is not None and not subject.options.include_unpaid_lines:
        # Rows without the column the window reads are left out by the window whatever the
        # exclusion says, so including them can only change an answer counted by another column.
        counted_by_it = current == incomplete_rows.column and intent.time_window is not None
        if not counted_by_it:
            flag = f" (no {incomplete_rows.column})" if incomplete_rows.column else ""
            found.append(
                _value_cause(
                    "unpaid_lines",
                    f"Incomplete rows{flag} were left out; the expected value includes them.",
                    Repair(kind="include_rows", metric=metric.name, rows="unpaid"),
                    3,
                    0.4,
                )
            )
    return found


def _definition_causes(subject: Subject, compiler: IntentCompiler, metric: MetricSpec) -> list[Hypothesis]:
    """Another definition of the metric: one of its variants (gross vs net), or refunds by their own date."""
    intent = subject.intent
    assert intent is not None
    catalog = compiler.catalog
    found: list[Hypothesis] = []
    for other in metric.variants:
        if catalog.has_metric(other):
            label = metric.label("zh") if _zh(subject.question) else metric.label("en")
            found.append(
                _value_cause(
                    "metric_definition",
                    f"The user's {label} is {catalog.metric(other).en} ({other}), not {metric.en}.",
                    Repair(kind="metric_definition", metric=metric.name, to=other),
                    3,
                    0.4,
                )
            )
    if metric.name not in subject.options.refunds_by_refund_date and compiler.refunds_by_refund_date_expressible(intent):
        found.append(
            _value_cause(
                "refund_period",
                "Details (refunds) were counted in the period of their row; the expected value counts them by their own date.",
                Repair(kind="refund_period", metric=metric.name, to="refund_date"),
                3,
                0.4,
            )
        )
    return found


def _window_causes(subject: Subject, metric: MetricSpec) -> list[Hypothesis]:
    """The time window's edges: its last day left out, or its first day counted."""
    intent = subject.intent
    assert intent is not None
    if intent.time_window is None:
        return []
    found: list[Hypothesis] = []
    if not subject.options.window_end_inclusive:
        found.append(
            _value_cause(
                "window_edges",
                f"The window ended before {intent.time_window.end}; the expected value counts that day too.",
                Repair(kind="window_edges", metric=metric.name, edge="end_inclusive"),
                4,
                0.3,
            )
        )
    if not subject.options.window_start_exclusive:
        found.append(
            _value_cause(
                "window_edges",
                f"The window began on {intent.time_window.start}; the expected value leaves that day out.",
                Repair(kind="window_edges", metric=metric.name, edge="start_exclusive"),
                4,
                0.3,
            )
        )
    return found


def _join_causes(subject: Subject, catalog: Catalog, metric: MetricSpec) -> list[Hypothesis]:
    """Fact rows without a dimension row, dropped by an inner join."""
    intent = subject.intent
    assert intent is not None
    catalog_dims = [catalog.dimension(d) for d in intent.dimensions if catalog.has_dimension(d)]
    filtered_tables = {catalog.dimension(f.dimension).table for f in intent.filters if catalog.has_dimension(f.dimension)}
    # A LEFT JOIN keeps fact rows without a dimension row only where nothing filters that table.
    unfiltered = [d for d in catalog_dims if d.kind == "attribute" and d.table not in filtered_tables]
    if not unfiltered or subject.options.dimension_join == "left":
        return []
    return [
        _value_cause(
            "join_type",
            "Fact rows without a matching dimension row were dropped by an inner join.",
            Repair(kind="join_type", metric=metric.name, join="left"),
            4,
            0.3,
        )
    ]


def _live_name(table: str, subject: Subject) -> str:
    """The table's name in the warehouse now, after the renames the episode already applied."""
    for repair in subject.sql_repairs:
        if repair.kind == "rename_table" and repair.table == table and repair.to:
            return repair.to
    return table


def _filter_values(
    subject: Subject, compiler: IntentCompiler, distinct_values: Callable[[str, Sequence[str]], list[tuple[Any, ...]]]
) -> list[Hypothesis]:
    intent = subject.intent
    assert intent is not None
    found: list[Hypothesis] = []
    for f in intent.filters:
        if f.op != "in" or not compiler.catalog.has_dimension(f.dimension):
            continue
        spec = compiler.catalog.dimension(f.dimension)
        if spec.table is None or spec.column is None:
            continue
        table = _live_name(spec.table, subject)
        columns = [spec.column, *([spec.en_column] if spec.en_column else [])]
        try:
            rows = distinct_values(table, columns)
        except Exception:  # noqa: BLE001 - a probe that fails proposes nothing
            continue
        stored = {str(row[0]) for row in rows if row and row[0] is not None}
        for value in f.values:
            if value in stored:
                continue
            for row in rows:
                if not row or row[0] is None:
                    continue
                names = [str(v) for v in row if v is not None]
                if any(_spelling(value) == _spelling(name) for name in names):
                    found.append(
                        Hypothesis(
                            id="",
                            cause="filter_value",
                            root_cause=f"The warehouse spells {f.dimension} {value!r} as {row[0]!r}.",
                            repairs=(Repair(kind="filter_value", dimension=f.dimension, value=value, to=str(row[0])),),
                            cost=2,
                            confidence=0.7,
                        )
                    )
                    break
    return found


def _spelling(text: str) -> str:
    """Case, width and whitespace folded: 'Ｓhanghai ' and 'shanghai' spell the same name."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text)).casefold()


def _zh(text: str) -> bool:
    return re.search(r"[\u4e00-\u9fff]", text) is not None
