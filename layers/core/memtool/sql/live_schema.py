"""The live schema of a warehouse: the tables and columns it really has now, read from information_schema.

The semantic model says what a warehouse should look like; a real
warehouse drifts away from any such contract (a column renamed under a semantic layer, a table
replaced by a view). Diagnosing a failed query and guarding the next one need what the warehouse
has at the time of the ask, so adapters read it with one internal query and keep it here.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any


def information_schema_sql(schema: str) -> str:
    """The information_schema query for one schema; ``schema`` is a placeholder or SQL expression.

    DuckDB binds ``?``, redshift-connector and psycopg ``%s``; an adapter that does not know its
    schema passes ``current_schema()``, which all three engines understand. Views are in
    information_schema.columns too, on purpose: generated SQL may read them. (Redshift leaves out
    late-binding views, whose columns are known only when they run.)
    """
    return (
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        f"WHERE table_schema = {schema} ORDER BY table_name, ordinal_position"
    )


# The query in the DB-API "format" paramstyle (redshift-connector, psycopg): bind the schema name.
INFORMATION_SCHEMA_SQL = information_schema_sql("%s")

# How many columns a describe() reads at most: far beyond any schema an assistant reads, and a cap
# so a catalogue gone wild cannot flood a Lambda's memory.
MAX_SCHEMA_COLUMNS = 100_000
# How long the information_schema query may run.
SCHEMA_TIMEOUT_SECONDS = 10.0

_TIME_TYPES = frozenset(
    {
        "DATE",
        "TIMESTAMP",
        "TIMESTAMPTZ",
        "TIMESTAMP WITH TIME ZONE",
        "TIMESTAMP WITHOUT TIME ZONE",  # PostgreSQL and Redshift spell plain TIMESTAMP so
        "TIMESTAMP_S",
        "TIMESTAMP_MS",
        "TIMESTAMP_NS",
        "DATETIME",
    }
)
_BOOLEAN_TYPES = frozenset({"BOOLEAN", "BOOL"})


@dataclass(frozen=True)
class LiveSchema:
    """table -> column -> data type, names lower case, types upper case as the engine spells them.

    Columns keep their ordinal order, so ``columns_of`` lists them the way ``SELECT *`` would.
    """

    tables: Mapping[str, Mapping[str, str]]

    def __post_init__(self) -> None:
        normalized: dict[str, Mapping[str, str]] = {}
        for table, columns in self.tables.items():
            merged = dict(normalized.get(table.lower(), {}))
            merged.update({column.lower(): str(data_type).upper() for column, data_type in columns.items()})
            normalized[table.lower()] = MappingProxyType(merged)
        object.__setattr__(self, "tables", MappingProxyType(normalized))

    @classmethod
    def from_rows(cls, rows: Iterable[Iterable[Any]]) -> LiveSchema:
        """From (table_name, column_name, data_type) rows in the order the query returned them."""
        tables: dict[str, dict[str, str]] = {}
        for table, column, data_type in rows:
            tables.setdefault(str(table).lower(), {})[str(column).lower()] = "" if data_type is None else str(data_type)
        return cls(tables)

    def has_table(self, name: str) -> bool:
        return name.lower() in self.tables

    def has_column(self, table: str, column: str) -> bool:
        return column.lower() in self.tables.get(table.lower(), {})

    def columns_of(self, table: str) -> tuple[str, ...]:
        """The table's columns in ordinal order; () when the table is not there."""
        return tuple(self.tables.get(table.lower(), {}))

    def type_of(self, table: str, column: str) -> str | None:
        return self.tables.get(table.lower(), {}).get(column.lower())

    def time_columns(self, table: str) -> tuple[str, ...]:
        """DATE and TIMESTAMP columns: the ones a period filter or a trend can use."""
        return tuple(c for c, t in self.tables.get(table.lower(), {}).items() if t in _TIME_TYPES)

    def boolean_columns(self, table: str) -> tuple[str, ...]:
        """Flags such as is_test, which a query usually has to filter on."""
        return tuple(c for c, t in self.tables.get(table.lower(), {}).items() if t in _BOOLEAN_TYPES)

    def guard_allowlist(self) -> dict[str, list[str]]:
        """table -> columns, the shape ``GuardPolicy(allowed=...)`` takes."""
        return {table: list(columns) for table, columns in self.tables.items()}

    def fingerprint(self) -> str:
        """16 hex chars that change when a table, column or type does, not when the order does.

        A memory records it so a later ask can tell the schema it was learned on has changed.
        """
        triples = sorted((t, c, ty) for t, columns in self.tables.items() for c, ty in columns.items())
        return hashlib.sha256(json.dumps(triples, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]

    def facts(self, tables: Iterable[str]) -> dict[str, dict[str, str]]:
        """{table: {column: type}} for the named tables the warehouse has (absent ones are left out).

        JSON-friendly, for storing the schema facts an answer relied on next to the memory.
        """
        wanted = dict.fromkeys(t.lower() for t in tables)
        return {t: dict(self.tables[t]) for t in wanted if t in self.tables}


class SchemaCache:
    """Keeps the last LiveSchema for ``ttl_seconds`` so an ask does not read information_schema each time.

    Reads are serialised: concurrent asks after expiry wait for one read instead of each sending it.
    """

    def __init__(self, ttl_seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_seconds < 0:
            raise ValueError("schema_cache_seconds must not be negative")
        self._ttl = ttl_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._schema: LiveSchema | None = None
        self._read_at = 0.0

    def get(self, read: Callable[[], LiveSchema], *, refresh: bool = False) -> LiveSchema:
        with self._lock:
            now = self._clock()
            if refresh or self._schema is None or now - self._read_at >= self._ttl:
                self._schema = read()  # on error the previous value stays, and so does its age
                self._read_at = now
            return self._schema
