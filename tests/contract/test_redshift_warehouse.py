"""Contract tests for RedshiftWarehouse and redshift_from_secret.

There is no live cluster here. ``ScriptedConnection`` is a scripted double of redshift_connector's
DB-API surface (``Connection.autocommit/cursor/rollback/close``, ``Cursor.execute/description/
fetchmany/close``): it records every call in order and answers with scripted descriptions, rows
and errors. The errors are the real ``redshift_connector.error`` classes built the way the driver
builds them from a server ErrorResponse (``ProgrammingError({'S': ..., 'C': sqlstate, 'M': ...})``,
see ``Connection.handle_ERROR_RESPONSE``). Secrets Manager is a real boto3 client with fake
credentials under a botocore ``Stubber``: requests are validated against the service model and
nothing leaves the process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import boto3
import pytest
import redshift_connector
from botocore.stub import Stubber
from memtool.sql.live_schema import MAX_SCHEMA_COLUMNS, LiveSchema
from memtool.sql.redshift_warehouse import (
    SCHEMA_SQL,
    RedshiftCredentials,
    RedshiftWarehouse,
    redshift_from_secret,
)
from memtool.sql.warehouse import QueryResult, WarehouseError
from redshift_connector.error import InterfaceError, ProgrammingError

QUERY = (
    "SELECT r.city, SUM(f.gross_amount) AS gross FROM fact_order_line AS f "
    "JOIN dim_region AS r ON r.region_id = f.region_id WHERE r.region_name = %s AND f.channel_id = %s "
    "GROUP BY r.city LIMIT 1000"
)
SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:memtool/redshift-AbCdEf"
PASSWORD = "s3cr3t-Pa55word!"

# --------------------------------------------------------------------------- the scripted double


def described(*names: str) -> list[tuple[Any, ...]]:
    """A cursor.description as redshift_connector fills it: (name, type_oid, None, None, None, None, None)."""
    return [(name, 1043, None, None, None, None, None) for name in names]


def server_error(sqlstate: str, message: str, *, severity: str = "ERROR") -> ProgrammingError:
    return ProgrammingError({"S": severity, "V": severity, "C": sqlstate, "M": message, "F": "scripted.c", "L": "1"})


@dataclass
class ScriptedResult:
    description: list[tuple[Any, ...]] | None = None
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    error: Exception | None = None


@dataclass
class ScriptedConnection:
    """Answers each statement from ``script`` (first key the SQL starts with); records every call."""

    script: dict[str, ScriptedResult] = field(default_factory=dict)
    rollback_error: Exception | None = None
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    _autocommit: bool = False

    @property
    def autocommit(self) -> bool:
        return self._autocommit

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        self.calls.append(("autocommit", value))
        self._autocommit = value

    def cursor(self) -> ScriptedCursor:
        return ScriptedCursor(self)

    def rollback(self) -> None:
        self.calls.append(("rollback",))
        if self.rollback_error is not None:
            raise self.rollback_error

    def close(self) -> None:
        self.calls.append(("close",))

    def answer(self, operation: str) -> ScriptedResult:
        for prefix, result in self.script.items():
            if operation.startswith(prefix):
                return result
        return ScriptedResult()

    @property
    def executed(self) -> list[tuple[str, Any]]:
        return [(c[1], c[2]) for c in self.calls if c[0] == "execute"]


class ScriptedCursor:
    def __init__(self, connection: ScriptedConnection) -> None:
        self._connection = connection
        self.description: list[tuple[Any, ...]] | None = None
        self._rows: list[tuple[Any, ...]] = []

    def execute(self, operation: str, args: Sequence[Any] | None = None) -> ScriptedCursor:
        self._connection.calls.append(("execute", operation, args))
        result = self._connection.answer(operation)
        if result.error is not None:
            raise result.error
        self.description = result.description
        self._rows = list(result.rows)
        return self

    def fetchmany(self, num: int | None = None) -> tuple[tuple[Any, ...], ...]:
        self._connection.calls.append(("fetchmany", num))
        taken, self._rows = self._rows[: num or 1], self._rows[num or 1 :]
        return tuple(taken)

    def fetchall(self) -> tuple[tuple[Any, ...], ...]:  # pragma: no cover - the adapter must never call it
        raise AssertionError("fetchall would read past the row cap")

    def close(self) -> None:
        self._connection.calls.append(("cursor.close",))


@dataclass
class ScriptedDriver:
    """The ``connect`` callable: hands out fresh scripted connections and keeps them for asserts."""

    script: dict[str, ScriptedResult] = field(default_factory=dict)
    connections: list[ScriptedConnection] = field(default_factory=list)

    def __call__(self) -> ScriptedConnection:
        connection = ScriptedConnection(dict(self.script))
        self.connections.append(connection)
        return connection

    @property
    def last(self) -> ScriptedConnection:
        return self.connections[-1]


CITY_ROWS = [("上海", Decimal("1200.50")), ("杭州", Decimal("830.00")), ("南京", Decimal("99.99"))]


@pytest.fixture
def driver() -> ScriptedDriver:
    return ScriptedDriver({"SELECT": ScriptedResult(described("city", "gross"), CITY_ROWS)})


@pytest.fixture
def warehouse(driver: ScriptedDriver) -> RedshiftWarehouse:
    return RedshiftWarehouse(driver)


# --------------------------------------------------------------------------- the session


def test_runs_one_read_only_time_boxed_statement_and_cleans_up(driver: ScriptedDriver, warehouse: RedshiftWarehouse) -> None:
    result = warehouse.run(QUERY, max_rows=10, timeout_seconds=30, params=["华东", 3])

    assert driver.last.calls == [
        ("autocommit", True),
        ("execute", "BEGIN READ ONLY", None),
        ("execute", "SET statement_timeout TO 30000", None),
        ("execute", QUERY, ["华东", 3]),
        ("fetchmany", 11),
        ("cursor.close",),
        ("rollback",),
        ("close",),
    ]
    assert result.columns == ["city", "gross"]
    assert result.rows == [["上海", 1200.5], ["杭州", 830.0], ["南京", 99.99]]
    assert result.row_count == 3 and result.truncated is False
    assert result.elapsed_ms >= 0
    assert warehouse.dialect == "redshift"


def test_values_are_bound_by_the_driver_never_formatted_into_the_sql(
    driver: ScriptedDriver, warehouse: RedshiftWarehouse
) -> None:
    hostile = "x'; DROP TABLE fact_refund; --"

    warehouse.run(QUERY, max_rows=5, timeout_seconds=5, params=(hostile, 1))

    statement, params = driver.last.executed[2]
    assert statement == QUERY
    assert params == [hostile, 1]
    assert all(hostile not in sql for sql, _ in driver.last.executed)


def test_without_params_the_statement_is_sent_alone(driver: ScriptedDriver, warehouse: RedshiftWarehouse) -> None:
    warehouse.run("SELECT city FROM dim_region LIMIT 1000", max_rows=5, timeout_seconds=5)

    assert driver.last.executed[2] == ("SELECT city FROM dim_region LIMIT 1000", None)


@pytest.mark.parametrize(
    ("timeout_seconds", "ceiling_ms", "expected"),
    [(30, None, "SET statement_timeout TO 30000"), (2.5, None, "SET statement_timeout TO 2500"),
     (30, 8000, "SET statement_timeout TO 8000"), (0.0001, None, "SET statement_timeout TO 1")],
)  # fmt: skip
def test_statement_timeout_follows_the_call_under_the_ceiling(
    driver: ScriptedDriver, timeout_seconds: float, ceiling_ms: int | None, expected: str
) -> None:
    RedshiftWarehouse(driver, statement_timeout_ms=ceiling_ms).run(QUERY, max_rows=1, timeout_seconds=timeout_seconds)

    assert driver.last.executed[1] == (expected, None)


def test_row_cap_fetches_one_extra_row_to_flag_truncation() -> None:
    rows = [(i,) for i in range(25)]
    driver = ScriptedDriver({"SELECT": ScriptedResult(described("n"), rows)})
    warehouse = RedshiftWarehouse(driver)

    capped = warehouse.run("SELECT n FROM t", max_rows=10, timeout_seconds=5)
    exact = warehouse.run("SELECT n FROM t", max_rows=25, timeout_seconds=5)

    assert ("fetchmany", 11) in driver.connections[0].calls
    assert capped.rows == [[i] for i in range(10)]
    assert capped.row_count == 10 and capped.truncated is True
    assert ("fetchmany", 26) in driver.connections[1].calls
    assert exact.row_count == 25 and exact.truncated is False


def test_values_become_json_friendly() -> None:
    row = (
        Decimal("12345.67"),
        Decimal("NaN"),
        date(2026, 11, 1),
        datetime(2026, 11, 1, 8, 30, 5),
        datetime(2026, 11, 1, 8, 30, tzinfo=UTC),
        time(9, 15),
        timedelta(hours=1, seconds=30),
        True,
        None,
        7,
        float("inf"),
        "电商",
        b"\x01\xff",
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
    )
    driver = ScriptedDriver({"SELECT": ScriptedResult(described(*[f"c{i}" for i in range(len(row))]), [row])})

    result = RedshiftWarehouse(driver).run("SELECT 1", max_rows=5, timeout_seconds=5)

    assert result.rows == [
        [
            12345.67,
            None,
            "2026-11-01",
            "2026-11-01T08:30:05",
            "2026-11-01T08:30:00+00:00",
            "09:15:00",
            3630.0,
            True,
            None,
            7,
            None,
            "电商",
            "01ff",
            "12345678-1234-5678-1234-567812345678",
        ]
    ]
    assert json.loads(json.dumps(result.rows, allow_nan=False)) == result.rows
    assert isinstance(result, QueryResult)


def test_a_statement_without_result_set_returns_no_rows() -> None:
    driver = ScriptedDriver({"SELECT": ScriptedResult(None, [])})

    result = RedshiftWarehouse(driver).run("SELECT 1", max_rows=5, timeout_seconds=5)

    assert result.columns == [] and result.rows == [] and result.truncated is False
    assert not any(call[0] == "fetchmany" for call in driver.last.calls)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("sqlstate", "message", "code"),
    [
        ("42601", 'syntax error at or near "FORM"', "syntax_error"),
        ("42703", 'column "x" does not exist', "undefined_column"),
        ("42P01", 'relation "fact_orders" does not exist', "undefined_table"),
        ("42883", "function datetrunc(unknown, timestamp) does not exist", "undefined_function"),
        ("57014", "Query (12345) cancelled on user's request", "timeout"),
        ("25006", "cannot execute DELETE in a read-only transaction", "read_only"),
        ("42501", "permission denied for relation fact_refund", "permission"),
        ("22012", "division by zero", "database_error"),
        ("XX000", "Assert", "database_error"),
    ],
)
def test_sqlstate_maps_to_a_warehouse_error_code(sqlstate: str, message: str, code: str) -> None:
    driver = ScriptedDriver({"SELECT": ScriptedResult(error=server_error(sqlstate, message))})

    with pytest.raises(WarehouseError) as raised:
        RedshiftWarehouse(driver).run(QUERY, max_rows=5, timeout_seconds=5, params=["华东", 1])

    assert raised.value.code == code
    assert message in str(raised.value) and sqlstate in str(raised.value)
    assert raised.value.sql == QUERY
    assert isinstance(raised.value.__cause__, ProgrammingError)
    assert driver.last.calls[-3:] == [("cursor.close",), ("rollback",), ("close",)]


def test_server_detail_is_kept_in_the_message() -> None:
    error = ProgrammingError({"S": "ERROR", "C": "42703", "M": 'column "qty2" does not exist', "D": "did you mean qty"})
    driver = ScriptedDriver({"SELECT": ScriptedResult(error=error)})

    with pytest.raises(WarehouseError, match="did you mean qty"):
        RedshiftWarehouse(driver).run(QUERY, max_rows=5, timeout_seconds=5)


def test_a_failure_before_the_query_still_closes_the_connection() -> None:
    driver = ScriptedDriver({"BEGIN": ScriptedResult(error=InterfaceError("connection is closed"))})

    with pytest.raises(WarehouseError) as raised:
        RedshiftWarehouse(driver).run(QUERY, max_rows=5, timeout_seconds=5)

    assert raised.value.code == "unavailable"
    assert driver.last.executed == [("BEGIN READ ONLY", None)]
    assert driver.last.calls[-2:] == [("rollback",), ("close",)]


def test_a_failing_rollback_neither_hides_the_result_nor_skips_close(driver: ScriptedDriver) -> None:
    def connect() -> ScriptedConnection:
        connection = driver()
        connection.rollback_error = InterfaceError("connection is closed")
        return connection

    result = RedshiftWarehouse(connect).run(QUERY, max_rows=5, timeout_seconds=5)

    assert result.row_count == 3
    assert driver.last.calls[-2:] == [("rollback",), ("close",)]


def test_a_connect_failure_is_unavailable() -> None:
    def refuse() -> ScriptedConnection:
        raise InterfaceError({"S": "FATAL", "C": "28000", "M": 'password authentication failed for user "memtool"'})

    with pytest.raises(WarehouseError) as raised:
        RedshiftWarehouse(refuse).run(QUERY, max_rows=5, timeout_seconds=5)

    assert raised.value.code == "unavailable"
    assert "password authentication failed" in str(raised.value)


@pytest.mark.parametrize("bad", [{"max_rows": 0, "timeout_seconds": 5}])
def test_nonsense_caps_are_refused_before_connecting(driver: ScriptedDriver, bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RedshiftWarehouse(driver).run(QUERY, **bad)
    assert driver.connections == []


# --------------------------------------------------------------------------- live schema

# information_schema.columns as Redshift answers it: PostgreSQL type names, numeric without scale.
SCHEMA_ROWS = [
    ("dim_sales_channel", "channel_id", "integer"),
    ("dim_sales_channel", "channel_name", "character varying"),
    ("fact_order_line", "order_id", "bigint"),
    ("fact_order_line", "order_date", "date"),
    ("fact_order_line", "paid_at", "timestamp without time zone"),
    ("fact_order_line", "gross_amt", "numeric"),
    ("fact_order_line", "is_test", "boolean"),
    ("v_daily_sales", "sales_day", "date"),
]
SCHEMA_QUERY = (
    "SELECT table_name, column_name, data_type FROM information_schema.columns "
    "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
)


@pytest.fixture
def schema_driver() -> ScriptedDriver:
    return ScriptedDriver(
        {"SELECT table_name": ScriptedResult(described("table_name", "column_name", "data_type"), SCHEMA_ROWS)}
    )


def test_describe_reads_information_schema_in_a_read_only_time_boxed_session(schema_driver: ScriptedDriver) -> None:
    schema = RedshiftWarehouse(schema_driver).describe()

    assert schema_driver.last.calls == [
        ("autocommit", True),
        ("execute", "BEGIN READ ONLY", None),
        ("execute", "SET statement_timeout TO 10000", None),
        ("execute", SCHEMA_QUERY, None),
        ("fetchmany", MAX_SCHEMA_COLUMNS + 1),
        ("cursor.close",),
        ("rollback",),
        ("close",),
    ]
    assert SCHEMA_QUERY == SCHEMA_SQL
    assert isinstance(schema, LiveSchema)
    assert schema.columns_of("fact_order_line") == ("order_id", "order_date", "paid_at", "gross_amt", "is_test")
    assert schema.type_of("fact_order_line", "paid_at") == "TIMESTAMP WITHOUT TIME ZONE"
    assert schema.type_of("fact_order_line", "gross_amt") == "NUMERIC"
    assert schema.time_columns("fact_order_line") == ("order_date", "paid_at")
    assert schema.boolean_columns("fact_order_line") == ("is_test",)
    assert schema.has_table("v_daily_sales") and not schema.has_table("dim_channel")
    assert not schema.has_column("fact_order_line", "gross_amount")


def test_describe_is_cached_until_refresh(schema_driver: ScriptedDriver) -> None:
    warehouse = RedshiftWarehouse(schema_driver)

    first = warehouse.describe()
    again = warehouse.describe()
    assert len(schema_driver.connections) == 1
    assert again is first

    refreshed = warehouse.describe(refresh=True)
    assert len(schema_driver.connections) == 2
    assert refreshed == first


def test_describe_without_a_cache_reads_every_time(schema_driver: ScriptedDriver) -> None:
    warehouse = RedshiftWarehouse(schema_driver, schema_cache_seconds=0)

    warehouse.describe()
    warehouse.describe()

    assert len(schema_driver.connections) == 2


def test_describe_keeps_under_the_statement_timeout_ceiling(schema_driver: ScriptedDriver) -> None:
    RedshiftWarehouse(schema_driver, statement_timeout_ms=2500).describe()

    assert schema_driver.last.executed[1] == ("SET statement_timeout TO 2500", None)


def test_describe_failure_is_a_warehouse_error_and_is_not_cached() -> None:
    driver = ScriptedDriver(
        {"SELECT table_name": ScriptedResult(error=server_error("42501", "permission denied for schema analytics"))}
    )
    warehouse = RedshiftWarehouse(driver)

    with pytest.raises(WarehouseError) as raised:
        warehouse.describe()

    assert raised.value.code == "permission"
    assert raised.value.sql == SCHEMA_QUERY
    assert driver.last.calls[-2:] == [("rollback",), ("close",)]
    driver.script["SELECT table_name"] = ScriptedResult(described("table_name", "column_name", "data_type"), SCHEMA_ROWS)
    assert warehouse.describe().has_table("fact_order_line")
    assert len(driver.connections) == 2


# --------------------------------------------------------------------------- Secrets Manager


def secret_payload(**overrides: Any) -> dict[str, Any]:
    """The shape Redshift's managed secrets have (RDS secrets use the same keys)."""
    payload = {
        "engine": "redshift",
        "host": "memtool-demo.abc123xyz.us-east-1.redshift.amazonaws.com",
        "port": 5439,
        "dbClusterIdentifier": "memtool-demo",
        "dbname": "dev",
        "username": "memtool_reader",
        "password": PASSWORD,
    }
    payload.update(overrides)
    return {k: v for k, v in payload.items() if v is not None}


