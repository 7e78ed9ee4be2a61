"""What a semantic model's SQL can reach, checked when the model is put (``PUT /model``), not at ask time.

A model is written by a curator, and every piece of it lands in SQL text: metric expressions, their
filters, a source's exclusions, and the identifiers (tables, columns, join keys). So a model is
refused, each problem at its place, when:

- an expression or condition is more than an expression over the model's own aliases: a subquery,
  a table (``SELECT … FROM customer``), a table function (``LATERAL query('…')``, ``read_text``), or
  a function that is not on the guardrails' allow-list;
- an identifier is not a plain name (``column``, ``table.column``), so nothing rides in on one;
- a table is outside what the operator granted the tenant (``memtool.sql.grants``), when a grant
  is configured: the model is the curator's, the grant is the operator's.

The guardrails check every statement again at ask time; this check is what makes a bad model a
``422`` with its places instead of a refusal its users see.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from memtool.semantic.catalog import Catalog
from memtool.semantic.validation import ModelProblem
from memtool.sql.grants import table_granted

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QUALIFIED_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
_MAX_EXPRESSION_CHARS = 4000


def reach_problems(model: Catalog, granted: Sequence[str] | None = None) -> list[ModelProblem]:
    """Every place where ``model`` reaches beyond its own tables, or beyond ``granted`` (patterns)."""
    problems: list[ModelProblem] = []
    aliases = {t.alias.lower() for t in model.tables} | {d.alias.lower() for s in model.sources for d in s.details}
    for path, text in _expressions(model):
        problem = expression_problem(text, aliases)
        if problem is not None:
            problems.append(ModelProblem(path, problem))
    for path, name, qualified in _identifiers(model):
        pattern = _QUALIFIED_COLUMN if qualified else _IDENTIFIER
        if not isinstance(name, str) or not pattern.fullmatch(name):
            shape = "letters, digits and _" + (", optionally table.column" if qualified else "")
            problems.append(ModelProblem(path, f"{name!r} is not a column name ({shape})"))
    if granted is not None:
        patterns = tuple(p.lower() for p in granted)
        for index, table in enumerate(model.tables):
            if not table_granted(table.physical, patterns):
                problems.append(
                    ModelProblem(
                        f"tables[{index}].{'table' if table.table else 'name'}",
                        f"the table {table.physical} is not one this tenant may read (granted: {', '.join(patterns)})",
                    )
                )
    return problems


def expression_problem(text: str, aliases: set[str]) -> str | None:
    """Why a metric expression or condition is more than an expression over ``aliases``, or None."""
    from sqlglot import exp, parse
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.errors import ParseError, TokenError

    from memtool.sql.guardrails import DIALECT, function_refusal

    if len(text) > _MAX_EXPRESSION_CHARS:
        return f"is {len(text):,} characters; an expression may have at most {_MAX_EXPRESSION_CHARS:,}"
    try:
        statements = [s for s in parse(f"SELECT {text}", read=DIALECT) if s is not None]
    except (ParseError, TokenError) as error:
        return f"is not a SQL expression: {str(error).splitlines()[0][:160]}"
    except RecursionError:
        return "is nested too deeply to check"
    if any(token.comments for token in Dialect.get_or_raise(DIALECT).tokenize(f"SELECT {text}")):
        return "may not hold a comment (-- or /* */): it would swallow the SQL that follows it"
    if len(statements) != 1 or not isinstance(statements[0], exp.Select):
        return "must be one SQL expression (no ';', no second statement)"
    select = statements[0]
    clauses = ("from_", "from", "where", "group", "having", "joins", "with_", "with", "limit")
    if len(select.expressions) != 1 or any(select.args.get(k) for k in clauses):
        return "must be one SQL expression, not a query (no FROM, WHERE, GROUP BY or a second column)"
    tree = select.expressions[0]
    if tree.find(exp.Select, exp.Subquery) is not None:
        return "may not hold a subquery: a metric reads the model's tables through its source and joins"
    table = tree.find(exp.Table)
    if table is not None:
        return f"may not read a table ({table.sql(DIALECT)[:60]}): name the table in the model and join it"
    refused = function_refusal(tree, DIALECT)
    if refused is not None:
        return refused
    for column in tree.find_all(exp.Column):
        qualifier = column.table.lower()
        if qualifier and qualifier not in aliases:
            return f"{column.sql(DIALECT)} names {qualifier!r}, which is not an alias of the model's tables"
    return None


def _expressions(model: Catalog) -> Iterator[tuple[str, str]]:
    for i, metric in enumerate(model.metrics):
        yield f"metrics[{i}].expression", metric.expression
        for j, condition in enumerate(metric.filters):
            yield f"metrics[{i}].filters[{j}]", condition
    for i, source in enumerate(model.sources):
        for j, exclusion in enumerate(source.exclusions):
            yield f"sources[{i}].exclusions[{j}].condition", exclusion.condition


def _identifiers(model: Catalog) -> Iterator[tuple[str, str, bool]]:
    """(path, name, whether table.column is allowed) of every column name the compiler writes into SQL."""
    for i, table in enumerate(model.tables):
        for column in table.columns:
            yield f"tables[{i}].columns.{column}", column, False
    for i, join in enumerate(model.joins):
        for j, (left, right) in enumerate(join.pairs()):
            yield f"joins[{i}].on[{j}]", left, False
            yield f"joins[{i}].on[{j}]", right, False
    for i, source in enumerate(model.sources):
        if source.time_column:
            yield f"sources[{i}].time_column", source.time_column, True
        for j, column in enumerate(source.other_time_columns):
            yield f"sources[{i}].other_time_columns[{j}]", column, True
        for j, exclusion in enumerate(source.exclusions):
            if exclusion.column:
                yield f"sources[{i}].exclusions[{j}].column", exclusion.column, False
        for j, detail in enumerate(source.details):
            for k, key in enumerate(detail.keys):
                yield f"sources[{i}].details[{j}].keys[{k}]", key, False
            if detail.time_column:
                yield f"sources[{i}].details[{j}].time_column", detail.time_column, False
    for i, metric in enumerate(model.metrics):
        if metric.time_column:
            yield f"metrics[{i}].time_column", metric.time_column, True
        if metric.by_detail is not None and metric.by_detail.denominator:
            yield f"metrics[{i}].by_detail.denominator", metric.by_detail.denominator, False
    for i, dimension in enumerate(model.dimensions):
        if dimension.column:
            yield f"dimensions[{i}].column", dimension.column, False
        if dimension.en_column:
            yield f"dimensions[{i}].en_column", dimension.en_column, False


def model_tables_outside(model: Catalog, granted: Sequence[str]) -> list[str]:
    """The model's warehouse tables ``granted`` does not cover."""
    patterns = tuple(p.lower() for p in granted)
    return [t for t in model.physical_tables if not table_granted(t, patterns)]


__all__ = ["expression_problem", "model_tables_outside", "reach_problems"]
