"""The Redshift adapter of the warehouse port: one read-only, time-boxed, row-capped statement per call.

Each ``run`` opens a connection, starts a READ ONLY transaction, sets ``statement_timeout``,
executes the (already guarded) statement with its values bound by the driver, fetches at most
``max_rows + 1`` rows to learn whether the cap cut the result, rolls back and closes. Database
errors become ``WarehouseError`` with a code taken from the SQLSTATE, so the diagnose/repair step
can tell a wrong column from a timeout.

redshift-connector is imported only when a connection is made (Lambda cold path).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from memtool.sql.live_schema import (
    MAX_SCHEMA_COLUMNS,
    SCHEMA_TIMEOUT_SECONDS,
    LiveSchema,
    SchemaCache,
    information_schema_sql,
)
from memtool.sql.warehouse import QueryResult, WarehouseError, json_value, live_schema_of

DEFAULT_PORT = 5439
# The adapter has no schema setting: it reads what the login's search_path puts first.
SCHEMA_SQL = information_schema_sql("current_schema()")

# SQLSTATE -> WarehouseError.code
SQLSTATE_CODES: dict[str, str] = {
    "42601": "syntax_error",
    "42703": "undefined_column",
    "42P01": "undefined_table",
    "42883": "undefined_function",
    "57014": "timeout",  # query_canceled: what statement_timeout raises
    "25006": "read_only",  # read_only_sql_transaction
    "42501": "permission",  # insufficient_privilege
}
_AUTH_SQLSTATES = frozenset({"28000", "28P01"})


class DbApiCursor(Protocol):
    @property
    def description(self) -> Sequence[Sequence[Any]] | None: ...

    def execute(self, operation: str, args: Sequence[Any] | None = None) -> Any: ...

    def fetchmany(self, num: int | None = None) -> Sequence[Sequence[Any]]: ...

    def close(self) -> None: ...


class DbApiConnection(Protocol):
    """The part of a redshift_connector ``Connection`` the adapter uses (DB-API 2.0 plus autocommit)."""

    autocommit: bool

    def cursor(self) -> DbApiCursor: ...

    def rollback(self) -> None: ...

    def close(self) -> None: ...


class RedshiftWarehouse:
    """Runs guarded SELECTs on Redshift through a DB-API connection factory (redshift-connector)."""

    def __init__(
        self,
        connect: Callable[[], DbApiConnection],
        *,
        statement_timeout_ms: int | None = None,
        schema_cache_seconds: float = 60.0,
    ) -> None:
        # statement_timeout_ms, when set, is a ceiling: a caller may ask for less time, never more.
        if statement_timeout_ms is not None and statement_timeout_ms < 1:
            raise ValueError("statement_timeout_ms must be at least 1")
        self._connect = connect
        self._statement_timeout_ms = statement_timeout_ms
        self._schema_cache = SchemaCache(schema_cache_seconds)

    @property
    def dialect(self) -> str:
        return "redshift"

    def run(self, sql: str, *, max_rows: int, timeout_seconds: float, params: Sequence[Any] | None = None) -> QueryResult:
        if max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        timeout_ms = self._timeout_ms(timeout_seconds)
        try:
            connection = self._connect()
        except Exception as error:
            raise _unavailable(error, sql) from error
        try:
            return self._run_read_only(connection, sql, max_rows=max_rows, timeout_ms=timeout_ms, params=params)
        except WarehouseError:
            raise
        except Exception as error:
            raise to_warehouse_error(error, sql) from error
        finally:
            _quietly(connection.rollback)  # nothing to keep: the transaction was read only
            _quietly(connection.close)

    def describe(self, *, refresh: bool = False) -> LiveSchema:
        """The tables and views of the session's current schema (the user's search_path), as the user sees them.

        Read in the same READ ONLY, time-boxed session as a query; kept for ``schema_cache_seconds``
        so an ask does not read it every time; ``refresh`` reads it again at once.
        """
        return self._schema_cache.get(self._read_live_schema, refresh=refresh)

    def _read_live_schema(self) -> LiveSchema:
        result = self.run(SCHEMA_SQL, max_rows=MAX_SCHEMA_COLUMNS, timeout_seconds=SCHEMA_TIMEOUT_SECONDS)
        return live_schema_of(result, SCHEMA_SQL)

    def _run_read_only(
        self, connection: DbApiConnection, sql: str, *, max_rows: int, timeout_ms: int, params: Sequence[Any] | None
    ) -> QueryResult:
        # Autocommit off would make the driver send its own BEGIN first; with it on, our
        # BEGIN READ ONLY opens the transaction and the rollback in ``run`` closes it.
        connection.autocommit = True
        cursor = connection.cursor()
        try:
            cursor.execute("BEGIN READ ONLY")
            cursor.execute(f"SET statement_timeout TO {timeout_ms}")  # an int we computed, not input
            started = time.perf_counter()
            if params is None:
                cursor.execute(sql)
            else:
                cursor.execute(sql, list(params))  # bound by the driver (paramstyle "format": %s)
            description = cursor.description
            fetched = list(cursor.fetchmany(max_rows + 1)) if description else []
            elapsed_ms = (time.perf_counter() - started) * 1000
        finally:
            _quietly(cursor.close)
        columns = [_column_name(entry) for entry in description or ()]
        truncated = len(fetched) > max_rows
        rows = [[json_value(value) for value in row] for row in fetched[:max_rows]]
        return QueryResult(
            columns=columns, rows=rows, row_count=len(rows), truncated=truncated, elapsed_ms=round(elapsed_ms, 3)
        )

    def _timeout_ms(self, timeout_seconds: float) -> int:
        # statement_timeout 0 means "no timeout" to Redshift, so never send less than 1 ms.
        timeout_ms = max(1, int(math.ceil(timeout_seconds * 1000)))
        if self._statement_timeout_ms is not None:
            timeout_ms = min(timeout_ms, self._statement_timeout_ms)
        return timeout_ms


# --------------------------------------------------------------------------- values and errors


def _column_name(entry: Sequence[Any]) -> str:
    name = entry[0]
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)


def error_fields(error: BaseException) -> dict[str, str]:
    """The server's ErrorResponse fields (S, C, M, D, H, ...) redshift_connector puts in ``args[0]``."""
    first = error.args[0] if error.args else None
    return {str(k): str(v) for k, v in first.items()} if isinstance(first, Mapping) else {}


