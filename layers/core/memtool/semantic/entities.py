"""Entity values: the names users say for warehouse values (上海 / Shanghai -> city 上海).

The index is built from the warehouse itself (SELECT DISTINCT over each dimension's columns,
Chinese and English) so a new product is recognised without a code change; ``EntityIndex.static``
falls back to the values the semantic model lists (``entity_values``) when no warehouse is
reachable. Every name resolves to the warehouse's own value,
so "Shanghai" and "上海" produce the same filter and the same cache key.

A dimension over the same column as another (one table in two roles: the origin and the destination
airport, the customer's and the supplier's nation) that has no values of its own read
(``index_values: false``) takes the other's: a value of the second role resolves through the first
role's names, and the words around it in a question say which role it is.

A value that is an everyday word (the refund reason 其他, "other") is recognised only by its
aliases (其他原因, "other reasons"): on its own it would turn "其他渠道" into a refund-reason filter.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from memtool.semantic.catalog import Catalog, Lang
from memtool.sql.warehouse import Warehouse


@dataclass(frozen=True)
class EntityValue:
    dimension: str  # catalog dimension, e.g. "city"
    value: str  # the warehouse value the filter uses, e.g. "上海"
    label_en: str | None = None  # the English name, when the warehouse or catalog has one
    names: tuple[str, ...] = ()  # every surface form: value (unless an everyday word), English name, aliases, short names

    def label(self, lang: Lang) -> str:
        return self.label_en if lang == "en" and self.label_en else self.value


@dataclass(frozen=True)
class OutsideName:
    """A name of something the warehouse does not hold (西安): recognised only to ask about it."""

    dimension: str
    name: str


# (dimension, value) -> whether the warehouse holds the value, for dimensions whose values are not indexed.
ValueProbe = Callable[[str, str], bool]


@dataclass
class EntityIndex:
    values: list[EntityValue]
    outside: list[OutsideName] = field(default_factory=list)
    source: str = "static"  # "warehouse" | "static"
    probe: ValueProbe | None = None  # asks the warehouse about a value of a dimension that is not indexed
    capped: frozenset[str] = frozenset()  # dimensions with more values than were indexed (max_values)
    borrowed: dict[str, str] = field(default_factory=dict)  # a second role -> the role whose values it took

    def __post_init__(self) -> None:
        self._probed: dict[tuple[str, str], bool] = {}
        self._by_name: dict[str, list[EntityValue]] = {}
        self._values_of: dict[str, set[str]] = {}
        for entity in self.values:
            self._values_of.setdefault(entity.dimension, set()).add(entity.value)
            for name in (entity.value, *entity.names):  # the value itself always resolves, even when not a surface form
                bucket = self._by_name.setdefault(_key(name), [])
                if entity not in bucket:
                    bucket.append(entity)

    # ---- building -------------------------------------------------------------------------

    @classmethod
    def from_warehouse(cls, warehouse: Warehouse, catalog: Catalog, *, timeout_seconds: float = 10.0) -> EntityIndex:
        """Distinct values of every attribute dimension, read from the warehouse (Chinese + English),
        at most the dimension's ``max_values`` of each."""
        raw: list[tuple[str, str, str | None]] = []
        capped: set[str] = set()
        for dimension in catalog.attribute_dimensions:
            if not dimension.index_values:
                continue
            assert dimension.table is not None
            table = catalog.table(dimension.table).physical
            columns = dimension.column if dimension.en_column is None else f"{dimension.column}, {dimension.en_column}"
            cap = dimension.max_values
            sql = f"SELECT DISTINCT {columns} FROM {table} WHERE {dimension.column} IS NOT NULL ORDER BY 1 LIMIT {cap}"
            result = warehouse.run(sql, max_rows=cap, timeout_seconds=timeout_seconds)
            if len(result.rows) >= cap or result.truncated:
                capped.add(dimension.name)
            for row in result.rows:
                value = str(row[0]).strip()
                english = str(row[1]).strip() if len(row) > 1 and row[1] is not None else None
                if value:
                    raw.append((dimension.name, value, english or None))
        def probe(dimension: str, value: str) -> bool:
            spec = catalog.dimension(dimension)
            assert spec.table is not None and spec.column is not None
            table = catalog.table(spec.table).physical
            # the value is bound by the adapter (%s), never formatted into the text
            sql = f"SELECT 1 FROM {table} WHERE {spec.column} = %s LIMIT 1"
            return bool(warehouse.run(sql, max_rows=1, timeout_seconds=timeout_seconds, params=[value]).rows)

        index = cls._assemble(raw, catalog, source="warehouse")
        # a second role over a capped column is capped too: its values are the first role's
        capped |= {role for role, first in index.borrowed.items() if first in capped}
        index.probe, index.capped = probe, frozenset(capped)
        return index

    @classmethod
    def static(cls, catalog: Catalog) -> EntityIndex:
        """The values the model lists; the rest (products, customers) need the warehouse."""
        raw: list[tuple[str, str, str | None]] = []
        for item in catalog.entity_values:
            english = list(item.english) + [None] * (len(item.values) - len(item.english))
            raw.extend((item.dimension, value, name) for value, name in zip(item.values, english, strict=False))
        return cls._assemble(raw, catalog, source="static")

    @classmethod
    def _assemble(cls, raw: Iterable[tuple[str, str, str | None]], catalog: Catalog, *, source: str) -> EntityIndex:
        aliases: dict[tuple[str, str], list[str]] = {}
        for alias in catalog.entity_aliases:
            aliases.setdefault((alias.dimension, alias.value), []).extend(alias.aliases)
        values: list[EntityValue] = []
        seen: set[tuple[str, str]] = set()
        for dimension, value, english in raw:
            if (dimension, value) in seen:
                continue
            seen.add((dimension, value))
            values.append(_entity_value(dimension, value, english, aliases.get((dimension, value), []), catalog))
        borrowed = _borrow_role_values(values, catalog)
        known = {_key(name) for entity in values for name in entity.names}
        outside = [
            OutsideName(item.dimension, name)
            for item in catalog.outside_values
            for name in item.names
            if _key(name) not in known
        ]
        return cls(values, outside, source, borrowed=borrowed)

    # ---- reading --------------------------------------------------------------------------

    def lookup(self, name: str) -> list[EntityValue]:
        """Every value ``name`` can mean (usually one; two when, say, a brand equals a product)."""
        return list(self._by_name.get(_key(name), ()))

    def resolve(self, dimension: str, name: str) -> EntityValue | None:
        """The value of ``dimension`` that ``name`` names, or None."""
        return next((e for e in self.lookup(name) if e.dimension == dimension), None)

    def holds(self, dimension: str, value: str) -> bool:
        """Whether ``value`` is a value of ``dimension`` as the warehouse has it (exactly, as a filter
        compares it): from the index, or, for a dimension whose values are not indexed, by asking the
        warehouse (once per value). A value read back from stored state (a session's turn, a
        clarification's option, a correction) is used in SQL only when this holds."""
        if not isinstance(value, str) or not value:
            return False
        indexed = self._values_of.get(dimension)
        if indexed is not None and (value in indexed or dimension not in self.capped):
            return value in indexed
        if self.probe is None:
            return False
        key = (dimension, value)
        if key not in self._probed:
            try:
                self._probed[key] = self.probe(dimension, value)
            except Exception:  # noqa: BLE001 - a value that cannot be confirmed is not used
                return False
            if len(self._probed) > 4096:
                self._probed.pop(next(iter(self._probed)))
        return self._probed[key]

    def needs_probe(self, dimension: str) -> bool:
        """Whether a value of ``dimension`` missing from the index may still be held: the dimension
        is not indexed, or has more values than were read (its cap), and the warehouse can be asked."""
        return self.probe is not None and (dimension not in self._values_of or dimension in self.capped)

    def of(self, dimension: str) -> list[EntityValue]:
        return [e for e in self.values if e.dimension == dimension]

    def labels(self, dimension: str, lang: Lang) -> list[str]:
        return [e.label(lang) for e in self.of(dimension)]

    def surface_forms(self) -> list[tuple[str, EntityValue]]:
        """(name, value) pairs to look for in a question, longest names first."""
        pairs = [(name, entity) for entity in self.values for name in entity.names]
        return sorted(pairs, key=lambda pair: -len(pair[0]))

    def dimensions(self) -> set[str]:
        return {e.dimension for e in self.values}


