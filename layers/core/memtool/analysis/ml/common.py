"""What every ML tool shares: turning kernel input errors into tool failures, and reading a
series either from columns and rows or from series and labels."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from memtool.analysis import kernels
from memtool.tools.base import BadArguments, NeedsClarification

T = TypeVar("T")


@contextmanager
def kernel_failures() -> Iterator[None]:
    """Kernel input errors as the tool failures a caller can act on."""
    try:
        yield
    except kernels.KernelInputError as error:
        failure = NeedsClarification if error.unanswerable else BadArguments
        raise failure(str(error), field=error.field) from None


def guarded(call: Callable[[], T]) -> T:
    with kernel_failures():
        return call()


def series_arguments(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    series: Sequence[float] | None,
    labels: Sequence[str] | None,
    label_column: str,
    value_column: str,
) -> tuple[list[str], list[float]]:
    """(labels, values) from exactly one of the two forms the tools accept."""
    if series is not None:
        if columns or rows:
            raise BadArguments("give either series and labels, or columns and rows, not both", field="series")
        if labels is None:
            raise BadArguments("series needs labels, one per value", field="labels")
        if len(labels) != len(series):
            raise BadArguments(f"{len(series)} values for {len(labels)} labels", field="labels")
        return [str(label) for label in labels], [float(v) for v in series]
    if not columns:
        raise BadArguments("give the data as columns and rows, or as series and labels", field="columns")
    with kernel_failures():
        return kernels.series_from_table(columns, rows, label_column, value_column)
