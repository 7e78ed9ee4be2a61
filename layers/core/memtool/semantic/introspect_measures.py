"""How the draft model measures a numeric column: summed, averaged, or never added up.

:func:`measure_of` reads the column's name (its word tokens, without the table's shared column
prefix), its type and its range, and returns a :class:`Measure` (``SUM`` or ``AVG``, a kind, and
why, for the metric's definition) or None. The word lists that decide it live here too: calendar
parts and identifiers (never measured), non-additive measures (averaged), totals, money and
quantity words. memtool.semantic.introspect makes each measure a metric of its fact.

Also the checks on a table's numbers that decide what else the draft makes of them: a numbering
(:func:`is_ordinal`), a small whole-number column that groups (:func:`numbered_dimension`), and a
table of one row per period whose numbers are levels (:func:`one_row_per`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from memtool.semantic.introspect_facts import (
    WHOLE_TYPES,
    ColumnFacts,
    TableFacts,
    day_of,
    singular_word,
    table_entity,
    table_prefix,
    type_family,
    word_tokens,
)

_QUANTITY_WORDS = re.compile(r"(^|_)(qty|quantity|count|cnt|num|number|units?)($|_)")
_MONEY_WORDS = re.compile(r"amount|amt|price|cost|revenue|sales|balance|bal$|fee|charge|paid|spend|tax|discount")
# Numbers that are never summed (nor averaged): calendar parts, codes and identifiers, coordinates.
CALENDAR_PARTS = frozenset(
    "year yr month day hour hr minute second week wk quarter qtr weekday dow doy season date yyyymm yyyymmdd".split()
)
_IDENTIFIER_WORDS = frozenset(
    "id key sk code no nbr nr num number zip zipcode postcode postal phone fips lat latitude lon lng longitude "
    "rownames rowname rownum uuid guid seq".split()
)
# Numbers averaged, never summed: by name.
_AVERAGE_WORDS = frozenset(
    "delay time duration rate ratio price temperature temp age speed percent percentage pct rank ranking rating score "
    "avg average mean median margin share".split()
)
_TOTAL_WORDS = frozenset("total sum".split())


WHOLE_NUMBER = WHOLE_TYPES  # the engines' spellings of whole-number types


@dataclass(frozen=True)
class Measure:
    """How a numeric column is measured: ``SUM`` or ``AVG``, its kind, and why (for the definition)."""

    aggregate: str  # SUM | AVG
    kind: str  # money | count | ratio | decimal
    why: str


def is_ordinal(table: TableFacts, column: ColumnFacts) -> bool:
    """A whole-number column running from 1 to the table's row count (an episode's number over the
    whole show, a line number): it numbers the rows, and its sum means nothing."""
    whole = bool(WHOLE_TYPES.match(column.data_type.strip().lower()))
    low, high = _number(column.low), _number(column.high)
    return whole and low == 1 and table.row_count is not None and table.row_count > 2 and high == table.row_count


def measure_of(table: TableFacts, column: ColumnFacts) -> Measure | None:
    """The aggregate a numeric column gets, or None for a number that is never added up.

    Never: calendar parts (year, month, day, hour, minute, ...), codes and identifiers (``*_no``,
    ``zip``, ``flight`` in ``flights``: a column named as its table's entity), coordinates, a
    numbering (whole numbers from 1 to the row count, :func:`is_ordinal`), and a column holding one
    value in every row (nothing to measure: a flag never set).
    ``AVG``: a name of a non-additive measure (delay, time, duration, rate, ratio, price, temperature,
    age, speed, percent, rank, rating, score, ...), negative values in a column not named as an
    amount or a quantity (a delay, a temperature, a margin), a fraction (every value in [0, 1]), or
    a level (a REAL or DOUBLE column not named as money or a quantity, every value in [0, 100]).
    ``SUM`` otherwise. Kinds: money for DECIMAL columns and money names, ratio for fractions, count
    for whole numbers, decimal (rounded to 2) for the other non-whole numbers."""
    tokens = _measure_tokens(table, column)
    if _never_measured(table, column, tokens):
        return None
    return _aggregate_of(column, tokens)


def _measure_tokens(table: TableFacts, column: ColumnFacts) -> list[str]:
    """The column name's words, without the table's shared column prefix (unless that is all of it)."""
    tokens = word_tokens(column.name)
    prefix = table_prefix(table)
    if prefix and tokens and tokens[0] == prefix.rstrip("_").lower():
        tokens = tokens[1:] or tokens
    return tokens


def _never_measured(table: TableFacts, column: ColumnFacts, tokens: list[str]) -> bool:
    """A calendar part, a code or identifier, the table's own entity, or one value in every row."""
    if not tokens or any(t in CALENDAR_PARTS for t in tokens):
        return True
    counted = tokens[0] in ("num", "number", "n") and len(tokens) > 1  # num_items: a quantity, not a number of something
    if any(t in _IDENTIFIER_WORDS for t in (tokens[1:] if counted else tokens)):
        return True
    if "".join(tokens) == table_entity(table.name):
        return True  # flights.flight, orders.order: the thing's own number
    if is_ordinal(table, column):
        return True  # 1, 2, ... n over n rows: a numbering
    # one value in every row (TPC-H's o_shippriority, all 0): it measures nothing
    return column.low is not None and column.low == column.high


def _aggregate_of(column: ColumnFacts, tokens: list[str]) -> Measure:
    """AVG for a non-additive name, a fraction or negative values (:func:`_averaged`); SUM otherwise,
    money for a money name or a DECIMAL column, count for a whole number, decimal for the rest."""
    name = column.name.lower()
    spelled = column.data_type.strip().lower()
    whole = bool(WHOLE_TYPES.match(spelled))
    money = bool(_MONEY_WORDS.search(name)) or spelled.startswith(("decimal", "numeric"))
    quantity = bool(_QUANTITY_WORDS.search(name))
    averaged = _averaged(column, tokens, whole=whole, money=money, quantity=quantity)
    if averaged is not None:
        return averaged
    if quantity:
        return Measure("SUM", "count" if whole else "decimal", "summed")
    if money:
        return Measure("SUM", "money", "summed")
    return Measure("SUM", "count" if whole else "decimal", "summed")


def _averaged(column: ColumnFacts, tokens: list[str], *, whole: bool, money: bool, quantity: bool) -> Measure | None:
    """AVG for a name of a non-additive measure (not a total), a fraction that is not a quantity, a
    level (:func:`_level`), or negative values in a column named neither as an amount nor as a
    quantity nor as a total."""
    low, high = _number(column.low), _number(column.high)
    fraction = not whole and low is not None and high is not None and low >= 0 and high <= 1 and high > 0
    totalled = any(t in _TOTAL_WORDS for t in tokens)
    named_average = next((t for t in tokens if singular_word(t) in _AVERAGE_WORDS), None)
    if named_average and not totalled:
        kind = "ratio" if fraction else "money" if money and named_average == "price" else "decimal"
        return Measure("AVG", kind, f"averaged: '{named_average}' names a measure that does not add up")
    if fraction and not quantity:
        return Measure("AVG", "ratio", f"averaged: every value lies between 0 and 1 ({low:g} to {high:g}), a fraction")
    if _level(low, high, whole=whole, money=money, quantity=quantity) and not totalled:
        return Measure("AVG", "decimal", f"averaged: decimal values between 0 and 100 ({low:g} to {high:g}), a level, not an amount")
    if low is not None and low < 0 and not money and not quantity and not totalled:
        return Measure("AVG", "decimal", f"averaged: it has negative values (down to {low:g})")
    return None


def _level(low: float | None, high: float | None, *, whole: bool, money: bool, quantity: bool) -> bool:
    """A non-whole column (REAL, DOUBLE), named neither as money nor as a quantity, whose values
    all lie between 0 and 100: a percentage, a poll number, a score, an audience in millions. Such
    a column is read as a level each row reports, whose sum over rows is not what a question means
    by it ("Clinton's poll number", "7-day viewers"). Above 100, or in whole numbers, it is summed."""
    return not (whole or money or quantity) and low is not None and high is not None and low >= 0 and 1 < high <= 100


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def one_row_per(table: TableFacts, dated: ColumnFacts) -> str | None:
    """The period a table holds exactly one row of (a monthly economic series: 574 rows over 574
    months), or None. Its numbers are levels each period reports, never summed across periods."""
    first, last, rows = day_of(dated.low), day_of(dated.high), table.row_count
    if first is None or last is None or rows is None or rows < 3:
        return None
    spans = {
        "day": (last - first).days + 1,
        "week": (last - first).days // 7 + 1,
        "month": (last.year - first.year) * 12 + last.month - first.month + 1,
        "quarter": (last.year - first.year) * 4 + (last.month - 1) // 3 - (first.month - 1) // 3 + 1,
        "year": last.year - first.year + 1,
    }
    return next((period for period, count in spans.items() if count == rows), None)


def numbered_dimension(table: TableFacts, column: ColumnFacts, cap: int) -> bool:
    """A whole-number column whose values, by their range, are at most ``cap`` numbers from 0 up,
    named as no calendar part (those are the time grains): the numbers of a series, an episode, a
    level. Grouped by ("by series"), never filtered by a bare number a question holds ("top 5")."""
    if type_family(column.data_type) != "numeric" or not WHOLE_NUMBER.match(column.data_type.strip().lower()):
        return False
    if any(word in CALENDAR_PARTS for word in word_tokens(column.name)) or is_ordinal(table, column):
        return False
    try:
        low, high = int(column.low), int(column.high)
    except (TypeError, ValueError):
        return False
    return 0 <= low < high and high - low < cap


__all__ = ["CALENDAR_PARTS", "WHOLE_NUMBER", "Measure", "is_ordinal", "measure_of", "numbered_dimension", "one_row_per"]
