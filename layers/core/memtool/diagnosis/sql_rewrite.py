"""What a query reads, resolved to real tables, and renames applied to the parsed tree.

Both work on sqlglot's scopes, so an alias (``ol.gross_amount``), a CTE of the same name as a table
and an unqualified column in a one-table SELECT all resolve to the table they really read. A
rename rewrites identifiers in the tree and regenerates the SQL: never a string replacement.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memtool.sql.live_schema import LiveSchema

DIALECT = "redshift"


@dataclass(frozen=True)
class ColumnRef:
    table: str  # the real table (lower case)
    column: str  # lower case


@dataclass(frozen=True)
class References:
    tables: tuple[str, ...]  # real tables read, lower case, in order of appearance
    columns: tuple[ColumnRef, ...]  # columns resolved to a real table

    def columns_of(self, table: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.column for c in self.columns if c.table == table))


@dataclass(frozen=True)
class Unknown:
    """Names a query uses that the live schema does not have."""

    tables: tuple[str, ...]
    columns: tuple[ColumnRef, ...]  # columns missing from tables that do exist

    def __bool__(self) -> bool:
        return bool(self.tables or self.columns)


def parse(sql: str) -> Any:
    import sqlglot

    return sqlglot.parse_one(sql, read=DIALECT)


def references(sql: str) -> References:
    tree = parse(sql)
    tables: list[str] = []
    columns: list[ColumnRef] = []
    for table, column, _node in _resolved_columns(tree):
        columns.append(ColumnRef(table, column))
    for node in _real_tables(tree):
        tables.append(node.name.lower())
    return References(tuple(dict.fromkeys(tables)), tuple(dict.fromkeys(columns)))


def unknown_references(sql: str, schema: LiveSchema) -> Unknown:
    found = references(sql)
    tables = tuple(t for t in found.tables if not schema.has_table(t))
    columns = tuple(c for c in found.columns if schema.has_table(c.table) and not schema.has_column(c.table, c.column))
    return Unknown(tables, columns)


def rename_table(sql: str, old: str, new: str) -> str:
    """Every read of the real table ``old`` reads ``new``; its alias (or its old name as one) stays."""
    from sqlglot import exp

    tree = parse(sql)
    for node in _real_tables(tree):
        if node.name.lower() == old.lower():
            if not node.alias:
                node.set("alias", exp.TableAlias(this=exp.to_identifier(node.name)))
            node.set("this", exp.to_identifier(new))
    return tree.sql(dialect=DIALECT, pretty=True)


def rename_column(sql: str, table: str, old: str, new: str) -> str:
    """Every column ``old`` that resolves to the real table ``table`` becomes ``new``."""
    from sqlglot import exp

    tree = parse(sql)
    for real, column, node in list(_resolved_columns(tree)):
        if real == table.lower() and column == old.lower():
            node.set("this", exp.to_identifier(new))
    return tree.sql(dialect=DIALECT, pretty=True)


def _real_tables(tree: Any) -> Iterator[Any]:
    """Table nodes that read a warehouse table (not a CTE of this query)."""
    from sqlglot import exp

    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for node in tree.find_all(exp.Table):
        if node.name and node.name.lower() not in ctes:
            yield node


def _resolved_columns(tree: Any) -> Iterator[tuple[str, str, Any]]:
    """(real table, column, node) for each column that resolves to a warehouse table."""
    from sqlglot import exp
    from sqlglot.optimizer.scope import traverse_scope

    for scope in traverse_scope(tree):
        real = {alias.lower(): source for alias, source in scope.sources.items() if isinstance(source, exp.Table)}
        only = list(real.values())[0] if len(scope.sources) == 1 and len(real) == 1 else None
        for column in scope.columns:
            if not isinstance(column.this, exp.Identifier):
                continue
            qualifier = column.table.lower() if column.table else ""
            source = real.get(qualifier) if qualifier else only
            if source is None:
                continue
            yield source.name.lower(), column.name.lower(), column