def secret_response(payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "ARN": SECRET_ARN,
        "Name": "memtool/redshift",
        "VersionId": str(uuid.uuid4()),
        "SecretString": json.dumps(payload),
        "VersionStages": ["AWSCURRENT"],
        "CreatedDate": datetime(2026, 11, 1, tzinfo=UTC),
    }


@dataclass
class StubbedSecrets:
    client: Any
    stubber: Stubber

    def will_return(self, payload: dict[str, Any]) -> None:
        self.stubber.add_response("get_secret_value", secret_response(payload), {"SecretId": SECRET_ARN})


@pytest.fixture
def secrets() -> Iterator[StubbedSecrets]:
    client = boto3.client(
        "secretsmanager", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    with Stubber(client) as stubber:
        yield StubbedSecrets(client, stubber)
        stubber.assert_no_pending_responses()


@dataclass
class RecordingConnect:
    """Stands in for ``redshift_connector.connect``: records keyword arguments, may refuse logins."""

    driver: ScriptedDriver
    refuse_password: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, **kwargs: Any) -> ScriptedConnection:
        self.calls.append(kwargs)
        if kwargs["password"] == self.refuse_password:
            message = f'password authentication failed for user "{kwargs["user"]}"'
            raise InterfaceError({"S": "FATAL", "C": "28000", "M": message})
        return self.driver()


