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
from dataclasses import dataclass, field
from typing import Any

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
_TEXT = re.compile(r"^(varchar|character varying|character|char|bpchar|text|string|nvarchar|nchar|\"char\")\b")
_TIME = re.compile(r"^(date|timestamp|timestamptz|datetime)\b")


# ---- what the warehouse says -------------------------------------------------------------------


@dataclass(frozen=True)
class ColumnFacts:
    name: str
    data_type: str  # as the engine spells it (DECIMAL(15,2), character varying, ...)
    distinct_count: int | None = None  # text columns: distinct non-null values, at most the cap + 1
    values: tuple[str, ...] = ()  # text columns within the cap: their distinct values, sorted

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
        facts: list[ColumnFacts] = []
        for column, data_type in spelled:
            if type_family(data_type) != "text":
                facts.append(ColumnFacts(column, data_type))
                continue
            sample = run(
                f"SELECT DISTINCT {q(column)} FROM {source} WHERE {q(column)} IS NOT NULL LIMIT {distinct_cap + 1}",
                max_rows=distinct_cap + 1,
            )
            values = tuple(sorted(str(row[0]) for row in sample)) if len(sample) <= distinct_cap else ()
            facts.append(ColumnFacts(column, data_type, distinct_count=len(sample), values=values))
        primary_key = tuple(c for c in declared.get(table, ()) if any(c == f.name for f in facts))
        is_declared = bool(primary_key)
        if not primary_key and row_count > 0:
            primary_key = _unique_key(run, source, [c for c, _ in spelled], row_count)
        tables.append(TableFacts(table, tuple(facts), primary_key, is_declared, row_count))
        report(f"{table}: {row_count:,} rows" + (f", key ({', '.join(primary_key)})" if primary_key else ""))
    return WarehouseFacts(dialect, schema, tuple(tables), tuple(foreign), distinct_cap, tuple(skipped), tuple(notes))


def _plain(name: str, dialect: str) -> bool:
    """A name the compiler can write unquoted (PostgreSQL folds unquoted names to lower case)."""
    return bool(_PLAIN_NAME.match(name)) and (dialect == "duckdb" or name == name.lower())


def _unique_key(run: Callable[..., list[list[Any]]], source: str, columns: Sequence[str], row_count: int) -> tuple[str, ...]:
    """The first key-named column, else the first two when both are key-named, if the data is unique on them."""
    keys = [c for c in columns if is_key_name(c)]
    if not keys:
        return ()
    first = keys[0]
    distinct, present = run(f"SELECT COUNT(DISTINCT {q(first)}), COUNT({q(first)}) FROM {source}", max_rows=1)[0]
    if distinct == row_count and present == row_count:
        return (first,)
    if len(columns) >= 2 and columns[0] == first and is_key_name(columns[1]):
        pair = f"{q(columns[0])}, {q(columns[1])}"
        distinct = run(f"SELECT COUNT(*) FROM (SELECT DISTINCT {pair} FROM {source}) AS keys", max_rows=1)[0][0]
        if distinct == row_count:
            return (columns[0], columns[1])
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


def _match_score(column: str, target_table: str, target_column: str) -> int:
    """How well ``column`` names the key ``target_column`` of ``target_table``: 3 the same name,
    2 the same entity (``l_orderkey`` / ``o_orderkey``; ``customer_id`` / customers.id), 1 an
    abbreviation of it (``cust_key`` / customer.id), 0 no match."""
    mine = key_entity(column)
    if mine is None:
        return 0
    theirs = key_entity(target_column)
    if column.lower() == target_column.lower() and theirs is not None:
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


def _metric_kind(column: ColumnFacts) -> str:
    """count for quantity-like names, money for DECIMAL or money-like names, else count."""
    name = column.name.lower()
    if _QUANTITY_WORDS.search(name):
        return "count"
    if column.data_type.lower().startswith(("decimal", "numeric")) or _MONEY_WORDS.search(name):
        return "money"
    return "count"


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


