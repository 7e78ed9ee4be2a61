"""The embedded warehouse: the ``Warehouse`` port over a read-only DuckDB file (the local default).

SQL arrives in the Redshift dialect and is transpiled to DuckDB with sqlglot. Parameters stay
parameters: Redshift-style ``%s`` placeholders (redshift-connector's ``format`` paramstyle) and
``?`` become DuckDB's ``?``, ``$1``-style ones stay ``$1``; values are bound by DuckDB, never
formatted into the text. A ``%s`` inside a string literal is text, not a placeholder.

Defence in depth, under the guard that already checked the statement: only one read query
(SELECT / WITH / set operations) runs; the file is opened read-only; external access (files,
ATTACH, extensions) is off and the configuration is locked so a query cannot turn it back on.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from memtool.sql.live_schema import (
    MAX_SCHEMA_COLUMNS,
    SCHEMA_TIMEOUT_SECONDS,
    LiveSchema,
    SchemaCache,
    information_schema_sql,
)
from memtool.sql.warehouse import QueryResult, WarehouseError, json_value, live_schema_of, sqlglot_error_text

# After an interrupt, how long to wait for DuckDB to unwind before giving up on the worker.
_INTERRUPT_GRACE_SECONDS = 2.0

# DuckDB's buffer pool puts a node in an eviction queue for every temporary buffer a query uses
# (the hash tables of its joins and aggregates: some 24 nodes for a demo ask's query) and
# purges the dead ones only once a queue holds tens of thousands of them, or when memory runs
# short, which a small warehouse never does. Each dead node keeps its block handle's memory
# (about 230 bytes together), so a long-running server grew by some 10 MB per 1,000 asks
# (docs/local-runtime.md). Closing the database frees them all; reopening a
# read-only file takes some 30 ms. So the connection is reopened after this many queries, at a
# moment when none is running: new queries wait up to _DRAIN_SECONDS for the running ones to
# finish, and go on on the old connection if a long one is still running (the next tries again).
RECYCLE_AFTER_QUERIES = 1000
_DRAIN_SECONDS = 0.5
_SCHEMA_SQL = information_schema_sql("?")


class DuckDBWarehouse:
    """Runs guarded Redshift-dialect SELECTs on a DuckDB file. Thread-safe: one cursor per query.

    The file is opened with external access off; DuckDB refuses a second connection to the same
    file in this process with a different configuration, so open it elsewhere through this class.
    """

    def __init__(self, path: Path, *, schema_cache_seconds: float = 60.0, recycle_after_queries: int = RECYCLE_AFTER_QUERIES) -> None:
        if recycle_after_queries < 1:
            raise ValueError("recycle_after_queries must be at least 1")
        self._path = Path(path)
        self._lock = threading.Lock()
        self._cursors_closed = threading.Condition(self._lock)
        self._connection: Any = None  # opened on first use
        self._schema_cache = SchemaCache(schema_cache_seconds)
        self._recycle_after = recycle_after_queries
        self._queries = 0  # cursors handed out on the open connection
        self._in_flight = 0  # of them, still open
        self.reopened = 0  # times the connection was closed and opened again (see RECYCLE_AFTER_QUERIES)

    @property
    def dialect(self) -> str:
        return "duckdb"

    @property
    def path(self) -> Path:
        return self._path

    def run(self, sql: str, *, max_rows: int, timeout_seconds: float, params: Sequence[Any] | None = None) -> QueryResult:
        if max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        if timeout_seconds <= 0:
            raise ValueError("timeout_seconds must be positive")
        statement = to_duckdb_sql(sql)
        return self._execute(statement, sql, params, max_rows=max_rows, timeout_seconds=timeout_seconds)

    def describe(self, *, refresh: bool = False) -> LiveSchema:
        """The tables and views of schema ``main``, read on the read-only connection.

        Kept for ``schema_cache_seconds`` so an ask does not read it every time; ``refresh`` reads
        it again at once (after a failure that suggests the schema moved).
        """
        return self._schema_cache.get(self._read_live_schema, refresh=refresh)

    def _read_live_schema(self) -> LiveSchema:
        # Internal, fixed SQL: it skips the Redshift transpiler but keeps the read-only connection,
        # the timeout and the error classification of generated queries.
        result = self._execute(_SCHEMA_SQL, _SCHEMA_SQL, ["main"], max_rows=MAX_SCHEMA_COLUMNS, timeout_seconds=SCHEMA_TIMEOUT_SECONDS)
        return live_schema_of(result, _SCHEMA_SQL)

    def _execute(self, statement: str, sql: str, params: Sequence[Any] | None, *, max_rows: int, timeout_seconds: float) -> QueryResult:
        """Run DuckDB SQL on its own cursor, time-boxed; ``sql`` is what errors report."""
        cursor = self._cursor(sql)
        query = _RunningQuery(cursor, statement, list(params) if params is not None else None, max_rows, on_closed=self._cursor_closed)
        worker = threading.Thread(target=query.run, name="duckdb-query", daemon=True)
        started = time.perf_counter()
        worker.start()
        if not query.done.wait(timeout_seconds):
            query.interrupt()
            query.done.wait(_INTERRUPT_GRACE_SECONDS)
            raise WarehouseError(
                f"the query ran longer than the {timeout_seconds:g} s statement timeout and was cancelled",
                code="timeout",
                sql=sql,
            )
        elapsed_ms = (time.perf_counter() - started) * 1000
        if query.error is not None:
            raise _as_warehouse_error(query.error, sql) from query.error
        rows = query.rows
        truncated = len(rows) > max_rows
        rows = rows[:max_rows]
        return QueryResult(
            columns=query.columns,
            rows=[[json_value(value) for value in row] for row in rows],
            row_count=len(rows),
            truncated=truncated,
            elapsed_ms=round(elapsed_ms, 3),
        )

    def eviction_queue_nodes(self) -> int:
        """Nodes in the open database's buffer eviction queues, dead ones included: what reopening
        after ``recycle_after_queries`` bounds (0 before the first query)."""
        with self._lock:
            if self._connection is None:
                return 0
            cursor = self._connection.cursor()
            self._in_flight += 1  # a reopen waits for this read too
        try:
            row = cursor.execute("SELECT COALESCE(SUM(approximate_size), 0) FROM duckdb_eviction_queues()").fetchone()
        finally:
            cursor.close()
            self._cursor_closed()
        return int(row[0]) if row else 0

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def _cursor(self, sql: str) -> Any:
        """A fresh connection to the shared database instance: queries never share state."""
        import duckdb

        with self._lock:
            if self._connection is not None and self._queries >= self._recycle_after:
                self._cursors_closed.wait_for(lambda: not self._in_flight, timeout=_DRAIN_SECONDS)
                if self._connection is not None and self._queries >= self._recycle_after and not self._in_flight:
                    self._connection.close()  # no cursor is open: nothing running is cut short
                    self._connection = None
                    self.reopened += 1
            if self._connection is None:
                if not self._path.exists():
                    raise WarehouseError(f"warehouse file not found: {self._path}", code="database_error", sql=sql)
                try:
                    connection = duckdb.connect(str(self._path), read_only=True, config={"enable_external_access": False})
                    # DuckDB shares one instance per file and config within a process: another
                    # DuckDBWarehouse on this file may have set it up and locked it already.
                    locked = connection.execute("SELECT current_setting('lock_configuration')").fetchone()
                    if not (locked and locked[0]):
                        # Redshift sessions run in UTC; GETDATE() and timestamptz casts must agree.
                        connection.execute("SET GLOBAL TimeZone = 'UTC'")
                        connection.execute("SET GLOBAL lock_configuration = true")
                except duckdb.Error as exc:
                    raise WarehouseError(f"cannot open the warehouse: {exc}", code="database_error", sql=sql) from exc
                self._connection = connection
                self._queries = 0
            cursor = self._connection.cursor()
            self._queries += 1
            self._in_flight += 1
            return cursor

    def _cursor_closed(self) -> None:
        with self._lock:
            self._in_flight -= 1
            if not self._in_flight:
                self._cursors_closed.notify_all()


class _RunningQuery:
    """One statement on its own cursor, run by a worker thread so the caller can time it out."""

    def __init__(
        self, cursor: Any, statement: str, params: list[Any] | None, max_rows: int, *, on_closed: Callable[[], None] | None = None
    ) -> None:
        self._cursor = cursor
        self._on_closed = on_closed
        self._statement = statement
        self._params = params
        self._max_rows = max_rows
        self._lock = threading.Lock()
        self._closed = False
        self.done = threading.Event()
        self.columns: list[str] = []
        self.rows: list[tuple[Any, ...]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            if self._params is None:
                self._cursor.execute(self._statement)
            else:
                self._cursor.execute(self._statement, self._params)
            if self._cursor.description is not None:
                self.columns = [column[0] for column in self._cursor.description]
                # One row past the cap tells us whether the cap cut the result.
                self.rows = self._cursor.fetchmany(self._max_rows + 1)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self.error = exc
        finally:
            with self._lock:
                self._closed = True
                try:
                    self._cursor.close()
                except Exception:  # noqa: BLE001 - closing a cursor that failed is best effort
                    pass
            if self._on_closed is not None:
                self._on_closed()
            self.done.set()

    def interrupt(self) -> None:
        with self._lock:
            if not self._closed:
                self._cursor.interrupt()


def to_duckdb_sql(sql: str) -> str:
    """One Redshift-dialect read query, transpiled to DuckDB; anything else is a WarehouseError."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    try:
        statements = [s for s in sqlglot.parse(sql, read="redshift") if s is not None]
    except SqlglotError as exc:
        raise WarehouseError(f"cannot parse the SQL: {sqlglot_error_text(exc)}", code="syntax_error", sql=sql) from exc
    if not statements:
        raise WarehouseError("no SQL statement to run", code="syntax_error", sql=sql)
    if len(statements) > 1:
        raise WarehouseError(f"one statement per query; got {len(statements)}", code="multiple_statements", sql=sql)
    statement = statements[0]
    if not isinstance(statement, exp.Query) or statement.find(exp.Into) is not None:
        kind = statement.key.upper() if statement.key != "select" else "SELECT INTO"
        raise WarehouseError(f"the warehouse is read-only: only a SELECT may run, not {kind}", code="permission", sql=sql)
    try:
        return statement.sql(dialect="duckdb")
    except SqlglotError as exc:
        raise WarehouseError(f"cannot express the SQL in DuckDB: {exc}", code="syntax_error", sql=sql) from exc


