"""Draft a semantic model from a live warehouse: what ``memtool model init`` writes for a curator to finish.

Three steps, each usable on its own:

- :func:`read_catalog_facts` asks the warehouse (through the ``Warehouse`` port, internal SQL that
  never passes the guard) for its tables, columns and types (information_schema.columns; SVV_COLUMNS
  on Redshift, which also lists late-binding views and external tables), declared primary and
  foreign keys (information_schema), row counts, and per text column up to ``distinct_cap + 1``
  distinct values (the count is exact up to the cap, "more" beyond). A table that declares no
  primary key gets one inferred: its first key-named column, or its first two, when the data is
  unique on them (the DuckDB -> PostgreSQL loader, for one, does not copy constraints).
- :func:`draft_model` turns those facts into a model document ``Catalog.model_validate`` accepts:
  numeric non-key columns become SUM measures, low-cardinality text columns attribute dimensions
  (their values sampled into ``entity_values``), dates the time column of each fact; joins come
  from declared foreign keys or, for a table that declares none, from key names (the rules are on
  :func:`key_entity` and :func:`guess_joins`).
- :func:`to_yaml` writes it with a header saying what a curator has to add.

Naming, documented once here: dimensions keep their column's name (``l_shipmode``); when two
tables have a column of the same name, every such dimension is prefixed with its table's name
(``customer_name``, ``supplier_name``), never silently dropped. One physical table reached from a
fact along two paths (TPC-H's nation, through the customer and through the supplier) is one model
table: the compiler takes the fewest-hop path, and each such dimension's definition names the path
per fact, so the curator sees it and can split the roles into two table entries.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import Any

from memtool.semantic.time_expressions import add_months, month_start
from memtool.sql.literals import quoted_identifier as q  # a warehouse's names may hold anything, quotes included
from memtool.sql.warehouse import Warehouse, WarehouseError

DEFAULT_DISTINCT_CAP = 50
DEFAULT_TIMEOUT_SECONDS = 60.0
MAX_COLUMNS = 100_000
GRAINS = ("day", "week", "month", "quarter", "year")
DRAFT_VERSION = "draft"

_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# id, key, *_id, *_key, *key (TPC-H's l_orderkey), *_sk (TPC-DS surrogate keys)
_KEY_NAME = re.compile(r"^(.*?)_?(id|key|sk)$")
_QUANTITY_WORDS = re.compile(r"(^|_)(qty|quantity|count|cnt|num|number|units?)($|_)")
_MONEY_WORDS = re.compile(r"amount|amt|price|cost|revenue|sales|balance|bal$|fee|charge|paid|spend|tax|discount")
# Free text, not a category, however few rows its table has (TPC-H's 25 nations have 25 comments).
_FREE_TEXT_WORDS = re.compile(r"comment|description|desc$|remark|note|address|phone|email|url")
FREE_TEXT_LENGTH = 40  # a sampled value longer than this on average: free text
_TABLE_AFFIXES = re.compile(r"^(dim|fact|fct|tbl|d|f|t)_")
# Words an alias may not be: the compiler writes ``FROM t AS <alias>``.
_RESERVED = frozenset(
    "all and any as asc at by case cast do else end for from full if in inner is join left like limit not null of "
    "off offset on or order outer right select some table then to union user using when where with".split()
)
_NUMERIC = re.compile(
    r"^(tinyint|smallint|integer|int|int2|int4|int8|bigint|hugeint|utinyint|usmallint|uinteger|ubigint|"
    r"decimal|numeric|real|float|float4|float8|double|double precision)\b"
)
_WHOLE = re.compile(r"^(tinyint|smallint|integer|int|int2|int4|int8|bigint|hugeint|utinyint|usmallint|uinteger|ubigint)\b")
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
    report(f"{len(columns)} tables, {sum(map(len, columns.values()))} columns")

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
    report(f"declared keys: {sum(map(len, declared.values()))} primary key columns, {len(foreign)} foreign keys")

    def qualified(table: str) -> str:
        return f"{q(schema)}.{q(table)}" if schema else q(table)

    tables: list[TableFacts] = []
    for table, spelled in columns.items():
        source = qualified(table)
        row_count = int(run(f"SELECT COUNT(*) FROM {source}", max_rows=1)[0][0])
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
        primary_key = tuple(c for c in declared.get(table, ()) if any(c == f.name for f in facts))
        is_declared = bool(primary_key)
        if not primary_key and row_count > 0:
            primary_key = _unique_key(run, source, spelled, row_count)
        tables.append(TableFacts(table, tuple(facts), primary_key, is_declared, row_count))
        report(f"{table}: {row_count:,} rows" + (f", key ({', '.join(primary_key)})" if primary_key else ""))
    return WarehouseFacts(dialect, schema, tuple(tables), tuple(foreign), distinct_cap, tuple(skipped), tuple(notes))


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
        if not (type_family(data_type) == "text" or _WHOLE.match(data_type.strip().lower())):
            break
        leading.append(column)
        if unique(leading):
            return tuple(leading)
    return ()


# ---- naming rules ------------------------------------------------------------------------------


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
    name = _TABLE_AFFIXES.sub("", table.lower())
    if name.endswith("ies") and len(name) > 4:
        name = name[:-3] + "y"
    elif name.endswith("s") and not name.endswith("ss") and len(name) > 3:
        name = name[:-1]
    return name.replace("_", "")


# Names too generic to join on by name alone (a customer's name is not a product's name).
_GENERIC_NAMES = frozenset({"name", "title", "type", "kind", "status", "description", "label", "value", "comment", "note", "category"})


def _match_score(column: str, target_table: str, target_column: str) -> int:
    """How well ``column`` names the key ``target_column`` of ``target_table``: 3 the same name
    (``carrier`` / airlines.carrier, ``l_orderkey`` / ``l_orderkey``), 2 the same entity
    (``l_orderkey`` / ``o_orderkey``; ``customer_id`` / customers.id) or ``<table>_<key>``
    (``airline_carrier`` / airlines.carrier), 1 an abbreviation of it (``cust_key`` / customer.id),
    0 no match. A generic word (``name``, ``type``) never matches by name alone."""
    lowered, target = column.lower(), target_column.lower()
    if lowered == target and lowered not in _GENERIC_NAMES and lowered not in ("id", "key"):
        return 3
    if lowered in (f"{target_table.lower()}_{target}", f"{table_entity(target_table)}_{target}") and target not in ("id", "key"):
        return 2
    mine = key_entity(column)
    if mine is None:
        return 0
    theirs = key_entity(target_column)
    if lowered == target and theirs is not None:
        return 3
    entities = {e for e in (theirs, table_entity(target_table)) if e}
    if mine in entities:
        return 2
    if len(mine) >= 3 and any(e.startswith(mine) for e in entities):
        return 1
    return 0


@dataclass(frozen=True)
class Join:
    left: str  # the many side
    right: str  # the one side
    pairs: tuple[tuple[str, str], ...]  # (left column, right column)
    declared: bool = False

    def on(self) -> list[str]:
        return [left if left == right else f"{left} = {right}" for left, right in self.pairs]


def guess_joins(tables: Sequence[TableFacts], foreign_keys: Sequence[ForeignKey] = ()) -> list[Join]:
    """Joins from the many side to the one side.

    A table that declares foreign keys joins along them only. Any other table joins table B on
    B's primary key when it has key-named columns naming each of B's key columns (see
    :func:`_match_score`) of the same type family; the best-scoring target wins, a tie is left
    out (ambiguous). Never a table to itself, never from a table's whole primary key (that is
    one to one, and which side is "many" is a guess).
    """
    joins = [
        Join(fk.table, fk.references, tuple(zip(fk.columns, fk.referenced_columns, strict=True)), declared=True)
        for fk in foreign_keys
        if fk.table != fk.references
    ]
    declaring = {fk.table for fk in foreign_keys}
    for table in tables:
        if table.name in declaring:
            continue
        candidates: dict[tuple[str, ...], list[tuple[int, Join]]] = {}
        for target in tables:
            if target.name == table.name or not target.primary_key:
                continue
            pairs: list[tuple[str, str]] = []
            score = 0
            for key in target.primary_key:
                key_type = target.column(key)
                best = max(
                    (
                        (_match_score(c.name, target.name, key), c.name)
                        for c in table.columns
                        if key_type is not None and c.family == key_type.family and c.name not in (p[0] for p in pairs)
                    ),
                    default=(0, ""),
                )
                if best[0] == 0 or (len(target.primary_key) > 1 and best[0] < 2):
                    break
                pairs.append((best[1], key))
                score += best[0]
            else:
                mine = tuple(sorted(left for left, _ in pairs))
                if mine == tuple(sorted(table.primary_key)):
                    continue
                candidates.setdefault(mine, []).append((score, Join(table.name, target.name, tuple(pairs))))
        for options in candidates.values():
            options.sort(key=lambda item: -item[0])
            if len(options) == 1 or options[0][0] > options[1][0]:
                joins.append(options[0][1])
    return joins


def table_prefix(table: TableFacts) -> str:
    """The short prefix every column of the table shares (TPC-H's ``l_``), or ''."""
    prefixes = {c.name.partition("_")[0] + "_" if "_" in c.name else "" for c in table.columns}
    if len(prefixes) == 1:
        prefix = next(iter(prefixes))
        if 1 < len(prefix) <= 4:
            return prefix
    return ""


def table_aliases(tables: Sequence[TableFacts]) -> dict[str, str]:
    """Short, unique aliases: the tables' shared column prefix (``l``, ``ps``), else the initials of the
    name's words (``order_line`` -> ``ol``), with a digit when taken or reserved."""
    taken: set[str] = set()
    aliases: dict[str, str] = {}
    for table in tables:
        base = table_prefix(table).rstrip("_").lower() or "".join(w[0] for w in table.name.lower().split("_") if w)
        if not base or not base[0].isalpha():
            base = "t" + base
        alias, n = base, 1
        while alias in taken or alias in _RESERVED:
            n += 1
            alias = f"{base}{n}"
        taken.add(alias)
        aliases[table.name] = alias
    return aliases


def _words(column: str, prefix: str) -> str:
    stripped = column[len(prefix) :] if prefix and column.startswith(prefix) else column
    return stripped.replace("_", " ").strip() or column


# ---- measures ----------------------------------------------------------------------------------

# Numbers that are never summed (nor averaged): calendar parts, codes and identifiers, coordinates.
_CALENDAR_PARTS = frozenset(
    "year yr month day hour hr minute second week wk quarter qtr weekday dow doy season date yyyymm yyyymmdd".split()
)
_IDENTIFIER_WORDS = frozenset(
    "id key sk code no nbr nr num number zip zipcode postcode postal phone fips lat latitude lon lng longitude "
    "rownames rowname rownum uuid guid seq".split()
)
# Numbers averaged, never summed: by name.
_AVERAGE_WORDS = frozenset(
    "delay time duration rate ratio price temperature temp age speed percent percentage pct rank ranking rating score "
    "avg average mean median margin share".split()
)
_TOTAL_WORDS = frozenset("total sum".split())


def _tokens(column: str) -> list[str]:
    """``arr_delay`` -> [arr, delay], ``imdbRating`` -> [imdb, rating]."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", column)
    return [t for t in re.split(r"[_\W]+", spaced.lower()) if t]


def _singular(token: str) -> str:
    return token[:-1] if token.endswith("s") and not token.endswith("ss") and len(token) > 3 else token


@dataclass(frozen=True)
class Measure:
    """How a numeric column is measured: ``SUM`` or ``AVG``, its kind, and why (for the definition)."""

    aggregate: str  # SUM | AVG
    kind: str  # money | count | ratio | decimal
    why: str


def measure_of(table: TableFacts, column: ColumnFacts) -> Measure | None:
    """The aggregate a numeric column gets, or None for a number that is never added up.

    Never: calendar parts (year, month, day, hour, minute, ...), codes and identifiers (``*_no``,
    ``zip``, ``flight`` in ``flights``: a column named as its table's entity), coordinates, and a
    column holding one value in every row (nothing to measure: a flag never set).
    ``AVG``: a name of a non-additive measure (delay, time, duration, rate, ratio, price, temperature,
    age, speed, percent, rank, rating, score, ...), negative values in a column not named as an
    amount or a quantity (a delay, a temperature, a margin), or a fraction (every value in [0, 1]).
    ``SUM`` otherwise. Kinds: money for DECIMAL columns and money names, ratio for fractions, count
    for whole numbers, decimal (rounded to 2) for the other non-whole numbers."""
    tokens = _tokens(column.name)
    prefix = table_prefix(table)
    if prefix and tokens and tokens[0] == prefix.rstrip("_").lower():
        tokens = tokens[1:] or tokens
    name = column.name.lower()
    if not tokens or any(t in _CALENDAR_PARTS for t in tokens):
        return None
    counted = tokens[0] in ("num", "number", "n") and len(tokens) > 1  # num_items: a quantity, not a number of something
    if any(t in _IDENTIFIER_WORDS for t in (tokens[1:] if counted else tokens)):
        return None
    if "".join(tokens) == table_entity(table.name):
        return None  # flights.flight, orders.order: the thing's own number
    spelled = column.data_type.strip().lower()
    whole = bool(_WHOLE.match(spelled))
    if column.low is not None and column.low == column.high:
        return None  # one value in every row (TPC-H's o_shippriority, all 0): it measures nothing
    money = bool(_MONEY_WORDS.search(name)) or spelled.startswith(("decimal", "numeric"))
    quantity = bool(_QUANTITY_WORDS.search(name))
    low, high = _number(column.low), _number(column.high)
    fraction = not whole and low is not None and high is not None and low >= 0 and high <= 1 and high > 0
    named_average = next((t for t in tokens if _singular(t) in _AVERAGE_WORDS), None)
    if named_average and not any(t in _TOTAL_WORDS for t in tokens):
        kind = "ratio" if fraction else "money" if money and named_average == "price" else "decimal"
        return Measure("AVG", kind, f"averaged: '{named_average}' names a measure that does not add up")
    if fraction and not quantity:
        return Measure("AVG", "ratio", f"averaged: every value lies between 0 and 1 ({low:g} to {high:g}), a fraction")
    if low is not None and low < 0 and not money and not quantity and not any(t in _TOTAL_WORDS for t in tokens):
        return Measure("AVG", "decimal", f"averaged: it has negative values (down to {low:g})")
    if quantity:
        return Measure("SUM", "count" if whole else "decimal", "summed")
    if money:
        return Measure("SUM", "money", "summed")
    return Measure("SUM", "count" if whole else "decimal", "summed")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# ---- the draft ---------------------------------------------------------------------------------


@dataclass
class _Fact:
    table: TableFacts
    time_column: str
    reachable: list[str] = field(default_factory=list)  # model tables reachable by joins, the fact first


def _reachable(start: str, joins: Sequence[Join]) -> list[str]:
    seen, queue = [start], deque([start])
    while queue:
        at = queue.popleft()
        for join in joins:
            if join.left == at and join.right not in seen:
                seen.append(join.right)
                queue.append(join.right)
    return seen


def _path(start: str, goal: str, joins: Sequence[Join]) -> list[str]:
    """Table names from ``start`` to ``goal`` along the fewest joins (the compiler's choice)."""
    queue: deque[list[str]] = deque([[start]])
    while queue:
        path = queue.popleft()
        if path[-1] == goal:
            return path
        for join in joins:
            if join.left == path[-1] and join.right not in path:
                queue.append([*path, join.right])
    return []


# Dates that do not say when a row happened: when it was loaded or changed, or a person's birth.
_NOT_A_PERIOD = frozenset("updated modified loaded etl ingested inserted synced refreshed birth birthday birthdate dob born".split())


def period_columns(table: TableFacts) -> list[ColumnFacts]:
    """The table's dates that can date its rows, in column order (not a load time, not a birthday)."""
    return [c for c in table.columns if c.family == "time" and not any(t in _NOT_A_PERIOD for t in _tokens(c.name))]


def _day(value: Any) -> date | None:
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


def _plural(words: str) -> str:
    """``flight`` -> flights, ``category`` -> categories; a word ending in s is kept."""
    if not words or words.endswith("s") or not words[-1].isalpha():
        return words
    if words.endswith("y") and len(words) > 1 and words[-2] not in "aeiou":
        return words[:-1] + "ies"
    if words.endswith(("x", "ch", "sh")):
        return words + "es"
    return words + "s"


def table_words(table: str) -> str:
    """What a table's rows are, in words: ``flights`` -> flights, ``fact_sales_line`` -> sales lines,
    ``polls_us_election_2016`` -> polls (the words up to the first plural one)."""
    words = [w for w in _TABLE_AFFIXES.sub("", table.lower()).split("_") if w] or [table.lower()]
    for i, word in enumerate(words):
        if word.endswith("s") and not word.endswith("ss") and len(word) > 3 and word.isalpha():
            return " ".join(words[: i + 1])
    stem = [w for w in words if not w.isdigit()] or words
    return " ".join([*stem[:-1], _plural(stem[-1])])


def draft_model(
    facts: WarehouseFacts, *, name: str, max_values: int = DEFAULT_DISTINCT_CAP, today: date | None = None
) -> dict[str, Any]:
    """A model document (``Catalog.model_validate`` accepts it) drafted from ``facts``; see the module docstring.

    Fact tables: every table with a date of its own (not a load time or a birthday), and a table
    with measures that is the many side of a join and reaches the date of a header table (a fact
    that is itself the many side of a join: TPC-H's line items take the order's date). A date of a
    plain dimension table is never borrowed: counting challenges by their baker's first episode
    would answer a period wrongly. Each fact gets a source, a row count named from the table in
    words ("number of flights"), and a SUM or AVG per numeric column that is a measure
    (:func:`measure_of`). Attribute dimensions: text columns of the facts and every table they
    reach; those with more than ``max_values`` values keep ``max_values`` (the engine indexes that
    many and asks the warehouse about any other value a question names). When the data ends more
    than a month before ``today`` (default: the real today), the draft reads it as of its end
    (``as_of``) and answers a question naming no period over every row (``default_window: all``).
    """
    if max_values < 1:
        raise ValueError("max_values must be at least 1")
    today = today or date.today()
    cap = min(max_values, facts.distinct_cap)
    tables = list(facts.tables)
    by_name = {t.name: t for t in tables}
    joins = guess_joins(tables, facts.foreign_keys)
    aliases = table_aliases(tables)
    many_side = {(j.left, c) for j in joins for c, _ in j.pairs}
    one_side = {(j.right, c) for j in joins for _, c in j.pairs}

    def is_key(table: TableFacts, column: str) -> bool:
        return column in table.primary_key or (table.name, column) in many_side | one_side or is_key_name(column)

    def measures(table: TableFacts) -> list[tuple[ColumnFacts, Measure]]:
        found = [(c, measure_of(table, c)) for c in table.columns if c.family == "numeric" and not is_key(table, c.name)]
        return [(c, m) for c, m in found if m is not None]

    headers = {j.left for j in joins}  # tables that are the many side of a join
    own_period = {t.name: next(iter(period_columns(t)), None) for t in tables}
    fact_list: list[_Fact] = []
    left_out: list[str] = []
    for table in tables:
        reachable = _reachable(table.name, joins)
        own = own_period[table.name]
        if own is not None:
            fact_list.append(_Fact(table, own.name, reachable))
            continue
        if not measures(table):
            continue
        header = next((t for t in reachable[1:] if t in headers and own_period[t] is not None), None) if table.name in headers else None
        if header is None:
            left_out.append(table.name)
            continue
        dated = own_period[header]
        assert dated is not None
        fact_list.append(_Fact(table, f"{header}.{dated.name}", reachable))

    # attribute dimensions: text columns of every table a fact reaches; a text join key is a dimension
    # on the many side (the fact's own values, no join needed), never on the one side
    def dimension_column(table: TableFacts, column: ColumnFacts) -> bool:
        keyed = column.name in table.primary_key or (table.name, column.name) in one_side or is_key_name(column.name)
        return (
            column.family == "text"
            and not keyed
            and column.distinct_count is not None
            and column.distinct_count > 0
            and not _english_twin(table, column.name)
            and not _free_text(column)
        )

    dim_tables = list(dict.fromkeys(t for f in fact_list for t in f.reachable))
    dim_columns = [(by_name[t], c) for t in dim_tables for c in by_name[t].columns if dimension_column(by_name[t], c)]
    repeated = {c.name for _, c in dim_columns if sum(1 for _, o in dim_columns if o.name == c.name) > 1}

    metric_columns = [(f, c) for f in fact_list for c, _ in measures(f.table)]
    metric_repeated = {c.name for _, c in metric_columns if sum(1 for _, o in metric_columns if o.name == c.name) > 1}
    reserved_names = set(GRAINS)

    dimension_names: dict[tuple[str, str], str] = {}
    for table, column in dim_columns:
        dim_name = f"{table.name}_{column.name}" if column.name in repeated or column.name in GRAINS else column.name
        dimension_names[(table.name, column.name)] = dim_name
        reserved_names.add(dim_name)

    labels = _unique_labels([(table.name, _words(column.name, table_prefix(table))) for table, column in dim_columns])
    dimensions: list[dict[str, Any]] = []
    entity_values: list[dict[str, Any]] = []
    for (table, column), label in zip(dim_columns, labels, strict=True):
        dim_name = dimension_names[(table.name, column.name)]
        paths = [
            f"from {f.table.name} via {' -> '.join(_path(f.table.name, table.name, joins))}"
            for f in fact_list
            if table.name in f.reachable and f.table.name != table.name
        ]
        count = column.distinct_count or 0
        many = count > cap
        definition = f"Draft: {table.name}.{column.name} ({count:,} values" + (
            f"; {cap} are indexed, any other a question names is looked up in the warehouse)" if many else ")"
        ) + ("; joined " + "; ".join(paths) if paths else "")
        nouns = list(dict.fromkeys([label, _plural(label)]))
        dimension: dict[str, Any] = {
            "name": dim_name,
            "kind": "attribute",
            "zh": label,
            "en": label,
            "nouns_en": nouns,
            "table": table.name,
            "column": column.name,
        }
        twin = _english_twin_of(table, column.name)
        if twin:
            dimension["en_column"] = twin
        if many:
            dimension["max_values"] = cap
            dimension["index_values"] = True
        dimension["definition_zh"] = definition
        dimension["definition_en"] = definition
        dimensions.append(dimension)
        if column.values and not many:
            entity_values.append({"dimension": dim_name, "values": list(column.values[:cap])})
    if fact_list:
        for grain in GRAINS:
            dimensions.append({"name": grain, "kind": "time", "zh": grain, "en": grain, "grain": grain,
                               "definition_zh": f"Draft: the {grain} of each metric's time column",
                               "definition_en": f"Draft: the {grain} of each metric's time column"})  # fmt: skip

    sources: list[dict[str, Any]] = []
    metrics: list[dict[str, Any]] = []
    metric_names: set[str] = set()

    def unique_metric(candidate: str, table: str) -> str:
        chosen = candidate if candidate not in reserved_names and candidate not in metric_names else f"{table}_{candidate}"
        n = 1
        while chosen in reserved_names or chosen in metric_names:
            n += 1
            chosen = f"{table}_{candidate}_{n}"
        metric_names.add(chosen)
        return chosen

    newest: list[date] = []
    for fact in fact_list:
        table = fact.table
        alias = aliases[table.name]
        source = table.name
        others = [c.name for c in period_columns(table) if c.name != fact.time_column]
        # Which of several dates a period means only a person knows: with others listed, a question
        # naming a period asks which (a curator who settles it removes them).
        sources.append({"name": source, "table": table.name, "time_column": fact.time_column,
                        **({"other_time_columns": others} if others else {})})  # fmt: skip
        dated_table, _, dated_column = fact.time_column.rpartition(".")
        dated = by_name[dated_table or table.name].column(dated_column)
        last = _day(dated.high) if dated is not None else None
        if last is not None:
            newest.append(last)
        dated_by = f"by {fact.time_column}" + (f" (other dates: {', '.join(others)})" if others else "")
        reachable_dims = [dimension_names[(t.name, c.name)] for t, c in dim_columns if t.name in fact.reachable]
        metric_dims = [*reachable_dims, *GRAINS]
        prefix = table_prefix(table)
        count_name = unique_metric(f"{table.name}_count", table.name)
        things = table_words(table.name)
        thing = things if sum(1 for f in fact_list if table_words(f.table.name) == things) == 1 else table.name.replace("_", " ")
        label = f"number of {thing}"
        *first, last_word = thing.split(" ")
        singular = " ".join([*first, _singular(last_word)])
        definition = f"Draft: the number of {table.name} rows, {dated_by}"
        metrics.append({
            "name": count_name, "zh": label, "en": label,
            # not the bare noun: "the years of the flights" would read as the number of flights
            "synonyms_en": list(dict.fromkeys([label, f"how many {thing}", f"count of {thing}", f"{singular} count"])),
            "kind": "count", "source": source, "expression": "COUNT(*)",
            "dimensions": metric_dims, "formula": f"COUNT(*) FROM {table.name}",
            "definition_zh": definition, "definition_en": definition,
        })  # fmt: skip
        for column, measure in measures(table):
            metric_name = unique_metric(f"{table.name}_{column.name}" if column.name in metric_repeated else column.name, table.name)
            words = _words(column.name, prefix) + (f" of {table.name}" if column.name in metric_repeated else "")
            if measure.aggregate == "AVG":
                label, synonyms = f"average {words}", [f"average {words}", f"mean {words}", f"avg {words}"]
            else:
                label, synonyms = words, [words, f"total {words}"]
            expression = f"{measure.aggregate}({alias}.{column.name})"
            definition = f"Draft: {measure.aggregate}({table.name}.{column.name}), {dated_by}; {measure.why}"
            entry: dict[str, Any] = {
                "name": metric_name, "zh": label, "en": label, "synonyms_en": list(dict.fromkeys(synonyms)),
                "kind": measure.kind, "source": source, "expression": expression, "dimensions": metric_dims,
                "formula": f"{measure.aggregate}({table.name}.{column.name})",
            }  # fmt: skip
            if measure.aggregate == "AVG":
                entry["additive"] = False
            entry["definition_zh"] = definition
            entry["definition_en"] = definition
            metrics.append(entry)

    model_tables = []
    for table in tables:
        entry = {"name": table.name}
        if facts.schema:
            entry["table"] = f"{facts.schema}.{table.name}"
        entry["alias"] = aliases[table.name]
        described = f"{table.row_count:,} rows" if table.row_count is not None else ""
        if table.primary_key:
            kind = "declared" if table.primary_key_declared else "inferred from unique data"
            described += f"; key ({', '.join(table.primary_key)}), {kind}"
        entry["description"] = described.strip("; ")
        entry["columns"] = {c.name: c.data_type for c in table.columns}
        model_tables.append(entry)

    description = (
        f"A DRAFT written by memtool model init from the {facts.dialect} warehouse"
        + (f" (schema {facts.schema})" if facts.schema else "")
        + f": {len(tables)} tables, {len(joins)} joins ({sum(j.declared for j in joins)} declared, the rest guessed from "
        f"key names), {len(metrics)} metrics, {len(dimensions)} dimensions. Every name, label and definition is a "
        "guess until curated."
    )
    if left_out:
        description += (
            f" Tables with measures but no date of their own or of a header table they join, left out as facts: {', '.join(left_out)}."
        )
    if facts.skipped:
        description += f" Names left out (not plain lower-case identifiers): {', '.join(facts.skipped)}."
    for note in facts.notes:
        description += f" Note: {note}."
    document: dict[str, Any] = {
        "format": "memtool.semantic-model/1",
        "name": name,
        "model_version": DRAFT_VERSION,
        "description": description,
        "subject_en": f"the {name} data warehouse",
        "tables": model_tables,
        "joins": [{"left": j.left, "right": j.right, "on": j.on()} for j in joins],
        "sources": sources,
        "metrics": metrics,
        "dimensions": dimensions,
        "entity_values": entity_values,
    }
    if newest and max(newest) < add_months(month_start(today), -1):
        last_day = max(newest)
        document["as_of"] = (last_day + timedelta(days=1)).isoformat()
        document["default_window"] = "all"
        description += (
            f" The data ends on {last_day.isoformat()}, more than a month before this draft ({today.isoformat()}): "
            f"relative periods are read as of {document['as_of']} (as_of) and a question naming no period covers every "
            "row (default_window: all)."
        )
        document["description"] = description
    return document


def _free_text(column: ColumnFacts) -> bool:
    if _FREE_TEXT_WORDS.search(column.name.lower()):
        return True
    if column.mean_length is not None:
        return column.mean_length > FREE_TEXT_LENGTH
    return bool(column.values) and sum(map(len, column.values)) / len(column.values) > FREE_TEXT_LENGTH


def _unique_labels(labelled: Sequence[tuple[str, str]]) -> list[str]:
    """Labels as given, but a label two tables share becomes ``<table> <label>`` (``nation name``)."""
    counts: dict[str, int] = {}
    for _, label in labelled:
        counts[label] = counts.get(label, 0) + 1
    return [f"{table.replace('_', ' ')} {label}" if counts[label] > 1 else label for table, label in labelled]


def _english_twin_of(table: TableFacts, column: str) -> str | None:
    """``city`` -> ``city_en``, ``channel_name`` -> ``channel_en``: a column holding each value's English name."""
    stem = column.removesuffix("_name")
    for candidate in (f"{column}_en", f"{stem}_en"):
        if candidate != column and table.column(candidate) is not None:
            return candidate
    return None


def _english_twin(table: TableFacts, column: str) -> bool:
    """Whether ``column`` is the English twin of another text column (not a dimension of its own)."""
    if not column.endswith("_en"):
        return False
    return any(_english_twin_of(table, other.name) == column for other in table.columns if other.name != column)


# ---- YAML --------------------------------------------------------------------------------------

_HEADER = """\
# A DRAFT semantic model, written by `memtool model init` from the warehouse's live schema.
# Format: memtool.semantic-model/1 (docs/semantic-model.md). It validates and compiles as it is,
# but every name and label is the column's and every definition says "Draft". Before using it:
#   - metrics: rename them, write zh labels and synonyms_zh / synonyms_en (the words users say),
#     definition_zh / definition_en, fix kind (money, count, ratio, decimal); each fact has a row
#     count ("number of ..."), and each numeric column a SUM, or an AVG when its name or values say
#     it does not add up (delays, prices, rates, negative values, fractions); delete the ones that
#     mean nothing, add ratios and distinct counts by hand.
#   - dimensions: zh labels, nouns_zh / nouns_en, group terms; check every join path named in a
#     definition (a table reached along two paths plays two roles: give it two table entries).
#   - sources: the time column of each fact, exclusions (test rows, cancelled or unpaid rows) and
#     details (one-to-many children such as refunds, summed per row before joining). A fact with
#     several dates lists the others in other_time_columns, and a question naming a period asks
#     which date it means; remove them once you know.
#   - ambiguous_terms, unsupported_terms, entity_aliases, outside_values, clarify_dimensions,
#     currency (default 元), and bump model_version on every change of a definition.
#   - entity_values holds at most --max-values values per dimension, read when this was drafted; a
#     dimension with more values has max_values set: a value a question names beyond those is looked
#     up in the warehouse.
"""


def to_yaml(document: dict[str, Any]) -> str:
    """The document as YAML under a header saying what to curate (and, for a historical data set, that
    it is read as of its end)."""
    import yaml  # lazily: only the command line writes YAML

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # every metric's dimension list spelled out, no &id001 / *id001
            return True

    body = yaml.dump(document, Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=120, default_flow_style=False)
    header = _HEADER
    if document.get("as_of"):
        header += (
            f"# The data ends before {document['as_of']}, more than a month before this draft was written: as_of reads\n"
            "# relative periods (last month, this year) as of then, and default_window: all answers a question that\n"
            "# names no period over every row. Remove both if the warehouse is loaded again up to today.\n"
        )
    return header + body


def metric_dimension_pairs(document: dict[str, Any]) -> Iterable[tuple[str, str]]:
    """Every (metric, dimension) the draft offers, for checking that each compiles and runs."""
    for metric in document.get("metrics", []):
        for dimension in metric["dimensions"]:
            yield metric["name"], dimension


__all__ = [
    "ColumnFacts",
    "ForeignKey",
    "Join",
    "TableFacts",
    "WarehouseFacts",
    "columns_sql",
    "draft_model",
    "foreign_keys_sql",
    "guess_joins",
    "is_key_name",
    "key_entity",
    "metric_dimension_pairs",
    "primary_keys_sql",
    "read_catalog_facts",
    "table_aliases",
    "table_entity",
    "to_yaml",
    "type_family",
]
