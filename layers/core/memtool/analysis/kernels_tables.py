"""The analysis kernels' tables and series: the input error, reading a column of a table, period
labels, series by period, and the checks a series passes before it is analysed.

Shipped into the sandbox first, ahead of ``kernels_attribution`` and ``kernels`` (see
``memtool.analysis.kernels``): the standard library and numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

MAD_TO_SIGMA = 1.4826  # 1.4826·MAD estimates the standard deviation of a normal sample
Z_80 = 1.2815515655446004  # two-sided 80% normal quantile
Z_95 = 1.959963984540054  # two-sided 95% normal quantile
_CENT = Decimal("0.01")


class KernelInputError(ValueError):
    """The data cannot be analysed as given; ``field`` names the argument at fault.

    ``unanswerable`` marks well-formed data the analysis cannot answer (too few points, a constant
    series) as opposed to malformed arguments (a missing column, a word where a number belongs).
    """

    def __init__(self, message: str, *, field: str, unanswerable: bool = False) -> None:
        super().__init__(message)
        self.field = field
        self.unanswerable = unanswerable


# ---------------------------------------------------------------------------------------------
# Tables and series
# ---------------------------------------------------------------------------------------------


def as_float(value: Any, *, field: str) -> float:
    """A finite float from a JSON cell (numbers, numeric strings, Decimals), or KernelInputError."""
    if isinstance(value, bool) or value is None:
        raise KernelInputError(f"{field}: {value!r} is not a number", field=field)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise KernelInputError(f"{field}: {value!r} is not a number", field=field) from None
    if not math.isfinite(number):
        raise KernelInputError(f"{field}: {value!r} is not a finite number", field=field)
    return number


def table_column(columns: Sequence[str], rows: Sequence[Sequence[Any]], name: str, *, field: str) -> list[Any]:
    """The cells of column ``name``; ``field`` names the argument that chose it."""
    if name not in columns:
        raise KernelInputError(f"{field}: no column {name!r}; the columns are {list(columns)}", field=field)
    index = list(columns).index(name)
    for number, row in enumerate(rows):
        if len(row) != len(columns):
            raise KernelInputError(f"rows[{number}] has {len(row)} cells for {len(columns)} columns", field="rows")
    return [row[index] for row in rows]


def numeric_column(columns: Sequence[str], rows: Sequence[Sequence[Any]], name: str, *, field: str) -> list[float]:
    cells = table_column(columns, rows, name, field=field)
    try:
        return [as_float(v, field=field) for v in cells]
    except KernelInputError as error:
        raise KernelInputError(f"column {name!r} ({field}): {error}", field=field) from None


def is_numeric_column(columns: Sequence[str], rows: Sequence[Sequence[Any]], name: str) -> bool:
    try:
        numeric_column(columns, rows, name, field="columns")
    except KernelInputError:
        return False
    return len(rows) > 0


def period_label(value: Any) -> str:
    """A period cell as a label: dates and timestamps keep their month when they fall on its first
    day (``2026-06-01`` -> ``2026-06``), because monthly series come from ``date_trunc``."""
    text = str(value)
    if len(text) >= 10 and text[4] == "-" and text[7] == "-" and text[8:10] == "01" and text[10:].strip(" T0:") == "":
        return text[:7]
    return text


def series_from_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], label_column: str, value_column: str
) -> tuple[list[str], list[float]]:
    """(labels, values) ordered by label, summing rows that share a label."""
    labels = [period_label(v) for v in table_column(columns, rows, label_column, field="label_column")]
    values = numeric_column(columns, rows, value_column, field="value_column")
    totals: dict[str, float] = {}
    for label, value in zip(labels, values, strict=True):
        totals[label] = totals.get(label, 0.0) + value
    ordered = sorted(totals)
    return ordered, [totals[label] for label in ordered]


def next_labels(labels: Sequence[str], horizon: int) -> list[str]:
    """The labels of the ``horizon`` periods after the last one: months stay months
    (``2026-11`` -> ``2026-12``, ``2027-01``), anything else becomes ``+1``, ``+2``…"""
    last = labels[-1] if labels else ""
    if len(last) == 7 and last[4] == "-" and last[:4].isdigit() and last[5:].isdigit():
        year, month = int(last[:4]), int(last[5:])
        out = []
        for _ in range(horizon):
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
            out.append(f"{year:04d}-{month:02d}")
        return out
    return [f"+{h}" for h in range(1, horizon + 1)]


def month_of_year(label: str) -> int | None:
    if len(label) >= 7 and label[4] == "-" and label[5:7].isdigit():
        return int(label[5:7])
    return None


def _check_series(values: Sequence[float], labels: Sequence[str], *, minimum: int) -> None:
    if len(values) != len(labels):
        raise KernelInputError(f"{len(values)} values for {len(labels)} labels", field="labels")
    if len(values) < minimum:
        raise KernelInputError(f"{len(values)} points; at least {minimum} are needed", field="values", unanswerable=True)
    for i, v in enumerate(values):
        as_float(v, field=f"values[{i}]")
    if max(values) == min(values):
        raise KernelInputError("the series is constant; there is nothing to analyse", field="values", unanswerable=True)
