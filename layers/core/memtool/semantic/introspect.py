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

Where it lives: the facts, their reading and the key-name rules in memtool.semantic.introspect_facts,
the measure rules in memtool.semantic.introspect_measures (both imported back here); the joins,
aliases, the draft itself and the YAML here.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from memtool.semantic.introspect_facts import (
    DEFAULT_DISTINCT_CAP,
    TABLE_AFFIXES,
    ColumnFacts,
    ForeignKey,
    TableFacts,
    WarehouseFacts,
    columns_sql,
    day_of,
    foreign_keys_sql,
    is_key_name,
    key_entity,
    primary_keys_sql,
    read_catalog_facts,
    singular_word,
    table_entity,
    table_prefix,
    type_family,
    word_tokens,
)
from memtool.semantic.introspect_facts import DEFAULT_TIMEOUT_SECONDS as DEFAULT_TIMEOUT_SECONDS
from memtool.semantic.introspect_facts import MAX_COLUMNS as MAX_COLUMNS
from memtool.semantic.introspect_measures import Measure, measure_of, numbered_dimension, one_row_per
from memtool.semantic.introspect_words import spoken_variants, time_dimension
from memtool.semantic.time_expressions import add_months, month_start

GRAINS = ("day", "week", "month", "quarter", "year")
DRAFT_VERSION = "draft"

# Free text, not a category, however few rows its table has (TPC-H's 25 nations have 25 comments).
_FREE_TEXT_WORDS = re.compile(r"comment|description|desc$|remark|note|address|phone|email|url")
FREE_TEXT_LENGTH = 40  # a sampled value longer than this on average: free text
# Words an alias may not be: the compiler writes ``FROM t AS <alias>``.
_RESERVED = frozenset(
    "all and any as asc at by case cast do else end for from full if in inner is join left like limit not null of "
    "off offset on or order outer right select some table then to union user using when where with".split()
)


# ---- joins and aliases -------------------------------------------------------------------------


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
    return [c for c in table.columns if c.family == "time" and not any(t in _NOT_A_PERIOD for t in word_tokens(c.name))]


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
    words = [w for w in TABLE_AFFIXES.sub("", table.lower()).split("_") if w] or [table.lower()]
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
    joined = _JoinedTables.of(facts)
    fact_list, left_out = _fact_tables(joined)

    dim_columns = joined.dimension_columns(fact_list)
    dimension_names = _dimension_names(dim_columns)
    dimensions, entity_values = _attribute_dimensions(joined, fact_list, dim_columns, dimension_names, cap)
    if fact_list:
        dimensions.extend(time_dimension(grain) for grain in GRAINS)
    sources, metrics, newest = _sources_and_metrics(joined, fact_list, dim_columns, dimension_names)

    document: dict[str, Any] = {
        "format": "memtool.semantic-model/1",
        "name": name,
        "model_version": DRAFT_VERSION,
        "description": _description(facts, joined.joins, len(metrics), len(dimensions), left_out),
        "subject_en": f"the {name} data warehouse",
        "tables": _model_tables(facts, joined.aliases),
        "joins": [{"left": j.left, "right": j.right, "on": j.on()} for j in joined.joins],
        "sources": sources,
        "metrics": metrics,
        "dimensions": dimensions,
        "entity_values": entity_values,
    }
    if newest and max(newest) < add_months(month_start(today), -1):
        _read_as_of_end(document, max(newest), today)
    return document


def _dimension_names(dim_columns: Sequence[tuple[TableFacts, ColumnFacts]]) -> dict[tuple[str, str], str]:
    """(table, column) -> the dimension's name: the column's, or ``<table>_<column>`` when two tables
    have the column or it is a grain's name."""
    repeated = {c.name for _, c in dim_columns if sum(1 for _, o in dim_columns if o.name == c.name) > 1}
    dimension_names: dict[tuple[str, str], str] = {}
    for table, column in dim_columns:
        dim_name = f"{table.name}_{column.name}" if column.name in repeated or column.name in GRAINS else column.name
        dimension_names[(table.name, column.name)] = dim_name
    return dimension_names