def _entity_value(dimension: str, value: str, english: str | None, extra: list[str], catalog: Catalog) -> EntityValue:
    """One value with its names: itself (unless an everyday word), its English name (also with
    spaces for underscores), the catalog's aliases and, for the product dimension, its short names."""
    shortener = catalog.product_short_names
    names = [] if _key(value) in _EVERYDAY_WORDS else [value]
    if english:
        names.append(english)
        if "_" in english:  # retail_pharmacy -> "retail pharmacy"
            names.append(english.replace("_", " "))
    names.extend(extra)
    if dimension == shortener.dimension:
        names.extend(n for n in (shortener.short_zh(value), english and shortener.short_en(english)) if n)
    label_en = english.replace("_", " ") if english else next((a for a in extra if a.isascii()), None)
    return EntityValue(dimension, value, label_en, tuple(dict.fromkeys(names)))


def _borrow_role_values(values: list[EntityValue], catalog: Catalog) -> dict[str, str]:
    """A second role with no values of its own takes the first role's that has some (appended to
    ``values``); returns each such role -> the role it borrowed from."""
    borrowed: dict[str, str] = {}
    has_values = {entity.dimension for entity in values}
    for dimension, roles in role_siblings(catalog).items():
        first = next((role for role in roles if role in has_values), None)
        if dimension in has_values or first is None:
            continue
        borrowed[dimension] = first
        values.extend([EntityValue(dimension, e.value, e.label_en, e.names) for e in values if e.dimension == first])
    return borrowed


def role_siblings(catalog: Catalog) -> dict[str, tuple[str, ...]]:
    """The attribute dimensions over one warehouse column through different model tables (the
    origin and destination airport, the customer's and the supplier's nation): each dimension of
    such a group -> the whole group, in the model's order. Dimensions alone on their column are absent."""
    groups: dict[tuple[str, str], list[str]] = {}
    for dimension in catalog.attribute_dimensions:
        if dimension.table is None or dimension.column is None:
            continue
        try:
            physical = catalog.table(dimension.table).physical
        except KeyError:
            physical = dimension.table
        key = (physical.lower(), dimension.column.lower())
        groups.setdefault(key, []).append(dimension.name)
    return {name: tuple(group) for group in groups.values() if len(group) > 1 for name in group}


_SPACES = re.compile(r"[\s_\-]+")
# Values too common as words to recognise on their own; their catalog aliases still name them.
_EVERYDAY_WORDS = frozenset({"其他", "其它", "other", "others", "unknown", "未知", "n/a", "none"})


def _key(name: str) -> str:
    """Names compare case- and separator-insensitively: "E-commerce" == "ecommerce" == "e commerce"."""
    return _SPACES.sub("", name.strip().lower())
