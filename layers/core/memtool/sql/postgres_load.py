"""Load a DuckDB warehouse file into PostgreSQL: every base table, same names, mapped types, all rows.

One transaction: the tables are (re)created and filled with COPY, batch by batch, and committed
together, so a failure leaves the target as it was. Nothing here knows a dataset: it copies what
the DuckDB file's ``main`` schema holds into the target's current schema.

duckdb and psycopg are imported only when called; the module is local-only (the CLI uses it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BATCH_ROWS = 20_000
PROBE_TIMEOUT_SECONDS = 5

# DuckDB type (as information_schema spells it) -> PostgreSQL type; DECIMAL(p,s) is handled apart.
_TYPES: dict[str, str] = {
    "BOOLEAN": "BOOLEAN",
    "TINYINT": "SMALLINT",
    "SMALLINT": "SMALLINT",
    "INTEGER": "INTEGER",
    "BIGINT": "BIGINT",
    "HUGEINT": "NUMERIC(39,0)",
    "UTINYINT": "SMALLINT",
    "USMALLINT": "INTEGER",
    "UINTEGER": "BIGINT",
    "UBIGINT": "NUMERIC(20,0)",
    "FLOAT": "REAL",
    "DOUBLE": "DOUBLE PRECISION",
    "VARCHAR": "VARCHAR",
    "DATE": "DATE",
    "TIME": "TIME",
    "TIMESTAMP": "TIMESTAMP",
    "TIMESTAMP_S": "TIMESTAMP",
    "TIMESTAMP_MS": "TIMESTAMP",
    "TIMESTAMP_NS": "TIMESTAMP",
    "TIMESTAMP WITH TIME ZONE": "TIMESTAMPTZ",
    "INTERVAL": "INTERVAL",
    "BLOB": "BYTEA",
    "UUID": "UUID",
}
_DECIMAL = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")
_VARCHAR = re.compile(r"VARCHAR\(\d+\)")


@dataclass(frozen=True)
class SourceColumn:
    name: str
    duckdb_type: str
    nullable: bool

    @property
    def postgres_type(self) -> str:
        found = _DECIMAL.fullmatch(self.duckdb_type)
        if found:
            return f"NUMERIC({found.group(1)},{found.group(2)})"
        if _VARCHAR.fullmatch(self.duckdb_type):
            return "VARCHAR"
        mapped = _TYPES.get(self.duckdb_type)
        if mapped is None:
            raise ValueError(f"column {self.name!r} has the DuckDB type {self.duckdb_type}, which has no PostgreSQL mapping here")
        return mapped


def copy_duckdb_into_postgres(
    source: Path, url: str, *, replace: bool = True, progress: Callable[[str], None] | None = None
) -> dict[str, int]:
    """Copy every base table of the DuckDB file ``source`` into the database at ``url``; row counts per table.

    With ``replace`` a table of the same name in the target is dropped first; without, it is an
    error. Any failure rolls the whole load back and raises WarehouseError (code ``unavailable``
    when the server cannot be reached).
    """
    import duckdb
    import psycopg
    from psycopg import sql

    from memtool.sql.postgres_warehouse import connection_error, to_warehouse_error

    source = Path(source)
    if not source.exists():
        raise FileNotFoundError(f"no DuckDB file at {source}")
    report = progress or (lambda _line: None)
    duck = duckdb.connect(str(source), read_only=True)
    try:
        tables = _source_tables(duck)
        try:
            target = psycopg.connect(url, autocommit=False, connect_timeout=PROBE_TIMEOUT_SECONDS * 2)
        except psycopg.Error as error:
            raise connection_error(error) from error
        counts: dict[str, int] = {}
        try:
            with target.transaction():
                for table, columns in tables.items():
                    _create_table(target, sql, table, columns, replace=replace)
                    counts[table] = _copy_rows(duck, target, sql, table, columns)
                    report(f"{table}: {counts[table]:,} rows")
                with target.cursor() as cursor:
                    # The source's primary keys, added once the rows are in (faster than row by row), so
                    # `memtool model init` on the copy reads the same keys as on the DuckDB file.
                    for table, key in _primary_keys(duck).items():
                        if table in tables:
                            cursor.execute(
                                sql.SQL("ALTER TABLE {} ADD PRIMARY KEY ({})").format(
                                    sql.Identifier(table), sql.SQL(", ").join(sql.Identifier(c) for c in key)
                                )
                            )
                    for table in tables:
                        cursor.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
        except psycopg.Error as error:
            raise to_warehouse_error(error) from error
        finally:
            target.close()
    finally:
        duck.close()
    return counts


def probe_postgres(url: str, *, timeout_seconds: int = PROBE_TIMEOUT_SECONDS) -> None:
    """Connect and disconnect; WarehouseError(code="unavailable") with libpq's reason when that fails."""
    import psycopg

    from memtool.sql.postgres_warehouse import connection_error

    try:
        with psycopg.connect(url, connect_timeout=timeout_seconds, autocommit=True) as connection:
            connection.execute("SELECT 1")
    except psycopg.Error as error:
        raise connection_error(error) from error