_UNDEFINED_COLUMN = re.compile(
    r"Referenced column .* not found|does not have a column named|column .* (does not exist|not found)", re.IGNORECASE
)
_UNDEFINED_TABLE = re.compile(
    r"(Table|View|Schema|Table Function) with name .* does not exist|Referenced table .* not found", re.IGNORECASE
)
_UNDEFINED_FUNCTION = re.compile(r"(Scalar|Aggregate|Macro) Function with name .* does not exist", re.IGNORECASE)
_READ_ONLY = re.compile(r"read-only mode|configuration has been locked", re.IGNORECASE)


def _as_warehouse_error(exc: BaseException, sql: str) -> WarehouseError:
    import duckdb

    message = str(exc)
    if isinstance(exc, duckdb.InterruptException):
        code = "timeout"
    elif isinstance(exc, duckdb.ParserException):
        code = "syntax_error"
    elif isinstance(exc, duckdb.PermissionException) or _READ_ONLY.search(message):
        code = "permission"
    elif isinstance(exc, (duckdb.BinderException, duckdb.CatalogException)):
        if _UNDEFINED_TABLE.search(message):
            code = "undefined_table"
        elif _UNDEFINED_COLUMN.search(message):
            code = "undefined_column"
        elif _UNDEFINED_FUNCTION.search(message):
            code = "undefined_function"
        else:
            code = "database_error"
    elif isinstance(exc, duckdb.Error):
        code = "database_error"
    else:
        return WarehouseError(f"the warehouse failed: {exc!r}", code="database_error", sql=sql)
    return WarehouseError(message, code=code, sql=sql)