def _sources_and_metrics(
    joined: _JoinedTables,
    fact_list: Sequence[_Fact],
    dim_columns: Sequence[tuple[TableFacts, ColumnFacts]],
    dimension_names: dict[tuple[str, str], str],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[date]]:
    """Per fact: its source, its row count and a metric per measure column; and the last day of
    each fact's dates (to tell whether the data ends long before today)."""
    metric_names = _MetricNames({*GRAINS, *dimension_names.values()})
    metric_columns = [(f, c) for f in fact_list for c, _ in joined.measures(f.table)]
    metric_repeated = {c.name for _, c in metric_columns if sum(1 for _, o in metric_columns if o.name == c.name) > 1}
    sources: list[dict[str, Any]] = []
    metrics: list[dict[str, Any]] = []
    newest: list[date] = []
    for fact in fact_list:
        table = fact.table
        others = [c.name for c in period_columns(table) if c.name != fact.time_column]
        # Which of several dates a period means only a person knows: with others listed, a question
        # naming a period asks which (a curator who settles it removes them).
        sources.append({"name": table.name, "table": table.name, "time_column": fact.time_column,
                        **({"other_time_columns": others} if others else {})})  # fmt: skip
        dated_table, _, dated_column = fact.time_column.rpartition(".")
        dated = joined.by_name[dated_table or table.name].column(dated_column)
        last = day_of(dated.high) if dated is not None else None
        if last is not None:
            newest.append(last)
        dated_by = f"by {fact.time_column}" + (f" (other dates: {', '.join(others)})" if others else "")
        reachable_dims = [dimension_names[(t.name, c.name)] for t, c in dim_columns if t.name in fact.reachable]
        metric_dims = [*reachable_dims, *GRAINS]
        metrics.append(_count_metric(fact, fact_list, metric_names, metric_dims, dated_by))
        period = one_row_per(table, dated) if dated is not None and dated_table in ("", table.name) else None
        for column, found in joined.measures(table):
            repeated = column.name in metric_repeated
            measure = found
            if period is not None and found.aggregate == "SUM":  # a series of levels: a month's unemployed, not a flow
                why = f"averaged: one row per {period}, each a level of that {period}, whose sum over periods means nothing"
                measure = Measure("AVG", "money" if found.kind == "money" else "decimal", why)
            metrics.append(_measure_metric(joined, table, column, measure, metric_names, metric_dims, dated_by, repeated))
            if measure.aggregate == "SUM":  # "average order amount": a sum's column averaged over the rows
                average = Measure("AVG", "money" if measure.kind == "money" else "decimal", "the column averaged over the rows")
                metrics.append(
                    _measure_metric(joined, table, column, average, metric_names, metric_dims, dated_by, repeated, name_prefix="avg_")
                )
    return sources, metrics, newest


@dataclass(frozen=True)
class _JoinedTables:
    """The warehouse's tables with the joins guessed between them and their aliases: what every
    step of the draft reads (which columns are keys, which are measures, which are dimensions)."""

    tables: list[TableFacts]
    by_name: dict[str, TableFacts]
    joins: list[Join]
    aliases: dict[str, str]
    many_side: set[tuple[str, str]]  # (table, column) on the many side of a join
    one_side: set[tuple[str, str]]  # (table, column) on the one side of a join

    @classmethod
    def of(cls, facts: WarehouseFacts) -> _JoinedTables:
        tables = list(facts.tables)
        joins = guess_joins(tables, facts.foreign_keys)
        many_side = {(j.left, c) for j in joins for c, _ in j.pairs}
        one_side = {(j.right, c) for j in joins for _, c in j.pairs}
        return cls(tables, {t.name: t for t in tables}, joins, table_aliases(tables), many_side, one_side)

    def is_key(self, table: TableFacts, column: str) -> bool:
        return column in table.primary_key or (table.name, column) in self.many_side | self.one_side or is_key_name(column)

    def measures(self, table: TableFacts) -> list[tuple[ColumnFacts, Measure]]:
        found = [(c, measure_of(table, c)) for c in table.columns if c.family == "numeric" and not self.is_key(table, c.name)]
        return [(c, m) for c, m in found if m is not None]

    def dimension_column(self, table: TableFacts, column: ColumnFacts, cap: int = DEFAULT_DISTINCT_CAP) -> bool:
        """A text column with values that is no key, no English twin and no free text. A text join
        key is a dimension on the many side (the fact's own values, no join needed), never on the one side.
        Also a whole-number column that is no measure and holds at most ``cap`` values by its range
        (a series, an episode, a grade level): :func:`_numbered_dimension`."""
        keyed = column.name in table.primary_key or (table.name, column.name) in self.one_side or is_key_name(column.name)
        if column.family == "numeric":  # a part of a composite key (a series of episodes) groups; a whole key does not
            whole_key = table.primary_key == (column.name,) or is_key_name(column.name)
            unmeasured = measure_of(table, column) is None or self.is_key(table, column.name)
            return not whole_key and unmeasured and numbered_dimension(table, column, cap)
        return (
            column.family == "text"
            and not keyed
            and column.distinct_count is not None
            and column.distinct_count > 0
            and not _english_twin(table, column.name)
            and not _free_text(column)
        )

    def dimension_columns(self, fact_list: Sequence[_Fact]) -> list[tuple[TableFacts, ColumnFacts]]:
        """Attribute dimensions: the text columns of every table a fact reaches, in order."""
        dim_tables = list(dict.fromkeys(t for f in fact_list for t in f.reachable))
        return [(self.by_name[t], c) for t in dim_tables for c in self.by_name[t].columns if self.dimension_column(self.by_name[t], c)]


