"""The semantic model: a tenant's warehouse described as data, in Chinese and English.

A model (YAML or JSON; the format is ``Catalog``, its JSON Schema ``model_json_schema()``, the
reference in docs/semantic-model.md) holds:

- ``tables`` (physical table, SQL alias, columns) and ``joins`` between them, from the many side
  to the one side, so the compiler finds each dimension's join path from a metric's fact table;
- ``sources``: the fact tables metrics are measured on, their default time column, their
  row-level exclusions (test lines, unpaid lines) and their ``details``: one-to-many child tables
  summed per fact row (refunds per order line) before they are joined back;
- ``metrics`` (an aggregate SQL expression over the aliases, time column, filters, unit, kind),
  ``dimensions`` (attribute columns reached by joins, or time grains) and their entity values;
- synonyms, ambiguous and unsupported terms, entity aliases and values the warehouse lacks.

The code knows no table, column, metric or dimension of any warehouse: everything it compiles,
guards and prompts with comes from the model in force for the tenant. Definitions are what
business_knowledge_qa cites; ``model_version`` values go into the SQL cache key, so a changed
definition never serves a stale query.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from memtool.semantic.intent import Intent

Lang = Literal["zh", "en"]
MetricKind = Literal["money", "count", "ratio", "decimal"]  # decimal: a plain number, rounded to 2
MODEL_FORMAT = "memtool.semantic-model/1"
_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_QUALIFIED = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$"


class TableSpec(BaseModel):
    """One table of the warehouse under a name of the model's own (one physical table may play two
    roles, the nation of a customer and the nation of a supplier: two entries, one ``table``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME, description="the model's name for the table; joins, sources and dimensions use it")
    table: str | None = Field(None, pattern=_QUALIFIED, description="the warehouse table (schema.table allowed); default: name")
    alias: str = Field(pattern=_NAME, description="the SQL alias expressions in this model use for it")
    description: str = ""
    columns: dict[str, str] = Field(default_factory=dict, description="column -> type, as the warehouse spells it")

    @property
    def physical(self) -> str:
        return self.table or self.name


class JoinSpec(BaseModel):
    """``left`` (the many side) joins ``right`` (the one side) on equal columns."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    left: str
    right: str
    on: tuple[str, ...] = Field(min_length=1, description="'column' (same name on both sides) or 'left_column = right_column'")

    def pairs(self) -> list[tuple[str, str]]:
        out = []
        for item in self.on:
            left, _, right = item.partition("=")
            out.append((left.strip(), (right or left).strip()))
        return out


class RowExclusion(BaseModel):
    """Rows a source's metrics leave out unless a verified lesson says otherwise (test lines)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    condition: str = Field(description="SQL condition over the source's alias that keeps the counted rows")
    column: str | None = Field(None, description="the column the condition reads (diagnosis checks the warehouse has it)")
    role: Literal["test_rows", "incomplete_rows", "other"] = Field(
        "other", description="test_rows / incomplete_rows: what a diagnosis may verify the user meant to include"
    )
    description: str = ""


class DetailSpec(BaseModel):
    """A one-to-many child of a source's rows (refunds of an order line), summed per parent row
    in a CTE and LEFT JOINed back, so a parent is never counted twice."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME, description="the CTE's name")
    table: str = Field(description="the model table holding the children")
    alias: str = Field(pattern=_NAME, description="the CTE's alias in metric expressions")
    keys: tuple[str, ...] = Field(min_length=1, description="columns the child shares with its parent row")
    amount: str = Field(pattern=_NAME, description="the child's column summed per parent row")
    time_column: str | None = Field(None, description="the child's own date, for counting children by it")


class SourceSpec(BaseModel):
    """A fact table metrics are measured on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME)
    table: str = Field(description="the model table of the facts")
    time_column: str | None = Field(None, description="the default period column of its metrics")
    other_time_columns: tuple[str, ...] = Field(
        (),
        description="other dates of the same rows a period could mean (a poll's start and end): a question that names a "
        "period or a time grain, for a metric without a time_column of its own, asks which date unless it names one",
    )
    exclusions: tuple[RowExclusion, ...] = ()
    details: tuple[DetailSpec, ...] = ()

    def detail(self, name: str) -> DetailSpec:
        found = next((d for d in self.details if d.name == name), None)
        if found is None:
            raise KeyError(f"source {self.name} has no detail {name!r}")
        return found


