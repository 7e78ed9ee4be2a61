"""Values in generated SQL: built as sqlglot nodes and rendered for the dialect, never formatted.

A value that reaches SQL text (a filter value from a question, a stored turn, a correction, a
few-shot or a lesson; a date of a window) is data. Doubling ``'`` is not enough: in the Redshift
dialect ``\\'`` escapes a quote too, so ``x\\`` followed by SQL closes nothing where the author of
the quoting thought it did. sqlglot's generator escapes what the dialect's tokenizer reads as an
escape (``\\`` and ``'`` for Redshift), and the guard reads the text back with the same tokenizer,
so the value is one string literal in both readings.

Identifiers the model names (tables, columns) are not values: the model validator and the guard
check them against the warehouse. ``tests/unit/test_no_formatted_values.py`` greps the library for
a value put into SQL by string formatting and proves it finds a planted one.
"""

from __future__ import annotations

from datetime import date

DIALECT = "redshift"  # the dialect every generated statement is written in (see memtool.sql.guardrails)


def string_literal(value: object, *, dialect: str = DIALECT) -> str:
    """``value`` as one SQL string literal of ``dialect``."""
    from sqlglot import exp

    return exp.Literal.string(str(value)).sql(dialect=dialect)


def date_literal(value: date, *, dialect: str = DIALECT) -> str:
    """``CAST('<iso date>' AS DATE)`` for a ``date`` (never a string that merely looks like one)."""
    from sqlglot import exp

    if not isinstance(value, date):
        raise TypeError(f"a date literal takes a date, not {type(value).__name__}")
    return exp.cast(exp.Literal.string(value.isoformat()), exp.DataType.build("date")).sql(dialect=dialect)


def in_list(values: object, *, dialect: str = DIALECT) -> str:
    """``'a', 'b'``: the values of an IN list, each one string literal."""
    items = list(values)  # type: ignore[call-overload]
    if not items:
        raise ValueError("an IN list needs at least one value")
    return ", ".join(string_literal(v, dialect=dialect) for v in items)


def quoted_identifier(name: str, *, dialect: str = DIALECT) -> str:
    """``name`` as one quoted identifier of ``dialect`` (a warehouse's own table or column name,
    which may hold anything, quotes included)."""
    from sqlglot import exp

    return exp.to_identifier(str(name), quoted=True).sql(dialect=dialect)


__all__ = ["DIALECT", "date_literal", "in_list", "quoted_identifier", "string_literal"]