def _fact_tables(joined: _JoinedTables) -> tuple[list[_Fact], list[str]]:
    """The facts (see :func:`draft_model`) and the tables with measures left out for want of a date."""
    headers = {j.left for j in joined.joins}  # tables that are the many side of a join
    own_period = {t.name: next(iter(period_columns(t)), None) for t in joined.tables}
    fact_list: list[_Fact] = []
    left_out: list[str] = []
    for table in joined.tables:
        reachable = _reachable(table.name, joined.joins)
        own = own_period[table.name]
        if own is not None:
            fact_list.append(_Fact(table, own.name, reachable))
            continue
        if not joined.measures(table):
            continue
        header = next((t for t in reachable[1:] if t in headers and own_period[t] is not None), None) if table.name in headers else None
        if header is None:
            left_out.append(table.name)
            continue
        dated = own_period[header]
        assert dated is not None
        fact_list.append(_Fact(table, f"{header}.{dated.name}", reachable))
    return fact_list, left_out


def _attribute_dimensions(
    joined: _JoinedTables,
    fact_list: Sequence[_Fact],
    dim_columns: Sequence[tuple[TableFacts, ColumnFacts]],
    dimension_names: dict[tuple[str, str], str],
    cap: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The attribute dimensions, each with the join path from every fact that reaches it, and the
    entity values of those with at most ``cap`` values."""
    labels = _unique_labels([(table.name, _words(column.name, table_prefix(table))) for table, column in dim_columns])
    dimensions: list[dict[str, Any]] = []
    entity_values: list[dict[str, Any]] = []
    for (table, column), label in zip(dim_columns, labels, strict=True):
        dim_name = dimension_names[(table.name, column.name)]
        paths = [
            f"from {f.table.name} via {' -> '.join(_path(f.table.name, table.name, joined.joins))}"
            for f in fact_list
            if table.name in f.reachable and f.table.name != table.name
        ]
        many = (column.distinct_count or 0) > cap
        dimensions.append(_attribute_dimension(table, column, dim_name, label, paths, cap))
        if column.values and not many:
            entity_values.append({"dimension": dim_name, "values": list(column.values[:cap])})
    return dimensions, entity_values


def _attribute_dimension(
    table: TableFacts, column: ColumnFacts, dim_name: str, label: str, paths: Sequence[str], cap: int
) -> dict[str, Any]:
    count = column.distinct_count or 0
    many = count > cap
    counted = f"whole numbers {column.low} to {column.high}" if column.family == "numeric" else f"{count:,} values"
    definition = f"Draft: {table.name}.{column.name} ({counted}" + (
        f"; {cap} are indexed, any other a question names is looked up in the warehouse)" if many else ")"
    ) + ("; joined " + "; ".join(paths) if paths else "")
    nouns = list(dict.fromkeys([label, _plural(label)]))
    if column.family == "numeric":  # "by series" on either fact: each metric reaches one of them
        words = _words(column.name, table_prefix(table))
        nouns = list(dict.fromkeys([*nouns, words, _plural(words)]))
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
    return dimension


class _MetricNames:
    """Metric names, unique among themselves and apart from the dimensions' (``<table>_<name>``, then a number)."""

    def __init__(self, reserved: set[str]) -> None:
        self.reserved = reserved
        self.taken: set[str] = set()

    def unique(self, candidate: str, table: str) -> str:
        chosen = candidate if candidate not in self.reserved and candidate not in self.taken else f"{table}_{candidate}"
        n = 1
        while chosen in self.reserved or chosen in self.taken:
            n += 1
            chosen = f"{table}_{candidate}_{n}"
        self.taken.add(chosen)
        return chosen


def _count_metric(fact: _Fact, fact_list: Sequence[_Fact], names: _MetricNames, metric_dims: list[str], dated_by: str) -> dict[str, Any]:
    """The fact's row count, named from the table in words ("number of flights")."""
    table = fact.table
    count_name = names.unique(f"{table.name}_count", table.name)
    things = table_words(table.name)
    thing = things if sum(1 for f in fact_list if table_words(f.table.name) == things) == 1 else table.name.replace("_", " ")
    label = f"number of {thing}"
    *first, last_word = thing.split(" ")
    singular = " ".join([*first, singular_word(last_word)])
    definition = f"Draft: the number of {table.name} rows, {dated_by}"
    return {
        "name": count_name, "zh": label, "en": label,
        # not the bare noun: "the years of the flights" would read as the number of flights
        "synonyms_en": list(dict.fromkeys([label, f"how many {thing}", f"count of {thing}", f"{singular} count"])),
        "kind": "count", "source": table.name, "expression": "COUNT(*)",
        "dimensions": metric_dims, "formula": f"COUNT(*) FROM {table.name}",
        "definition_zh": definition, "definition_en": definition,
    }  # fmt: skip


def _measure_metric(
    joined: _JoinedTables,
    table: TableFacts,
    column: ColumnFacts,
    measure: Measure,
    names: _MetricNames,
    metric_dims: list[str],
    dated_by: str,
    repeated: bool,
    name_prefix: str = "",
) -> dict[str, Any]:
    """A SUM or AVG of one measure column (``repeated``: another fact has a measure of the same name)."""
    metric_name = names.unique(name_prefix + (f"{table.name}_{column.name}" if repeated else column.name), table.name)
    words = _words(column.name, table_prefix(table)) + (f" of {table.name}" if repeated else "")
    spoken = spoken_variants(words)
    if measure.aggregate == "AVG":
        label = f"average {words}"
        synonyms = [f"{lead} {w}" for w in [words, *spoken] for lead in ("average", "mean", "avg")]
        if not name_prefix:  # the column's one metric: its bare words mean it too ("arr delay", "unemploy in 2010")
            synonyms += [words, *spoken]
    else:
        label, synonyms = words, [words, *spoken, *(f"total {w}" for w in [words, *spoken])]
    expression = f"{measure.aggregate}({joined.aliases[table.name]}.{column.name})"
    definition = f"Draft: {measure.aggregate}({table.name}.{column.name}), {dated_by}; {measure.why}"
    entry: dict[str, Any] = {
        "name": metric_name, "zh": label, "en": label, "synonyms_en": list(dict.fromkeys(synonyms)),
        "kind": measure.kind, "source": table.name, "expression": expression, "dimensions": metric_dims,
        "formula": f"{measure.aggregate}({table.name}.{column.name})",
    }  # fmt: skip
    if measure.aggregate == "AVG":
        entry["additive"] = False
    entry["definition_zh"] = definition
    entry["definition_en"] = definition
    return entry


def _model_tables(facts: WarehouseFacts, aliases: dict[str, str]) -> list[dict[str, Any]]:
    """Every table, with its alias, a description (rows, key) and its columns' types."""
    model_tables = []
    for table in facts.tables:
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
    return model_tables


def _description(facts: WarehouseFacts, joins: Sequence[Join], metric_count: int, dimension_count: int, left_out: Sequence[str]) -> str:
    """The draft's description: where it came from, what it holds, and what was left out."""
    description = (
        f"A DRAFT written by memtool model init from the {facts.dialect} warehouse"
        + (f" (schema {facts.schema})" if facts.schema else "")
        + f": {len(facts.tables)} tables, {len(joins)} joins ({sum(j.declared for j in joins)} declared, the rest guessed from "
        f"key names), {metric_count} metrics, {dimension_count} dimensions. Every name, label and definition is a "
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
    return description


def _read_as_of_end(document: dict[str, Any], last_day: date, today: date) -> None:
    """Data that ends more than a month before ``today``: relative periods read as of its end, and a
    question naming no period covers every row."""
    document["as_of"] = (last_day + timedelta(days=1)).isoformat()
    document["default_window"] = "all"
    document["description"] += (
        f" The data ends on {last_day.isoformat()}, more than a month before this draft ({today.isoformat()}): "
        f"relative periods are read as of {document['as_of']} (as_of) and a question naming no period covers every "
        "row (default_window: all)."
    )


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
#     it does not add up (delays, prices, rates, negative values, fractions, decimals between 0
#     and 100); delete the ones that mean nothing, add ratios and distinct counts by hand.
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
