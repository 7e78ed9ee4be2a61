"""The warehouse port: run one guarded, read-only SELECT and get rows back."""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Protocol

from memtool.sql.live_schema import LiveSchema


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

    def describe(self, *, refresh: bool = False) -> LiveSchema:
        """The tables and columns the warehouse user can read in its schema, from information_schema.

        Internal SQL, never generated SQL: it does not pass the guard, and the caller hands it
        nothing to run. Adapters keep the answer for a short while; ``refresh`` reads it again
        now (after an error that says the schema moved).
        """


def json_value(value: Any) -> Any:
    """A database value json.dumps accepts, the same from every adapter: Decimal -> float, dates
    and times -> ISO strings, INTERVAL -> seconds, bytes -> hex, NaN/inf -> None."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return float(value) if value.is_finite() else None
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_value(item) for item in value]
    return str(value)


def live_schema_of(result: QueryResult, sql: str) -> LiveSchema:
    """The live schema from an adapter's information_schema query; a capped (partial) answer is refused."""
    from memtool.sql.live_schema import MAX_SCHEMA_COLUMNS

    if result.truncated:
        raise WarehouseError(
            f"the schema has more than {MAX_SCHEMA_COLUMNS:,} columns; refusing a partial picture", code="database_error", sql=sql
        )
    return LiveSchema.from_rows(result.rows)


def sqlglot_error_text(exc: Exception) -> str:
    """sqlglot's first parse error without the terminal underline codes it puts around the culprit."""
    errors = getattr(exc, "errors", None) or []
    if errors and errors[0].get("description"):
        first = errors[0]
        where = f" at line {first.get('line')}, column {first.get('col')}" if first.get("line") else ""
        near = f" near {first['highlight']!r}" if first.get("highlight") else ""
        return f"{first['description']}{where}{near}"
    return _ANSI.sub("", str(exc))


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