@pytest.fixture
def recording_connect(monkeypatch: pytest.MonkeyPatch, driver: ScriptedDriver) -> RecordingConnect:
    recorder = RecordingConnect(driver)
    monkeypatch.setattr(redshift_connector, "connect", recorder)
    return recorder


def test_secret_is_read_once_and_feeds_the_connection(secrets: StubbedSecrets, recording_connect: RecordingConnect) -> None:
    secrets.will_return(secret_payload(port="5439"))
    warehouse = redshift_from_secret(SECRET_ARN, secrets.client, statement_timeout_ms=60_000)

    first = warehouse.run(QUERY, max_rows=5, timeout_seconds=5, params=["华东", 1])
    second = warehouse.run(QUERY, max_rows=5, timeout_seconds=5, params=["华北", 2])

    assert first.row_count == second.row_count == 3
    assert recording_connect.calls == [
        {
            "host": "memtool-demo.abc123xyz.us-east-1.redshift.amazonaws.com",
            "port": 5439,
            "database": "dev",
            "user": "memtool_reader",
            "password": PASSWORD,
            "ssl": True,
            "timeout": 10,
            "application_name": "memtool",
        }
    ] * 2
    # the stub held one response: a second GetSecretValue would have raised instead of connecting


def test_secret_is_not_read_until_the_first_query(secrets: StubbedSecrets) -> None:
    warehouse = redshift_from_secret(SECRET_ARN, secrets.client)

    assert warehouse.dialect == "redshift"  # no stubbed response was needed