def _source_tables(duck: Any) -> dict[str, list[SourceColumn]]:
    rows = duck.execute(
        "SELECT c.table_name, c.column_name, c.data_type, c.is_nullable "
        "FROM information_schema.columns c JOIN information_schema.tables t "
        "ON t.table_catalog = c.table_catalog AND t.table_schema = c.table_schema AND t.table_name = c.table_name "
        "WHERE c.table_catalog = current_database() AND c.table_schema = current_schema() AND t.table_type = 'BASE TABLE' "
        "ORDER BY c.table_name, c.ordinal_position"
    ).fetchall()
    tables: dict[str, list[SourceColumn]] = {}
    for table, column, data_type, nullable in rows:
        tables.setdefault(str(table), []).append(SourceColumn(str(column), str(data_type).upper(), nullable == "YES"))
    if not tables:
        raise ValueError("the DuckDB file has no tables to copy")
    for table, columns in tables.items():  # every type mapped before anything is written
        for column in columns:
            try:
                column.postgres_type  # noqa: B018 - raises for an unmapped type
            except ValueError as unmapped:
                raise ValueError(f"table {table!r}: {unmapped}") from None
    return tables


def _primary_keys(duck: Any) -> dict[str, list[str]]:
    """table -> its primary key's columns, as the DuckDB file declares them (main schema)."""
    rows = duck.execute(
        "SELECT table_name, constraint_column_names FROM duckdb_constraints() "
        "WHERE constraint_type = 'PRIMARY KEY' AND schema_name = 'main'"
    ).fetchall()
    return {str(table): [str(c) for c in columns] for table, columns in rows}


def _create_table(target: Any, sql: Any, table: str, columns: Sequence[SourceColumn], *, replace: bool) -> None:
    definitions = sql.SQL(", ").join(
        sql.SQL("{} {}{}").format(
            sql.Identifier(column.name),
            sql.SQL(column.postgres_type),  # from our own table of type names, never from input
            sql.SQL("" if column.nullable else " NOT NULL"),
        )
        for column in columns
    )
    with target.cursor() as cursor:
        if replace:
            cursor.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
        cursor.execute(sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(table), definitions))


def _copy_rows(duck: Any, target: Any, sql: Any, table: str, columns: Sequence[SourceColumn]) -> int:
    names = [column.name for column in columns]
    select = "SELECT {} FROM {}".format(", ".join(_duck_identifier(name) for name in names), _duck_identifier(table))
    reader = duck.cursor()
    copied = 0
    try:
        reader.execute(select)
        statement = sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, names)))
        with target.cursor() as cursor, cursor.copy(statement) as copy:
            while True:
                batch = reader.fetchmany(BATCH_ROWS)
                if not batch:
                    break
                for row in batch:
                    copy.write_row(row)
                copied += len(batch)
    finally:
        reader.close()
    return copied


def _duck_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
