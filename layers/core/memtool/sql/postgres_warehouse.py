"""The PostgreSQL adapter of the warehouse port (psycopg 3): one read-only, time-boxed, row-capped statement per call.

SQL arrives in the Redshift dialect and is transpiled to PostgreSQL with sqlglot, with the few
repairs PostgreSQL needs (``ROUND(double precision, n)`` does not exist there; ``DATE_TRUNC`` of a
DATE is a TIMESTAMP WITH TIME ZONE there but a TIMESTAMP in Redshift). Parameters stay
parameters: ``%s``, ``?`` and ``$n`` placeholders all become psycopg's ``%s`` and the values are
bound by psycopg, never formatted into the text.

Each ``run`` takes a connection from a small pool, runs the statement through a server-side
cursor inside a ``BEGIN READ ONLY`` transaction with ``statement_timeout`` and ``TimeZone`` set
for that transaction only, fetches at most ``max_rows + 1`` rows (the server keeps the rest) and
rolls back. A connection the server dropped is replaced, and a statement that found its pooled
connection dead is run once more on a fresh one (it is read-only: running it again is safe).

psycopg is imported only when a connection is made (the Lambda cold-path rule), and this module is
local-only (layers/core/local-only.txt): psycopg is not shipped to Lambda.
"""

from __future__ import annotations

import functools
import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from memtool.sql.live_schema import (
    MAX_SCHEMA_COLUMNS,
    SCHEMA_TIMEOUT_SECONDS,
    LiveSchema,
    SchemaCache,
    information_schema_sql,
)
from memtool.sql.redshift_warehouse import SQLSTATE_CODES as REDSHIFT_SQLSTATE_CODES
from memtool.sql.warehouse import QueryResult, WarehouseError, json_value, live_schema_of, sqlglot_error_text

# The adapter has no schema setting: it reads what the login's search_path puts first.
SCHEMA_SQL = information_schema_sql("current_schema()")

# SQLSTATE -> WarehouseError.code: Redshift's table (both speak the PostgreSQL protocol), plus what
# only a PostgreSQL server says.
SQLSTATE_CODES: dict[str, str] = {
    **REDSHIFT_SQLSTATE_CODES,
    "57P01": "unavailable",  # admin_shutdown: the backend was terminated
    "57P02": "unavailable",  # crash_shutdown
    "57P03": "unavailable",  # cannot_connect_now: starting up or shutting down
    "53300": "unavailable",  # too_many_connections
    "25001": "read_only",  # active_sql_transaction: e.g. trying to make the transaction read-write
    "0A000": "unsupported",  # feature_not_supported
}
_CONNECTION_CLASS = "08"  # connection_exception and its subclasses

DEFAULT_MAX_CONNECTIONS = 8
DEFAULT_CONNECT_TIMEOUT_SECONDS = 10
# How long a caller waits for a free connection beyond its own statement timeout.
_POOL_WAIT_GRACE_SECONDS = 5.0


