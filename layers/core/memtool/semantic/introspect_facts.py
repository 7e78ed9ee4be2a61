"""What ``memtool model init`` reads from a live warehouse, and what the warehouse's names say.

- The facts: :class:`WarehouseFacts` holds each table's :class:`TableFacts` (its
  :class:`ColumnFacts`, its declared or inferred primary key, its row count) and the declared
  :class:`ForeignKey` constraints; :func:`type_family` sorts an engine's type spellings into
  numeric, text, time, boolean and other.
- Reading them: :func:`read_catalog_facts` and the catalog queries each engine gets
  (:func:`columns_sql`, :func:`primary_keys_sql`, :func:`foreign_keys_sql`). Internal SQL through
  the ``Warehouse`` port, never through the guard.
- Naming rules read off the names: which columns are keys and what they name (:func:`is_key_name`,
  :func:`key_entity`), what a table's rows are (:func:`table_entity`), the prefix a table's columns
  share (:func:`table_prefix`), and a name's word tokens. The reader infers a primary key from key
  names; the draft (memtool.semantic.introspect) guesses joins and names measures from them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime
from typing import Any

from memtool.sql.literals import quoted_identifier as q  # a warehouse's names may hold anything, quotes included
from memtool.sql.warehouse import Warehouse, WarehouseError

DEFAULT_DISTINCT_CAP = 50
DEFAULT_TIMEOUT_SECONDS = 60.0
MAX_COLUMNS = 100_000

_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# id, key, *_id, *_key, *key (TPC-H's l_orderkey), *_sk (TPC-DS surrogate keys)
_KEY_NAME = re.compile(r"^(.*?)_?(id|key|sk)$")
TABLE_AFFIXES = re.compile(r"^(dim|fact|fct|tbl|d|f|t)_")
_NUMERIC = re.compile(
    r"^(tinyint|smallint|integer|int|int2|int4|int8|bigint|hugeint|utinyint|usmallint|uinteger|ubigint|"
    r"decimal|numeric|real|float|float4|float8|double|double precision)\b"
)
WHOLE_TYPES = re.compile(r"^(tinyint|smallint|integer|int|int2|int4|int8|bigint|hugeint|utinyint|usmallint|uinteger|ubigint)\b")
_TEXT = re.compile(r"^(varchar|character varying|character|char|bpchar|text|string|nvarchar|nchar|\"char\")\b")
_TIME = re.compile(r"^(date|timestamp|timestamptz|datetime)\b")


# ---- what the warehouse says -------------------------------------------------------------------


@dataclass(frozen=True)
class ColumnFacts:
    name: str
    data_type: str  # as the engine spells it (DECIMAL(15,2), character varying, ...)
    distinct_count: int | None = None  # text columns: distinct non-null values (exact, also beyond the cap)
    values: tuple[str, ...] = ()  # text columns within the cap: their distinct values, sorted
    low: Any = None  # numeric and time columns: the smallest value (None: not read, or no values)
    high: Any = None  # numeric and time columns: the largest value
    mean_length: float | None = None  # text columns: the mean length of the sampled values

    @property
    def family(self) -> str:
        return type_family(self.data_type)


@dataclass(frozen=True)
class ForeignKey:
    table: str
    columns: tuple[str, ...]
    references: str
    referenced_columns: tuple[str, ...]


@dataclass(frozen=True)
class TableFacts:
    name: str
    columns: tuple[ColumnFacts, ...]
    primary_key: tuple[str, ...] = ()
    primary_key_declared: bool = False  # False: inferred from key names and unique data, or none
    row_count: int | None = None

    def column(self, name: str) -> ColumnFacts | None:
        return next((c for c in self.columns if c.name == name), None)


@dataclass(frozen=True)
class WarehouseFacts:
    dialect: str
    schema: str | None  # None: the session's current schema (table names stay unqualified)
    tables: tuple[TableFacts, ...]
    foreign_keys: tuple[ForeignKey, ...] = ()
    distinct_cap: int = DEFAULT_DISTINCT_CAP
    skipped: tuple[str, ...] = ()  # tables and columns left out: names generated SQL cannot write unquoted
    notes: tuple[str, ...] = ()  # what could not be read (constraints on an engine that hides them)

    def table(self, name: str) -> TableFacts:
        return next(t for t in self.tables if t.name == name)


def type_family(data_type: str) -> str:
    """numeric, text, time, boolean or other, for DuckDB, PostgreSQL and Redshift spellings alike."""
    spelled = data_type.strip().lower()
    if _NUMERIC.match(spelled):
        return "numeric"
    if _TEXT.match(spelled):
        return "text"
    if _TIME.match(spelled):
        return "time"
    if spelled in ("boolean", "bool"):
        return "boolean"
    return "other"


def columns_sql(dialect: str, schema_expression: str) -> str:
    """The columns query: SVV_COLUMNS on Redshift (information_schema there misses late-binding views
    and external tables), information_schema.columns elsewhere."""
    catalog = "svv_columns" if dialect == "redshift" else "information_schema.columns"
    return (
        f"SELECT table_name, column_name, data_type FROM {catalog} "
        f"WHERE table_schema = {schema_expression} ORDER BY table_name, ordinal_position"
    )


def primary_keys_sql(schema_expression: str) -> str:
    return (
        "SELECT kcu.table_name, kcu.column_name FROM information_schema.table_constraints AS tc "
        "JOIN information_schema.key_column_usage AS kcu ON kcu.constraint_name = tc.constraint_name "
        "AND kcu.table_schema = tc.table_schema AND kcu.table_name = tc.table_name "
        f"WHERE tc.table_schema = {schema_expression} AND tc.constraint_type = 'PRIMARY KEY' "
        "ORDER BY kcu.table_name, kcu.ordinal_position"
    )


def foreign_keys_sql(dialect: str, schema_expression: str) -> str:
    """Foreign key columns paired with the columns they reference. Redshift's information_schema
    (PostgreSQL 8.0's) has no position_in_unique_constraint: columns pair by their ordinal position."""
    position = "kcu.ordinal_position" if dialect == "redshift" else "kcu.position_in_unique_constraint"
    return (
        "SELECT kcu.table_name, kcu.constraint_name, kcu.column_name, pk.table_name, pk.column_name "
        "FROM information_schema.referential_constraints AS rc "
        "JOIN information_schema.key_column_usage AS kcu ON kcu.constraint_name = rc.constraint_name "
        "AND kcu.constraint_schema = rc.constraint_schema "
        "JOIN information_schema.key_column_usage AS pk ON pk.constraint_name = rc.unique_constraint_name "
        f"AND pk.constraint_schema = rc.unique_constraint_schema AND pk.ordinal_position = {position} "
        f"WHERE kcu.table_schema = {schema_expression} ORDER BY kcu.table_name, kcu.constraint_name, kcu.ordinal_position"
    )



# ---- reading them ------------------------------------------------------------------------------

# How the reader runs its queries: (sql, *, max_rows, bind=False) -> rows; bind passes the schema.
_Run = Callable[..., list[list[Any]]]


def read_catalog_facts(
    warehouse: Warehouse,
    *,
    schema: str | None = None,
    distinct_cap: int = DEFAULT_DISTINCT_CAP,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    progress: Callable[[str], None] | None = None,
) -> WarehouseFacts:
    """What :func:`draft_model` needs to know about ``schema`` (default: the session's current one).

    Raises WarehouseError when the columns cannot be read (an unreachable server among them); the
    constraint queries are optional: an engine that refuses them leaves a note and no keys.
    """
    if distinct_cap < 1:
        raise ValueError("distinct_cap must be at least 1")
    report = progress or (lambda _line: None)
    dialect = warehouse.dialect
    schema_expression, params = ("%s", [schema]) if schema else ("current_schema()", None)

    def run(sql: str, *, max_rows: int, bind: bool = False) -> list[list[Any]]:
        return warehouse.run(sql, max_rows=max_rows, timeout_seconds=timeout_seconds, params=params if bind else None).rows

    rows = run(columns_sql(dialect, schema_expression), max_rows=MAX_COLUMNS, bind=True)
    columns, skipped = _plain_columns(rows, dialect)
    report(f"{len(columns)} tables, {sum(map(len, columns.values()))} columns")

    declared, foreign, notes = _declared_keys(run, dialect, schema_expression, columns)
    report(f"declared keys: {sum(map(len, declared.values()))} primary key columns, {len(foreign)} foreign keys")

    def qualified(table: str) -> str:
        return f"{q(schema)}.{q(table)}" if schema else q(table)

    tables: list[TableFacts] = []
    for table, spelled in columns.items():
        facts = _table_facts(run, table, qualified(table), spelled, declared.get(table, []), distinct_cap)
        tables.append(facts)
        primary_key, row_count = facts.primary_key, facts.row_count
        report(f"{table}: {row_count:,} rows" + (f", key ({', '.join(primary_key)})" if primary_key else ""))
    return WarehouseFacts(dialect, schema, tuple(tables), tuple(foreign), distinct_cap, tuple(skipped), tuple(notes))


def _plain_columns(rows: Sequence[Sequence[Any]], dialect: str) -> tuple[dict[str, list[tuple[str, str]]], list[str]]:
    """The columns query's rows as table -> [(column, data type)], and the tables and columns left out
    (names generated SQL cannot write unquoted)."""
    skipped: list[str] = []
    columns: dict[str, list[tuple[str, str]]] = {}
    for table, column, data_type in rows:
        table, column = str(table), str(column)
        if not _plain(table, dialect):
            if table not in skipped:
                skipped.append(table)
            continue
        if not _plain(column, dialect):
            skipped.append(f"{table}.{column}")
            continue
        columns.setdefault(table, []).append((column, "" if data_type is None else str(data_type)))
    return columns, skipped


def _declared_keys(
    run: _Run, dialect: str, schema_expression: str, columns: dict[str, list[tuple[str, str]]]
) -> tuple[dict[str, list[str]], list[ForeignKey], list[str]]:
    """Declared primary key columns per table, foreign keys between readable tables (to one table
    each), and a note when the constraints could not be read (what was read before is kept)."""
    notes: list[str] = []
    declared: dict[str, list[str]] = {}
    foreign: list[ForeignKey] = []
    try:
        for table, column in run(primary_keys_sql(schema_expression), max_rows=MAX_COLUMNS, bind=True):
            declared.setdefault(str(table), []).append(str(column))
        grouped: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
        for table, constraint, column, referenced, referenced_column in run(
            foreign_keys_sql(dialect, schema_expression), max_rows=MAX_COLUMNS, bind=True
        ):
            grouped.setdefault((str(table), str(constraint)), []).append((str(column), str(referenced), str(referenced_column)))
        for (table, _), pairs in grouped.items():
            targets = {referenced for _, referenced, _ in pairs}
            if table in columns and len(targets) == 1 and next(iter(targets)) in columns:
                foreign.append(ForeignKey(table, tuple(c for c, _, _ in pairs), pairs[0][1], tuple(r for _, _, r in pairs)))
    except WarehouseError as error:
        notes.append(f"declared keys could not be read ({error.code}); joins are guessed from names")
    return declared, foreign, notes


def _table_facts(
    run: _Run, table: str, source: str, spelled: Sequence[tuple[str, str]], declared: Sequence[str], distinct_cap: int
) -> TableFacts:
    """One table's row count, column facts and primary key: the declared one, else one the data is
    unique on (:func:`_unique_key`)."""
    row_count = int(run(f"SELECT COUNT(*) FROM {source}", max_rows=1)[0][0])
    facts = _column_facts(run, source, spelled, distinct_cap)
    primary_key = tuple(c for c in declared if any(c == f.name for f in facts))
    is_declared = bool(primary_key)
    if not primary_key and row_count > 0:
        primary_key = _unique_key(run, source, spelled, row_count)
    return TableFacts(table, tuple(facts), primary_key, is_declared, row_count)


def _column_facts(run: _Run, source: str, spelled: Sequence[tuple[str, str]], distinct_cap: int) -> list[ColumnFacts]:
    """Numeric and time columns with their range; text columns with up to ``distinct_cap`` values
    sampled, and the exact count of distinct values of those beyond the cap."""
    ranges = _ranges(run, source, [c for c, t in spelled if type_family(t) in ("numeric", "time")])
    facts: list[ColumnFacts] = []
    beyond_cap: list[int] = []
    for column, data_type in spelled:
        if type_family(data_type) != "text":
            low, high = ranges.get(column, (None, None))
            facts.append(ColumnFacts(column, data_type, low=low, high=high))
            continue
        sample = run(
            f"SELECT DISTINCT {q(column)} FROM {source} WHERE {q(column)} IS NOT NULL LIMIT {distinct_cap + 1}",
            max_rows=distinct_cap + 1,
        )
        values = tuple(sorted(str(row[0]) for row in sample)) if len(sample) <= distinct_cap else ()
        mean_length = sum(len(str(row[0])) for row in sample) / len(sample) if sample else None
        if len(sample) > distinct_cap:
            beyond_cap.append(len(facts))
        facts.append(ColumnFacts(column, data_type, distinct_count=len(sample), values=values, mean_length=mean_length))
    if beyond_cap:  # how many values a high-cardinality column has: a category of many values, or one per row
        counted = ", ".join(f"COUNT(DISTINCT {q(facts[i].name)})" for i in beyond_cap)
        exact = run(f"SELECT {counted} FROM {source}", max_rows=1)[0]
        for i, count in zip(beyond_cap, exact, strict=True):
            facts[i] = replace(facts[i], distinct_count=int(count))
    return facts


def _ranges(run: Callable[..., list[list[Any]]], source: str, columns: Sequence[str]) -> dict[str, tuple[Any, Any]]:
    """Each column's smallest and largest value, in one query (dates: the data's first and last day)."""
    if not columns:
        return {}
    row = run("SELECT " + ", ".join(f"MIN({q(c)}), MAX({q(c)})" for c in columns) + f" FROM {source}", max_rows=1)[0]
    return {c: (row[2 * i], row[2 * i + 1]) for i, c in enumerate(columns)}


def _plain(name: str, dialect: str) -> bool:
    """A name the compiler can write unquoted (PostgreSQL folds unquoted names to lower case)."""
    return bool(_PLAIN_NAME.match(name)) and (dialect == "duckdb" or name == name.lower())


def _unique_key(run: Callable[..., list[list[Any]]], source: str, columns: Sequence[tuple[str, str]], row_count: int) -> tuple[str, ...]:
    """A key the data is unique on (no NULLs): the first key-named column; else the first two when both
    are key-named; else the first one, two or three columns when each is text or a whole number (a
    warehouse loaded from files declares nothing: bakeoff's ``bakers`` is unique on series and baker)."""
    names = [c for c, _ in columns]

    def unique(candidate: Sequence[str]) -> bool:
        listed = ", ".join(q(c) for c in candidate)
        present = " AND ".join(f"{q(c)} IS NOT NULL" for c in candidate)
        distinct, complete = run(
            f"SELECT COUNT(*), SUM(CASE WHEN {present} THEN 1 ELSE 0 END) FROM (SELECT DISTINCT {listed} FROM {source}) AS keys",
            max_rows=1,
        )[0]
        return int(distinct) == row_count and int(complete or 0) == row_count

    keys = [c for c in names if is_key_name(c)]
    if keys:
        first = keys[0]
        distinct, present = run(f"SELECT COUNT(DISTINCT {q(first)}), COUNT({q(first)}) FROM {source}", max_rows=1)[0]
        if distinct == row_count and present == row_count:
            return (first,)
        if len(names) >= 2 and names[0] == first and is_key_name(names[1]) and unique(names[:2]):
            return (names[0], names[1])
        return ()
    leading: list[str] = []
    for column, data_type in columns[:3]:
        if not (type_family(data_type) == "text" or WHOLE_TYPES.match(data_type.strip().lower())):
            break
        leading.append(column)
        if unique(leading):
            return tuple(leading)
    return ()


# ---- what the names say -------------------------------------------------------------------------


def is_key_name(column: str) -> bool:
    return key_entity(column) is not None or column.lower() in ("id", "key")


def key_entity(column: str) -> str | None:
    """The thing a key column names: ``l_orderkey`` -> order, ``o_custkey`` -> cust, ``region_id`` ->
    region, ``cust_key`` -> cust, ``ss_item_sk`` -> item; None for a bare ``id`` or a non-key column.

    A short table prefix (1-3 letters and an underscore, TPC-H's ``l_``, ``ps_``) is dropped;
    underscores inside the rest are too.
    """
    found = _KEY_NAME.match(column.lower())
    if found is None:
        return None
    stem = found.group(1).strip("_")
    prefix, separator, rest = stem.partition("_")
    if separator and len(prefix) <= 3 and rest:
        stem = rest
    return stem.replace("_", "") or None


def table_entity(table: str) -> str:
    """``customers`` -> customer, ``categories`` -> category, ``dim_store`` -> store."""
    name = TABLE_AFFIXES.sub("", table.lower())
    if name.endswith("ies") and len(name) > 4:
        name = name[:-3] + "y"
    elif name.endswith("s") and not name.endswith("ss") and len(name) > 3:
        name = name[:-1]
    return name.replace("_", "")


def table_prefix(table: TableFacts) -> str:
    """The short prefix every column of the table shares (TPC-H's ``l_``), or ''."""
    prefixes = {c.name.partition("_")[0] + "_" if "_" in c.name else "" for c in table.columns}
    if len(prefixes) == 1:
        prefix = next(iter(prefixes))
        if 1 < len(prefix) <= 4:
            return prefix
    return ""


def word_tokens(column: str) -> list[str]:
    """``arr_delay`` -> [arr, delay], ``imdbRating`` -> [imdb, rating]."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", column)
    return [t for t in re.split(r"[_\W]+", spaced.lower()) if t]


def singular_word(token: str) -> str:
    return token[:-1] if token.endswith("s") and not token.endswith("ss") and len(token) > 3 else token


def day_of(value: Any) -> date | None:
    """A date read from a warehouse value (a date, a timestamp or ISO text), or None."""
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value[:10])
        except ValueError:
            return None
    return None


__all__ = [
    "DEFAULT_DISTINCT_CAP",
    "day_of",
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_COLUMNS",
    "TABLE_AFFIXES",
    "WHOLE_TYPES",
    "ColumnFacts",
    "ForeignKey",
    "TableFacts",
    "WarehouseFacts",
    "columns_sql",
    "foreign_keys_sql",
    "is_key_name",
    "key_entity",
    "primary_keys_sql",
    "read_catalog_facts",
    "singular_word",
    "table_entity",
    "table_prefix",
    "type_family",
    "word_tokens",
]