class DetailSplit(BaseModel):
    """How a metric reads when grouped or filtered by an attribute of a detail (refunds by reason):
    the detail's amount with that attribute, over ``denominator`` of all the window's rows for a ratio."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    detail: str
    denominator: str | None = Field(None, description="the source column summed as the ratio's denominator")


class ModelDependency(BaseModel):
    """A source (POST /sources) a definition rests on, at a version: a newer version, or its
    deletion, makes the definition stale in answers that cite it (docs/knowledge.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1, max_length=120, description="the source's name, as POST /sources stored it")
    version: int | None = Field(None, ge=1, description="the version depended on; left out, PUT /model pins the newest")


class MetricSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME)
    zh: str
    en: str
    synonyms_zh: tuple[str, ...] = ()
    synonyms_en: tuple[str, ...] = ()
    kind: MetricKind
    source: str = Field(description="the source (fact) it is measured on")
    expression: str = Field(description="aggregate SQL (Redshift dialect) over the model's aliases")
    time_column: str | None = Field(None, description="its period column: 'column' of the fact or 'table.column'; default the source's")
    filters: tuple[str, ...] = Field((), description="SQL conditions every row it counts meets (returned items only)")
    uses: tuple[str, ...] = Field((), description="details of the source its expression reads")
    tables: tuple[str, ...] = Field((), description="model tables its expression or time column reads, joined from the source")
    by_detail: DetailSplit | None = None
    variants: tuple[str, ...] = Field((), description="metrics a user may mean instead (diagnosis tries them)")
    share_of: str | None = Field(
        None, description="the metric this one is each group's share of: named together ('收入…占比'), this one is meant"
    )
    additive: bool = Field(True, description="sums of groups are the total (false for averages and ratios)")
    dimensions: tuple[str, ...]  # the dimensions this metric can be grouped or filtered by
    formula: str = ""
    definition_zh: str = ""
    definition_en: str = ""
    model_version: str = "1"
    depends_on: tuple[ModelDependency, ...] = Field((), max_length=20, description="sources the definition rests on")

    def label(self, lang: Lang) -> str:
        return self.zh if lang == "zh" else self.en

    def definition(self, lang: Lang) -> str:
        return self.definition_zh if lang == "zh" else self.definition_en

    @property
    def terms(self) -> tuple[str, ...]:
        return (self.name, *self.synonyms_zh, *self.synonyms_en)


class DimensionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME)
    kind: Literal["attribute", "time"]
    zh: str
    en: str
    nouns_zh: tuple[str, ...] = ()  # words that name the dimension ("渠道"); grouping needs 各/按/by
    nouns_en: tuple[str, ...] = ()
    group_terms_zh: tuple[str, ...] = ()  # words that mean "grouped by this" on their own ("每月")
    group_terms_en: tuple[str, ...] = ()
    table: str | None = Field(None, description="the model table of an attribute")
    column: str | None = Field(None, description="the attribute's column (its values are what filters compare)")
    en_column: str | None = Field(None, description="a column with the English name of each value")
    grain: Literal["day", "week", "month", "quarter", "year"] | None = None
    max_values: int = Field(10_000, ge=1, description="at most this many entity values are read from the warehouse")
    index_values: bool = Field(
        True, description="whether users name its values; false for a second role of the same values (a supplier's nation)"
    )
    bare_noun_groups: bool = Field(
        True,
        description="whether its noun alone groups by it; false when the noun is also an everyday word of the domain ('customers "
        "in GERMANY'): then only 按/各/by/per, or a top-N ('top 5 customers'), group by it",
    )
    role_words_zh: tuple[str, ...] = Field(
        (),
        description="words next to a value that say it is this dimension's, when one table plays two roles (从/出发 for an "
        "origin, 飞往/到 for a destination); none: the common pairs by the dimension's name and nouns",
    )
    role_words_en: tuple[str, ...] = Field(
        (),
        description="English role words (from/out of for an origin, to/into for a destination); none: the common pairs by the "
        "dimension's name and nouns",
    )
    definition_zh: str = ""
    definition_en: str = ""
    model_version: str = "1"
    depends_on: tuple[ModelDependency, ...] = Field((), max_length=20, description="sources the definition rests on")

    @model_validator(mode="after")
    def _complete(self) -> DimensionSpec:
        if self.kind == "attribute" and not (self.table and self.column):
            raise ValueError(f"attribute dimension {self.name} needs table and column")
        if self.kind == "time" and self.grain is None:
            raise ValueError(f"time dimension {self.name} needs a grain")
        return self

    def label(self, lang: Lang) -> str:
        return self.zh if lang == "zh" else self.en

    def definition(self, lang: Lang) -> str:
        return self.definition_zh if lang == "zh" else self.definition_en