class PostgresWarehouse:
    """Runs guarded Redshift-dialect SELECTs on PostgreSQL. Thread-safe: each query has a connection of its own."""

    def __init__(
        self,
        conninfo: str,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        connect_timeout_seconds: int = DEFAULT_CONNECT_TIMEOUT_SECONDS,
        statement_timeout_ms: int | None = None,
        schema_cache_seconds: float = 60.0,
        application_name: str = "memtool",
    ) -> None:
        # statement_timeout_ms, when set, is a ceiling: a caller may ask for less time, never more.
        if statement_timeout_ms is not None and statement_timeout_ms < 1:
            raise ValueError("statement_timeout_ms must be at least 1")
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._conninfo = conninfo
        self._connect_kwargs: dict[str, Any] = {"connect_timeout": connect_timeout_seconds, "application_name": application_name}
        self._statement_timeout_ms = statement_timeout_ms
        self._schema_cache = SchemaCache(schema_cache_seconds)
        self._pool = _ConnectionPool(self._connect, max_connections)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresWarehouse:
        """From ``postgresql://user[:password]@host[:port]/database[?libpq options]`` (or ``postgres://``).

        Nothing connects here: the first query does.
        """
        scheme = url.partition("://")[0].lower()
        if scheme not in ("postgresql", "postgres"):
            raise ValueError("a PostgreSQL URL starts with postgresql:// or postgres://")
        return cls(url, **options)

    @property
    def dialect(self) -> str:
        return "postgres"

    def run(self, sql: str, *, max_rows: int, timeout_seconds: float, params: Sequence[Any] | None = None) -> QueryResult:
        if max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        if timeout_seconds <= 0:
            raise ValueError("timeout_seconds must be positive")
        statement, bound = to_postgres_sql(sql, params)
        return self._execute(statement, sql, bound, max_rows=max_rows, timeout_seconds=timeout_seconds)

    def describe(self, *, refresh: bool = False) -> LiveSchema:
        """The tables and views of the session's current schema (the login's search_path), as the user sees them.

        Read in the same READ ONLY, time-boxed way as a query; kept for ``schema_cache_seconds`` so
        an ask does not read it every time; ``refresh`` reads it again at once.
        """
        return self._schema_cache.get(self._read_live_schema, refresh=refresh)

    def close(self) -> None:
        """Close the idle connections; a later query opens new ones."""
        self._pool.close()

    def _read_live_schema(self) -> LiveSchema:
        # Internal, fixed SQL: it skips the transpiler but keeps the read-only transaction, the
        # timeout and the error classification of generated queries.
        result = self._execute(SCHEMA_SQL, SCHEMA_SQL, None, max_rows=MAX_SCHEMA_COLUMNS, timeout_seconds=SCHEMA_TIMEOUT_SECONDS)
        return live_schema_of(result, SCHEMA_SQL)

    def _connect(self) -> Any:
        import psycopg

        connection = psycopg.connect(self._conninfo, autocommit=False, **self._connect_kwargs)
        # psycopg opens every transaction with BEGIN READ ONLY; the server refuses any write in it.
        connection.read_only = True
        return connection

    def _execute(
        self, statement: str, sql: str, params: list[Any] | None, *, max_rows: int, timeout_seconds: float
    ) -> QueryResult:
        """Run PostgreSQL SQL read-only and time-boxed; ``sql`` is what errors report."""
        timeout_ms = self._timeout_ms(timeout_seconds)
        wait_seconds = timeout_seconds + _POOL_WAIT_GRACE_SECONDS
        for attempt in (1, 2):
            connection, reused = self._pool.acquire(sql, wait_seconds=wait_seconds)
            try:
                return _run_read_only(connection, statement, params, max_rows=max_rows, timeout_ms=timeout_ms)
            except Exception as error:
                if _is_broken(connection) and reused and attempt == 1:
                    continue  # the server dropped a pooled connection while it sat idle: once more, on a new one
                raise to_warehouse_error(error, sql) from error
            finally:
                self._pool.release(connection)
        raise AssertionError("unreachable")  # pragma: no cover

    def _timeout_ms(self, timeout_seconds: float) -> int:
        # statement_timeout 0 means "no timeout", so never send less than 1 ms.
        timeout_ms = max(1, int(math.ceil(timeout_seconds * 1000)))
        if self._statement_timeout_ms is not None:
            timeout_ms = min(timeout_ms, self._statement_timeout_ms)
        return timeout_ms


def _run_read_only(connection: Any, statement: str, params: list[Any] | None, *, max_rows: int, timeout_ms: int) -> QueryResult:
    try:
        # SET LOCAL by another name: set_config(..., true) binds its value and ends with the transaction.
        connection.execute(
            "SELECT set_config('statement_timeout', %s, true), set_config('TimeZone', 'UTC', true), "
        "set_config('extra_float_digits', '1', true)",
        [str(timeout_ms)],
        )
        started = time.perf_counter()
        # A server-side cursor: the server holds the result and sends only the rows fetched.
        with connection.cursor(name=f"memtool_{uuid.uuid4().hex[:12]}") as cursor:
            cursor.execute(statement, params)
            description = cursor.description
            fetched = list(cursor.fetchmany(max_rows + 1)) if description else []
        elapsed_ms = (time.perf_counter() - started) * 1000
    finally:
        if not _is_broken(connection):
            connection.rollback()  # nothing to keep: the transaction was read only
    columns = [column.name for column in description or ()]
    truncated = len(fetched) > max_rows
    rows = [[json_value(value) for value in row] for row in fetched[:max_rows]]
    return QueryResult(columns=columns, rows=rows, row_count=len(rows), truncated=truncated, elapsed_ms=round(elapsed_ms, 3))


def _is_broken(connection: Any) -> bool:
    return bool(connection.closed or connection.broken)


