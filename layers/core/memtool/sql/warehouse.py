"""The warehouse port: run one guarded, read-only SELECT and get rows back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class WarehouseError(Exception):
    """The database refused or failed the query; ``code`` classifies it for diagnosis."""

    def __init__(self, message: str, *, code: str = "database_error", sql: str | None = None) -> None:
        super().__init__(message)
        self.code = code  # e.g. syntax_error, undefined_column, undefined_table, timeout, permission
        self.sql = sql


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[list[Any]]  # JSON-friendly values: Decimal -> float, date/datetime -> ISO strings
    row_count: int  # rows returned (after the cap)
    truncated: bool  # the row cap cut the result
    elapsed_ms: float


class Warehouse(Protocol):
    @property
    def dialect(self) -> str:
        """The dialect SQL arrives in is always Redshift; this names what the engine speaks."""

    def run(self, sql: str, *, max_rows: int, timeout_seconds: float, params: Sequence[Any] | None = None) -> QueryResult:
        """Run one read-only statement written in the Redshift dialect."""