def to_warehouse_error(error: BaseException, sql: str | None = None) -> WarehouseError:
    fields = error_fields(error)
    sqlstate = fields.get("C", "")
    if not fields and _is_driver_interface_error(error):
        return WarehouseError(f"The connection to the warehouse failed: {error}", code="unavailable", sql=sql)
    message = fields.get("M") or str(error) or type(error).__name__
    if fields.get("D"):
        message = f"{message} ({fields['D']})"
    if sqlstate:
        message = f"{message} [SQLSTATE {sqlstate}]"
    return WarehouseError(message, code=SQLSTATE_CODES.get(sqlstate, "database_error"), sql=sql)


def _unavailable(error: BaseException, sql: str) -> WarehouseError:
    # Only the server's message, never str() of arbitrary errors: those could carry connect arguments.
    known = error_fields(error).get("M") or (str(error) if isinstance(error, SecretFormatError) else None)
    detail = f": {known}" if known else f" ({type(error).__name__})"
    return WarehouseError(f"Could not connect to the warehouse{detail}", code="unavailable", sql=sql)


def _is_driver_interface_error(error: BaseException) -> bool:
    try:
        from redshift_connector import InterfaceError, OperationalError
    except ImportError:  # pragma: no cover - redshift-connector is a dependency
        return False
    return isinstance(error, (InterfaceError, OperationalError))


def _quietly(action: Callable[[], Any]) -> None:
    try:
        action()
    except Exception:  # noqa: BLE001 - cleanup must not hide the result or the error that matters
        pass


# --------------------------------------------------------------------------- Secrets Manager


class SecretFormatError(ValueError):
    """The secret is missing a field or is not JSON; the message names the field, never a value."""


@dataclass(frozen=True)
class RedshiftCredentials:
    host: str
    port: int
    database: str
    user: str
    password: str = field(repr=False)

    @classmethod
    def from_secret_string(cls, secret_string: str) -> RedshiftCredentials:
        """Read the JSON Redshift and RDS secrets hold: host, port, dbname, username, password."""
        try:
            data = json.loads(secret_string)
        except (TypeError, ValueError):
            raise SecretFormatError("the warehouse secret is not a JSON object") from None
        if not isinstance(data, dict):
            raise SecretFormatError("the warehouse secret is not a JSON object")

        def pick(*names: str, default: Any = None) -> Any:
            for name in names:
                if data.get(name) not in (None, ""):
                    return data[name]
            if default is None:
                raise SecretFormatError(f"the warehouse secret has no {names[0]}")
            return default

        try:
            port = int(pick("port", default=DEFAULT_PORT))
        except (TypeError, ValueError):
            raise SecretFormatError("the warehouse secret has a port that is not a number") from None
        return cls(
            host=str(pick("host")),
            port=port,
            database=str(pick("dbname", "database")),
            user=str(pick("username", "user")),
            password=str(pick("password")),
        )


class SecretCredentials:
    """Credentials from one Secrets Manager secret, fetched once and kept until told they are stale."""

    def __init__(self, secret_arn: str, secretsmanager_client: Any) -> None:
        self._secret_arn = secret_arn
        self._client = secretsmanager_client
        self._cached: RedshiftCredentials | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SecretCredentials({self._secret_arn!r}, cached={self._cached is not None})"

    def get(self) -> RedshiftCredentials:
        with self._lock:
            if self._cached is None:
                response = self._client.get_secret_value(SecretId=self._secret_arn)
                self._cached = RedshiftCredentials.from_secret_string(response["SecretString"])
            return self._cached

    def invalidate(self) -> None:
        """Forget the cached value, e.g. after the password was rotated."""
        with self._lock:
            self._cached = None


def redshift_from_secret(
    secret_arn: str,
    secretsmanager_client: Any,
    *,
    statement_timeout_ms: int | None = None,
    connect_timeout_seconds: int = 10,
    application_name: str = "memtool",
    schema_cache_seconds: float = 60.0,
) -> RedshiftWarehouse:
    """A RedshiftWarehouse that connects with the credentials in ``secret_arn``.

    The secret is read on the first query, not here, and cached; when Redshift refuses the login
    (the password was rotated), it is read again once.
    """
    credentials = SecretCredentials(secret_arn, secretsmanager_client)

    def connect() -> DbApiConnection:
        import redshift_connector

        for attempt in (1, 2):
            current = credentials.get()
            try:
                return redshift_connector.connect(
                    host=current.host,
                    port=current.port,
                    database=current.database,
                    user=current.user,
                    password=current.password,
                    ssl=True,
                    timeout=connect_timeout_seconds,
                    application_name=application_name,
                )
            except redshift_connector.Error as error:
                if attempt == 1 and error_fields(error).get("C") in _AUTH_SQLSTATES:
                    credentials.invalidate()
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    return RedshiftWarehouse(
        connect, statement_timeout_ms=statement_timeout_ms, schema_cache_seconds=schema_cache_seconds
    )