class _ConnectionPool:
    """At most ``size`` open connections; idle ones are kept for the next query, broken ones dropped."""

    def __init__(self, connect: Callable[[], Any], size: int) -> None:
        self._connect = connect
        self._slots = threading.BoundedSemaphore(size)
        self._size = size
        self._lock = threading.Lock()
        self._idle: list[Any] = []

    def acquire(self, sql: str, *, wait_seconds: float) -> tuple[Any, bool]:
        """A connection and whether it was used before; WarehouseError(unavailable) when none can be had."""
        if not self._slots.acquire(timeout=wait_seconds):
            raise WarehouseError(
                f"all {self._size} warehouse connections stayed busy for {wait_seconds:g} s", code="unavailable", sql=sql
            )
        with self._lock:
            while self._idle:
                connection = self._idle.pop()
                if not _is_broken(connection):
                    return connection, True
        try:
            return self._connect(), False
        except Exception as error:
            self._slots.release()
            raise connection_error(error, sql) from error

    def release(self, connection: Any) -> None:
        try:
            if _is_broken(connection):
                _quietly(connection.close)
            else:
                with self._lock:
                    self._idle.append(connection)
        finally:
            self._slots.release()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            _quietly(connection.close)


# --------------------------------------------------------------------------- transpiling


def to_postgres_sql(sql: str, params: Sequence[Any] | None = None) -> tuple[str, list[Any] | None]:
    """One Redshift-dialect read query in PostgreSQL's dialect, with its parameters in psycopg's form.

    Returns the statement and the values to bind, in the order of its ``%s`` placeholders (``$n``
    placeholders may repeat or reorder values). With parameters, a literal ``%`` is doubled for
    psycopg; without, the text goes to the server as it is. Anything but one read query is a
    WarehouseError, before any connection is made.
    """
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
    writes = statement.find(exp.Into, exp.Insert, exp.Update, exp.Delete, exp.Merge)
    if not isinstance(statement, exp.Query) or writes is not None:
        kind = statement.key.upper() if writes is None else ("SELECT INTO" if isinstance(writes, exp.Into) else writes.key.upper())
        raise WarehouseError(f"the warehouse is read-only: only a SELECT may run, not {kind}", code="permission", sql=sql)

    marker = f"memtool_param_{uuid.uuid4().hex}_"
    order: list[str] = []
    if params is not None:
        # Placeholders become markers before the repairs, which may copy an expression (and so a
        # placeholder) more than once; a copy binds the same value as its original.
        statement = statement.transform(lambda node: _mark_placeholder(node, marker, sql))
        order = _positional_order(_generate(statement, sql), marker)
    # Innermost first (reversed breadth-first order), so a repair copies already repaired parts.
    for node in reversed(list(statement.find_all(exp.Round, exp.TimestampTrunc, exp.Extract))):
        repaired = _postgres_repairs(node)
        if repaired is not node:
            node.replace(repaired)
    text = _generate(statement, sql)
    if params is None:
        return text, None
    return _bind_markers(text.replace("%", "%%"), marker, order, list(params), sql)


def _generate(statement: Any, sql: str) -> str:
    from sqlglot.errors import SqlglotError

    try:
        return str(statement.sql(dialect="postgres"))
    except SqlglotError as exc:
        raise WarehouseError(f"cannot express the SQL in PostgreSQL: {exc}", code="syntax_error", sql=sql) from exc


def _postgres_repairs(node: Any) -> Any:
    from sqlglot import exp

    if isinstance(node, exp.Round) and node.args.get("decimals") is not None:
        value = node.this
        if isinstance(value, exp.Cast) and value.to.is_type(exp.DataType.Type.DECIMAL):
            return node  # ROUND(numeric, n) exists in PostgreSQL (and this is the template's own)
        return _round_template().transform(
            lambda part: (value if part.name == "__x" else node.args["decimals"]).copy()
            if isinstance(part, exp.Column) and part.name in ("__x", "__n")
            else part
        )
    if isinstance(node, exp.TimestampTrunc) and not (
        isinstance(node.this, exp.Cast) and node.this.to.is_type(exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ)
    ):
        # Redshift truncates a DATE or TIMESTAMP to a TIMESTAMP; PostgreSQL would promote a DATE to
        # TIMESTAMP WITH TIME ZONE first.
        node.set("this", exp.cast(node.this, exp.DataType.build("TIMESTAMP")))
        return node
    if isinstance(node, exp.Extract):
        # PostgreSQL's EXTRACT is a NUMERIC (2026.0 in JSON); Redshift's and DuckDB's an integer,
        # except the epoch, which has fractions of a second.
        if node.name.upper() == "EPOCH":
            return exp.cast(node, exp.DataType.build("DOUBLE PRECISION"))
        return exp.cast(exp.Trunc(this=node.copy()), exp.DataType.build("BIGINT"))
    return node