def draft_model(facts: WarehouseFacts, *, name: str, max_values: int = DEFAULT_DISTINCT_CAP) -> dict[str, Any]:
    """A model document (``Catalog.model_validate`` accepts it) drafted from ``facts``; see the module docstring.

    Fact tables: tables with numeric non-key columns that join to another table, or that no join
    touches (a flat table), and that have a date of their own or one reachable by joins. Each gets
    a source, a SUM metric per numeric non-key column and a row count. Attribute dimensions: text
    columns of the facts and every table they reach with at most ``max_values`` distinct values.
    """
    if max_values < 1:
        raise ValueError("max_values must be at least 1")
    tables = list(facts.tables)
    by_name = {t.name: t for t in tables}
    joins = guess_joins(tables, facts.foreign_keys)
    aliases = table_aliases(tables)
    joined_columns = {(j.left, c) for j in joins for c, _ in j.pairs} | {(j.right, c) for j in joins for _, c in j.pairs}

    def is_key(table: TableFacts, column: str) -> bool:
        return column in table.primary_key or (table.name, column) in joined_columns or is_key_name(column)

    def measures(table: TableFacts) -> list[ColumnFacts]:
        return [c for c in table.columns if c.family == "numeric" and not is_key(table, c.name)]

    touched = {j.left for j in joins} | {j.right for j in joins}
    fact_list: list[_Fact] = []
    left_out: list[str] = []
    for table in tables:
        if not measures(table) or (table.name in touched and not any(j.left == table.name for j in joins)):
            continue
        reachable = _reachable(table.name, joins)
        time_column = None
        for other in reachable:
            dated = next((c.name for c in by_name[other].columns if c.family == "time"), None)
            if dated:
                time_column = dated if other == table.name else f"{other}.{dated}"
                break
        if time_column is None:
            left_out.append(table.name)
            continue
        fact_list.append(_Fact(table, time_column, reachable))

    # attribute dimensions: low-cardinality text columns of every table a fact reaches
    def dimension_column(table: TableFacts, column: ColumnFacts) -> bool:
        return (
            column.family == "text"
            and not is_key(table, column.name)
            and column.distinct_count is not None
            and 0 < column.distinct_count <= min(max_values, facts.distinct_cap)
            and not _english_twin(table, column.name)
            and not _free_text(column)
        )

    dim_tables = list(dict.fromkeys(t for f in fact_list for t in f.reachable))
    dim_columns = [(by_name[t], c) for t in dim_tables for c in by_name[t].columns if dimension_column(by_name[t], c)]
    repeated = {c.name for _, c in dim_columns if sum(1 for _, o in dim_columns if o.name == c.name) > 1}

    metric_columns = [(f, c) for f in fact_list for c in measures(f.table)]
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
        definition = f"Draft: {table.name}.{column.name} ({column.distinct_count} values)" + (
            "; joined " + "; ".join(paths) if paths else ""
        )
        dimension: dict[str, Any] = {
            "name": dim_name,
            "kind": "attribute",
            "zh": label,
            "en": label,
            "nouns_en": [label],
            "table": table.name,
            "column": column.name,
        }
        twin = _english_twin_of(table, column.name)
        if twin:
            dimension["en_column"] = twin
        dimension["definition_zh"] = definition
        dimension["definition_en"] = definition
        dimensions.append(dimension)
        entity_values.append({"dimension": dim_name, "values": list(column.values[:max_values])})
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

    for fact in fact_list:
        table = fact.table
        alias = aliases[table.name]
        source = table.name
        sources.append({"name": source, "table": table.name, "time_column": fact.time_column})
        reachable_dims = [dimension_names[(t.name, c.name)] for t, c in dim_columns if t.name in fact.reachable]
        metric_dims = [*reachable_dims, *GRAINS]
        prefix = table_prefix(table)
        for column in measures(table):
            metric_name = unique_metric(f"{table.name}_{column.name}" if column.name in metric_repeated else column.name, table.name)
            label = _words(column.name, prefix) + (f" of {table.name}" if column.name in metric_repeated else "")
            definition = f"Draft: SUM({table.name}.{column.name}), by {fact.time_column}"
            metrics.append({
                "name": metric_name, "zh": label, "en": label, "kind": _metric_kind(column), "source": source,
                "expression": f"SUM({alias}.{column.name})", "dimensions": metric_dims,
                "formula": f"SUM({table.name}.{column.name})", "definition_zh": definition, "definition_en": definition,
            })  # fmt: skip
        count_name = unique_metric(f"{table.name}_count", table.name)
        label = f"{table.name} rows"
        definition = f"Draft: the number of {table.name} rows, by {fact.time_column}"
        metrics.append({
            "name": count_name, "zh": label, "en": label, "kind": "count", "source": source, "expression": "COUNT(*)",
            "dimensions": metric_dims, "formula": f"COUNT(*) FROM {table.name}",
            "definition_zh": definition, "definition_en": definition,
        })  # fmt: skip

    model_tables = []
    for table in tables:
        entry: dict[str, Any] = {"name": table.name}
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
        description += f" Tables with measures but no date reachable, left out as facts: {', '.join(left_out)}."
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
    return document


def _free_text(column: ColumnFacts) -> bool:
    if _FREE_TEXT_WORDS.search(column.name.lower()):
        return True
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
#     definition_zh / definition_en, fix kind (money, count, ratio) and delete the sums that mean
#     nothing (keys, rates, priorities); add ratios and distinct counts by hand.
#   - dimensions: zh labels, nouns_zh / nouns_en, group terms; check every join path named in a
#     definition (a table reached along two paths plays two roles: give it two table entries).
#   - sources: the time column of each fact, exclusions (test rows, cancelled or unpaid rows) and
#     details (one-to-many children such as refunds, summed per row before joining).
#   - ambiguous_terms, unsupported_terms, entity_aliases, outside_values, clarify_dimensions,
#     currency (default 元), and bump model_version on every change of a definition.
#   - entity_values holds at most --max-values values per dimension, read when this was drafted.
"""


def to_yaml(document: dict[str, Any]) -> str:
    """The document as YAML under a header saying what to curate."""
    import yaml  # lazily: only the command line writes YAML

    body = yaml.safe_dump(document, allow_unicode=True, sort_keys=False, width=120, default_flow_style=False)
    return _HEADER + body


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