class AmbiguousTerm(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    term: str
    candidates: tuple[str, ...]  # metric names the term could mean


class EntityAlias(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dimension: str
    value: str  # the warehouse value
    aliases: tuple[str, ...]


class EntityValues(BaseModel):
    """Values of a dimension known without the warehouse (the planner's fallback when it is unreachable)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dimension: str
    values: tuple[str, ...] = ()
    english: tuple[str | None, ...] = Field((), description="the English name of each value, in the same order")


class OutsideValue(BaseModel):
    """A value users may name that the warehouse does not hold (西安): asked about, never guessed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dimension: str
    names: tuple[str, ...]


class ProductShortNames(BaseModel):
    """How to turn a full entity name into the short name users say (a product's molecule)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dimension: str = ""
    comment: str = ""
    zh_prefixes: tuple[str, ...] = ()
    zh_suffixes: tuple[str, ...] = ()
    en_words: tuple[str, ...] = ()

    def short_zh(self, name: str) -> str | None:
        short = name
        for prefix in self.zh_prefixes:
            if short.startswith(prefix):
                short = short[len(prefix) :]
                break
        for suffix in sorted(self.zh_suffixes, key=len, reverse=True):
            if short.endswith(suffix):
                short = short[: -len(suffix)]
                break
        return short if short != name and len(short) >= 2 else None

    def short_en(self, name: str) -> str | None:
        dropped = {w.lower() for w in self.en_words}
        words = [w for w in name.split() if w.lower() not in dropped]
        short = " ".join(words)
        return short if short and short != name and len(short) >= 3 else None


class AnalysisHints(BaseModel):
    """What deep analysis profiles and drills into by default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profile_metrics: tuple[str, ...] = ()
    drill_dimensions: tuple[str, ...] = ()
    detail_drill_dimensions: tuple[str, ...] = Field((), description="drill-downs for metrics measured on a detail")
    fallback_group: str | None = None


class Catalog(BaseModel):
    """A semantic model (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["memtool.semantic-model/1"] = "memtool.semantic-model/1"
    name: str = ""
    model_version: str
    description: str = ""
    subject_en: str = Field("a company's data warehouse", description="what the warehouse is about, for the planner's prompt")
    currency: str = Field("元", description="the unit money metrics are in")
    tables: tuple[TableSpec, ...] = ()
    joins: tuple[JoinSpec, ...] = ()
    sources: tuple[SourceSpec, ...] = ()
    metrics: tuple[MetricSpec, ...]
    dimensions: tuple[DimensionSpec, ...]
    ambiguous_terms: tuple[AmbiguousTerm, ...] = ()
    unsupported_terms: tuple[str, ...] = ()
    product_short_names: ProductShortNames = ProductShortNames()
    entity_aliases: tuple[EntityAlias, ...] = ()
    entity_values: tuple[EntityValues, ...] = ()
    outside_values: tuple[OutsideValue, ...] = ()
    clarify_dimensions: tuple[str, ...] = Field((), description="dimensions offered when a question has a word memtool does not know")
    filler_words: tuple[str, ...] = Field((), description="words of this domain that name nothing to compute (购买, 'placed')")
    as_of: date | None = Field(
        None,
        description="a historical data set's day after its last row: relative periods (上个月, last year), default windows "
        "and partial periods are read as of this day, not today",
    )
    default_window: Literal["recent", "all"] = Field(
        "recent",
        description="the period of a question that names none: recent (the last full month, or the last 12 months for a month "
        "grain, ...) or all (every row: a historical data set)",
    )
    analysis: AnalysisHints = AnalysisHints()
    _metric_by_name: dict[str, MetricSpec] = PrivateAttr(default_factory=dict)
    _dimension_by_name: dict[str, DimensionSpec] = PrivateAttr(default_factory=dict)
    _table_by_name: dict[str, TableSpec] = PrivateAttr(default_factory=dict)
    _source_by_name: dict[str, SourceSpec] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> Catalog:
        problems = model_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        self._metric_by_name = {m.name: m for m in self.metrics}
        self._dimension_by_name = {d.name: d for d in self.dimensions}
        self._table_by_name = {t.name: t for t in self.tables}
        self._source_by_name = {s.name: s for s in self.sources}
        return self

    def metric(self, name: str) -> MetricSpec:
        try:
            return self._metric_by_name[name]
        except KeyError:
            raise KeyError(f"no metric {name!r} in the catalog") from None

    def dimension(self, name: str) -> DimensionSpec:
        try:
            return self._dimension_by_name[name]
        except KeyError:
            raise KeyError(f"no dimension {name!r} in the catalog") from None

    def table(self, name: str) -> TableSpec:
        try:
            return self._table_by_name[name]
        except KeyError:
            raise KeyError(f"no table {name!r} in the model") from None

    def time_column_choices(self, metric: str) -> tuple[str, ...]:
        """The dates a period of ``metric`` may read, the default first: more than one only when its
        source names ``other_time_columns`` and the metric has no ``time_column`` of its own."""
        spec = self.metric(metric)
        if spec.time_column is not None or not self.sources:
            return (spec.time_column,) if spec.time_column else ()
        source = self.source(spec.source)
        return tuple(c for c in (source.time_column, *source.other_time_columns) if c)

    def source(self, name: str) -> SourceSpec:
        try:
            return self._source_by_name[name]
        except KeyError:
            raise KeyError(f"no source {name!r} in the model") from None

    def has_metric(self, name: str) -> bool:
        return name in self._metric_by_name

    def has_dimension(self, name: str) -> bool:
        return name in self._dimension_by_name

    @property
    def attribute_dimensions(self) -> tuple[DimensionSpec, ...]:
        return tuple(d for d in self.dimensions if d.kind == "attribute")

    @property
    def time_dimensions(self) -> tuple[DimensionSpec, ...]:
        return tuple(d for d in self.dimensions if d.kind == "time")

    @property
    def physical_tables(self) -> tuple[str, ...]:
        """The warehouse tables the model reads: the guardrails' allow-list is no wider."""
        return tuple(dict.fromkeys(t.physical.lower() for t in self.tables))

    def join_path(self, start: str, goal: str) -> list[JoinSpec]:
        """The joins from model table ``start`` to ``goal`` (fewest hops, many side to one side)."""
        if start == goal:
            return []
        seen = {start}
        queue: deque[tuple[str, list[JoinSpec]]] = deque([(start, [])])
        while queue:
            at, path = queue.popleft()
            for join in self.joins:
                if join.left == at and join.right not in seen:
                    if join.right == goal:
                        return [*path, join]
                    seen.add(join.right)
                    queue.append((join.right, [*path, join]))
        raise KeyError(f"no join path from {start} to {goal} in the model")

    def reached_through(self, dimension: str, table: str) -> bool:
        """Whether some fact reaches ``dimension``'s table through model table ``table`` (a nation
        value next to "供应商" is the supplier's nation: its path runs through the supplier)."""
        target = self.dimension(dimension).table
        if target is None:
            return False
        if target == table:
            return True
        for source in self.sources:
            try:
                path = self.join_path(source.table, target)
            except KeyError:
                continue
            if any(j.left == table for j in path):
                return True
        return False

    def model_version_for(self, intent: Intent) -> str:
        """The version string for the cache key: the catalog's, the metric's and each dimension's."""
        parts = [self.model_version, f"{intent.metric}@{self.metric(intent.metric).model_version}"]
        names = sorted({*intent.dimensions, *(f.dimension for f in intent.filters)})
        parts.extend(f"{name}@{self.dimension(name).model_version}" for name in names)
        return "|".join(parts)


@dataclass(frozen=True)
class TenantModel:
    """The model in force for a tenant and where it came from (its label goes into every answer's notes)."""

    catalog: Catalog
    label: str  # e.g. "tpch 2026.12.1 (stored v3)", "demo 2026.11.1 (built in)"
    origin: str  # "stored" | "file" | "built_in"
    version: int | None = None  # the stored version


def model_problems(model: Catalog) -> list[str]:
    """Every reference in the model that names nothing (each one names its place: metrics[3].source)."""
    tables = {t.name for t in model.tables}
    metric_names = {m.name for m in model.metrics}
    dimension_names = {d.name for d in model.dimensions}
    sources = {s.name: s for s in model.sources}
    problems = _repeated_names(model, [s.name for s in model.sources])  # not the dict's keys: they hold each name once
    problems += _join_and_source_problems(model, tables)
    for i, metric in enumerate(model.metrics):
        problems += _metric_problems(model, i, metric, tables, metric_names, dimension_names, sources)
    problems += _dimension_reference_problems(model, tables, metric_names, dimension_names)
    return problems


def _repeated_names(model: Catalog, source_names: list[str]) -> list[str]:
    """Table, metric, dimension and source names, and aliases, given twice."""
    problems: list[str] = []
    for kind, names in (("table", [t.name for t in model.tables]), ("metric", [m.name for m in model.metrics]),
                        ("dimension", [d.name for d in model.dimensions]), ("source", source_names)):  # fmt: skip
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            problems.append(f"{kind} names are repeated: {duplicates}")
    aliases = [t.alias for t in model.tables] + [d.alias for s in model.sources for d in s.details]
    if len(set(aliases)) != len(aliases):
        problems.append(f"aliases are repeated: {sorted({a for a in aliases if aliases.count(a) > 1})}")
    return problems


def _join_and_source_problems(model: Catalog, tables: set[str]) -> list[str]:
    """Joins and sources (and their details) naming unknown tables; a source's other dates."""
    problems: list[str] = []
    for i, join in enumerate(model.joins):
        for side in (join.left, join.right):
            if side not in tables:
                problems.append(f"joins[{i}] names unknown table {side!r}")
    for i, source in enumerate(model.sources):
        if source.table not in tables:
            problems.append(f"sources[{i}].table: unknown table {source.table!r}")
        if source.other_time_columns and source.time_column is None:
            problems.append(f"sources[{i}].other_time_columns: the source has no time_column they are alternatives to")
        if source.time_column in source.other_time_columns or len(set(source.other_time_columns)) < len(source.other_time_columns):
            problems.append(f"sources[{i}].other_time_columns: a date is named twice")
        for j, detail in enumerate(source.details):
            if detail.table not in tables:
                problems.append(f"sources[{i}].details[{j}].table: unknown table {detail.table!r}")
    return problems


def _metric_problems(
    model: Catalog,
    i: int,
    metric: MetricSpec,
    tables: set[str],
    metric_names: set[str],
    dimension_names: set[str],
    sources: dict[str, SourceSpec],
) -> list[str]:
    """What ``metrics[i]`` names that the model has not: dimensions, its source (then nothing more is
    checked), tables, details, other metrics, and a time column."""
    problems: list[str] = []
    where = f"metrics[{i}] ({metric.name})"
    unknown = set(metric.dimensions) - dimension_names
    if unknown:
        problems.append(f"{where}.dimensions: unknown dimensions {sorted(unknown)}")
    if model.sources and metric.source not in sources:
        problems.append(f"{where}.source: unknown source {metric.source!r}")
        return problems
    found = sources.get(metric.source)
    for name in metric.tables:
        if name not in tables:
            problems.append(f"{where}.tables: unknown table {name!r}")
    details = {d.name for d in found.details} if found else set()
    for name in metric.uses:
        if name not in details:
            problems.append(f"{where}.uses: source {metric.source} has no detail {name!r}")
    if metric.by_detail is not None and metric.by_detail.detail not in details:
        problems.append(f"{where}.by_detail: source {metric.source} has no detail {metric.by_detail.detail!r}")
    for other in (*metric.variants, *([metric.share_of] if metric.share_of else [])):
        if other not in metric_names:
            problems.append(f"{where}: unknown metric {other!r} in variants or share_of")
    if found and metric.time_column is None and found.time_column is None:
        problems.append(f"{where}.time_column: neither the metric nor its source has one")
    return problems


def _dimension_reference_problems(model: Catalog, tables: set[str], metric_names: set[str], dimension_names: set[str]) -> list[str]:
    """Dimensions on unknown tables, ambiguous terms naming unknown metrics, and the entity lists and
    clarify_dimensions naming unknown dimensions."""
    problems: list[str] = []
    for i, dim in enumerate(model.dimensions):
        if dim.kind == "attribute" and model.tables and dim.table not in tables:
            problems.append(f"dimensions[{i}] ({dim.name}).table: unknown table {dim.table!r}")
    for i, term in enumerate(model.ambiguous_terms):
        if set(term.candidates) - metric_names:
            problems.append(f"ambiguous_terms[{i}] ({term.term}) names unknown metrics")
    named: list[tuple[str, int, str]] = [
        *(("entity_aliases", i, a.dimension) for i, a in enumerate(model.entity_aliases)),
        *(("entity_values", i, v.dimension) for i, v in enumerate(model.entity_values)),
        *(("outside_values", i, o.dimension) for i, o in enumerate(model.outside_values)),
    ]
    for field_name, i, dimension in named:
        if dimension not in dimension_names:
            problems.append(f"{field_name}[{i}]: unknown dimension {dimension!r}")
    for name in model.clarify_dimensions:
        if name not in dimension_names:
            problems.append(f"clarify_dimensions: unknown dimension {name!r}")
    return problems


DEMO_MODEL = ("memtool.sql", "demo_model.yaml")


def load_catalog(path: Path | str | None = None) -> Catalog:
    """The model in ``path`` (YAML or JSON), or the demo warehouse's (cached)."""
    if path is None:
        return _demo_model()
    return parse_model(Path(path).read_text(encoding="utf-8"), name=str(path))


def parse_model(text: str, *, name: str = "model") -> Catalog:
    """A model from YAML or JSON text (JSON is YAML; the JSON parser needs no PyYAML)."""
    return Catalog.model_validate(model_document(text, name=name))


def model_document(text: str, *, name: str = "model") -> dict[str, Any]:
    stripped = text.lstrip()
    if stripped.startswith("{"):
        document = json.loads(text)
    else:
        import yaml  # lazily: only files are YAML; the API takes JSON

        # libyaml's parser where PyYAML has it (some 8x faster on a 20 KB model; the same safe
        # constructor and resolver, so the same document, and a nesting limit of its own)
        document = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if not isinstance(document, dict):
        raise ValueError(f"{name}: a semantic model is a mapping, not {type(document).__name__}")
    return document


@lru_cache(maxsize=1)
def _demo_model() -> Catalog:
    package, file = DEMO_MODEL
    return parse_model(resources.files(package).joinpath(file).read_text(encoding="utf-8"), name=file)


def catalog_options(catalog: Catalog, names: list[str] | tuple[str, ...], lang: Lang) -> list[str]:
    """Display names of metrics, for clarification options (each is itself a recognised term)."""
    return [catalog.metric(name).label(lang) for name in names]


__all__ = [
    "AmbiguousTerm",
    "Catalog",
    "DetailSpec",
    "DimensionSpec",
    "EntityAlias",
    "EntityValues",
    "JoinSpec",
    "Lang",
    "MetricSpec",
    "OutsideValue",
    "ProductShortNames",
    "RowExclusion",
    "SourceSpec",
    "TableSpec",
    "TenantModel",
    "catalog_options",
    "load_catalog",
    "model_problems",
    "parse_model",
]


if __name__ == "__main__":  # python -m memtool.semantic.catalog --schema > docs/semantic-model.schema.json
    import sys

    if sys.argv[1:] != ["--schema"]:
        sys.exit("usage: python -m memtool.semantic.catalog --schema")
    print(json.dumps(Catalog.model_json_schema(), ensure_ascii=False, indent=2))