# PostgreSQL has ROUND(numeric, int) only: ROUND(double precision, int) does not exist. Only the
# server knows the argument's type, so the statement asks it (pg_typeof). A NUMERIC is rounded as a
# NUMERIC. A DOUBLE PRECISION goes to NUMERIC through its shortest exact text (extra_float_digits
# is 1 in the transaction), not through CAST, which keeps 15 digits only; ties go away from zero.
# That is what DuckDB does to the binary value except in one case: a double whose shortest text is
# a tie but whose binary value is not (2.675 is 2.67499999999999982236431605997495353221893310546875):
# DuckDB gives 2.67, this gives 2.68.
_ROUND_TEMPLATE = (
    "CASE WHEN CAST(PG_TYPEOF(__x) AS TEXT) IN ('double precision', 'real') "
    "THEN CAST(ROUND(CAST(CAST(CAST(__x AS DOUBLE PRECISION) AS TEXT) AS DECIMAL), __n) AS DOUBLE PRECISION) "
    "ELSE ROUND(CAST(__x AS DECIMAL), __n) END"
)


@functools.cache
def _round_template_parsed() -> Any:
    import sqlglot

    return sqlglot.parse_one(_ROUND_TEMPLATE, read="postgres")


def _round_template() -> Any:
    return _round_template_parsed().copy()


def _mark_placeholder(node: Any, marker: str, sql: str) -> Any:
    from sqlglot import exp

    if isinstance(node, exp.Placeholder):
        if node.this:
            raise WarehouseError(
                f"named placeholder {node.sql()!r}: pass values for %s, ? or $1-style placeholders", code="syntax_error", sql=sql
            )
        return exp.var(f"{marker}p{uuid.uuid4().hex[:8]}")
    if isinstance(node, exp.Parameter) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return exp.var(f"{marker}n{node.this.name}")
    return node


def _positional_order(text: str, marker: str) -> list[str]:
    """The ids of the positional placeholders in the order they appear in the statement."""
    return [found.group(1) for found in re.finditer(re.escape(marker) + r"p([0-9a-f]{8})", text)]


def _bind_markers(text: str, marker: str, order: list[str], params: list[Any], sql: str) -> tuple[str, list[Any]]:
    if order and len(order) != len(params):
        raise WarehouseError(
            f"the SQL has {len(order)} placeholders but {len(params)} values were given", code="syntax_error", sql=sql
        )
    position = {uid: index for index, uid in enumerate(order)}
    bound: list[Any] = []
    for found in re.finditer(re.escape(marker) + r"(p[0-9a-f]{8}|n\d+)", text):
        kind = found.group(1)
        index = position[kind[1:]] if kind[0] == "p" else int(kind[1:]) - 1
        if not 0 <= index < len(params):
            raise WarehouseError(f"the SQL refers to value ${index + 1} but {len(params)} were given", code="syntax_error", sql=sql)
        bound.append(params[index])
    return re.sub(re.escape(marker) + r"(p[0-9a-f]{8}|n\d+)", "%s", text), bound


# --------------------------------------------------------------------------- errors


def to_warehouse_error(error: BaseException, sql: str | None = None) -> WarehouseError:
    """A psycopg error as a WarehouseError whose code comes from the SQLSTATE."""
    if isinstance(error, WarehouseError):
        return error
    sqlstate = str(getattr(error, "sqlstate", None) or "")
    diag = getattr(error, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    detail = getattr(diag, "message_detail", None) if diag is not None else None
    if not sqlstate and _is_operational(error):
        return connection_error(error, sql)
    message = primary or one_line(str(error)) or type(error).__name__
    if detail:
        message = f"{message} ({detail})"
    if sqlstate:
        message = f"{message} [SQLSTATE {sqlstate}]"
    code = SQLSTATE_CODES.get(sqlstate) or ("unavailable" if sqlstate.startswith(_CONNECTION_CLASS) else "database_error")
    return WarehouseError(message, code=code, sql=sql)


def connection_error(error: BaseException, sql: str | None = None) -> WarehouseError:
    """A failure to reach the server, as one line; libpq's messages name host and port, never a password."""
    import psycopg

    if isinstance(error, psycopg.Error):
        text = one_line(str(error)) or type(error).__name__
        return WarehouseError(f"The connection to the warehouse failed: {text}", code="unavailable", sql=sql)
    # Anything else may carry the connection string (a bad URL): name only its kind.
    return WarehouseError(f"Could not connect to the warehouse ({type(error).__name__})", code="unavailable", sql=sql)


def one_line(text: str) -> str:
    """libpq's multi-line messages on one line."""
    return " ".join(text.split())


def _is_operational(error: BaseException) -> bool:
    import psycopg

    return isinstance(error, (psycopg.OperationalError, psycopg.InterfaceError))


def _quietly(action: Callable[[], Any]) -> None:
    try:
        action()
    except Exception:  # noqa: BLE001 - cleanup must not hide the result or the error that matters
        pass