def test_a_rotated_password_is_fetched_again_once(secrets: StubbedSecrets, recording_connect: RecordingConnect) -> None:
    recording_connect.refuse_password = "old-password"
    secrets.will_return(secret_payload(password="old-password"))
    secrets.will_return(secret_payload(password=PASSWORD))
    warehouse = redshift_from_secret(SECRET_ARN, secrets.client)

    result = warehouse.run(QUERY, max_rows=5, timeout_seconds=5)

    assert result.row_count == 3
    assert [call["password"] for call in recording_connect.calls] == ["old-password", PASSWORD]


def test_user_and_database_keys_are_accepted_and_port_defaults(
    secrets: StubbedSecrets, recording_connect: RecordingConnect
) -> None:
    payload = secret_payload(port=None, username=None, dbname=None)
    payload.update({"user": "analyst", "database": "warehouse"})
    secrets.will_return(payload)

    redshift_from_secret(SECRET_ARN, secrets.client).run(QUERY, max_rows=5, timeout_seconds=5)

    assert recording_connect.calls[0]["user"] == "analyst"
    assert recording_connect.calls[0]["database"] == "warehouse"
    assert recording_connect.calls[0]["port"] == 5439


def test_an_incomplete_secret_is_reported_without_its_contents(
    secrets: StubbedSecrets, recording_connect: RecordingConnect
) -> None:
    secrets.will_return(secret_payload(host=None))

    with pytest.raises(WarehouseError) as raised:
        redshift_from_secret(SECRET_ARN, secrets.client).run(QUERY, max_rows=5, timeout_seconds=5)

    assert raised.value.code == "unavailable"
    assert str(raised.value) == "Could not connect to the warehouse: the warehouse secret has no host"
    assert PASSWORD not in str(raised.value)
    assert recording_connect.calls == []


def test_a_secrets_manager_error_is_unavailable(secrets: StubbedSecrets) -> None:
    secrets.stubber.add_client_error("get_secret_value", "ResourceNotFoundException", "Secrets Manager can't find the secret.")

    with pytest.raises(WarehouseError) as raised:
        redshift_from_secret(SECRET_ARN, secrets.client).run(QUERY, max_rows=5, timeout_seconds=5)

    assert raised.value.code == "unavailable"


def test_credentials_never_show_the_password() -> None:
    credentials = RedshiftCredentials.from_secret_string(json.dumps(secret_payload()))

    assert credentials.password == PASSWORD
    assert PASSWORD not in repr(credentials)
    with pytest.raises(ValueError, match="not a JSON object") as raised:
        RedshiftCredentials.from_secret_string(f"password={PASSWORD}")
    assert PASSWORD not in str(raised.value)


def test_redshift_connector_is_imported_only_when_connecting() -> None:
    code = "import sys, memtool.sql.redshift_warehouse; print('redshift_connector' in sys.modules)"

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()

    assert out == "False"
