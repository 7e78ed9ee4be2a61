"""The metric/dimension catalog: names and synonyms in Chinese and English, definitions, versions.

The catalog is data (``catalog.json`` next to this module, shipped as package data); this module
only loads and validates it. Definitions are what business_knowledge_qa cites; ``model_version``
values go into the SQL cache key so a changed definition never serves a stale query.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator

from memtool.semantic.intent import Intent

Lang = Literal["zh", "en"]
MetricKind = Literal["money", "count", "ratio"]


class MetricSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    zh: str
    en: str
    synonyms_zh: tuple[str, ...]
    synonyms_en: tuple[str, ...]
    kind: MetricKind
    source: Literal["order_line", "prescription"]
    time_column: str
    dimensions: tuple[str, ...]  # the dimensions this metric can be grouped or filtered by
    formula: str
    definition_zh: str
    definition_en: str
    model_version: str

    def label(self, lang: Lang) -> str:
        return self.zh if lang == "zh" else self.en

    def definition(self, lang: Lang) -> str:
        return self.definition_zh if lang == "zh" else self.definition_en

    @property
    def terms(self) -> tuple[str, ...]:
        return (self.name, *self.synonyms_zh, *self.synonyms_en)


class DimensionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: Literal["attribute", "time"]
    zh: str
    en: str
    nouns_zh: tuple[str, ...] = ()  # words that name the dimension ("渠道"); grouping needs 各/按/by
    nouns_en: tuple[str, ...] = ()
    group_terms_zh: tuple[str, ...] = ()  # words that mean "grouped by this" on their own ("每月")
    group_terms_en: tuple[str, ...] = ()
    table: str | None = None
    column: str | None = None
    en_column: str | None = None
    join_key: str | None = None
    grain: Literal["day", "week", "month", "quarter", "year"] | None = None
    definition_zh: str
    definition_en: str
    model_version: str

    @model_validator(mode="after")
    def _complete(self) -> DimensionSpec:
        if self.kind == "attribute" and not (self.table and self.column and self.join_key):
            raise ValueError(f"attribute dimension {self.name} needs table, column and join_key")
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


class OutsideValue(BaseModel):
    """A value users may name that the warehouse does not hold (西安): asked about, never guessed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dimension: str
    names: tuple[str, ...]


class ProductShortNames(BaseModel):
    """How to turn a full product name into the molecule name users say."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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


class Catalog(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model_version: str
    description: str = ""
    metrics: tuple[MetricSpec, ...]
    dimensions: tuple[DimensionSpec, ...]
    ambiguous_terms: tuple[AmbiguousTerm, ...] = ()
    unsupported_terms: tuple[str, ...] = ()
    product_short_names: ProductShortNames = ProductShortNames()
    entity_aliases: tuple[EntityAlias, ...] = ()
    outside_values: tuple[OutsideValue, ...] = ()
    _metric_by_name: dict[str, MetricSpec] = PrivateAttr(default_factory=dict)
    _dimension_by_name: dict[str, DimensionSpec] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> Catalog:
        metric_names = {m.name for m in self.metrics}
        dimension_names = {d.name for d in self.dimensions}
        for metric in self.metrics:
            unknown = set(metric.dimensions) - dimension_names
            if unknown:
                raise ValueError(f"metric {metric.name} names unknown dimensions {sorted(unknown)}")
        for term in self.ambiguous_terms:
            if set(term.candidates) - metric_names:
                raise ValueError(f"ambiguous term {term.term} names unknown metrics")
        for alias in self.entity_aliases:
            if alias.dimension not in dimension_names:
                raise ValueError(f"entity alias for unknown dimension {alias.dimension}")
        self._metric_by_name = {m.name: m for m in self.metrics}
        self._dimension_by_name = {d.name: d for d in self.dimensions}
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

    def model_version_for(self, intent: Intent) -> str:
        """The version string for the cache key: the catalog's, the metric's and each dimension's."""
        parts = [self.model_version, f"{intent.metric}@{self.metric(intent.metric).model_version}"]
        names = sorted({*intent.dimensions, *(f.dimension for f in intent.filters)})
        parts.extend(f"{name}@{self.dimension(name).model_version}" for name in names)
        return "|".join(parts)


CATALOG_FILE = "catalog.json"


def load_catalog(path: Path | str | None = None) -> Catalog:
    """The catalog from ``path``, or the one shipped with the package (cached)."""
    if path is None:
        return _packaged_catalog()
    return Catalog.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))


@lru_cache(maxsize=1)
def _packaged_catalog() -> Catalog:
    text = resources.files("memtool.semantic").joinpath(CATALOG_FILE).read_text(encoding="utf-8")
    return Catalog.model_validate(json.loads(text))


def catalog_options(catalog: Catalog, names: list[str] | tuple[str, ...], lang: Lang) -> list[str]:
    """Display names of metrics, for clarification options (each is itself a recognised term)."""
    return [catalog.metric(name).label(lang) for name in names]


__all__ = [
    "AmbiguousTerm",
    "Catalog",
    "DimensionSpec",
    "EntityAlias",
    "Lang",
    "MetricSpec",
    "OutsideValue",
    "ProductShortNames",
    "catalog_options",
    "load_catalog",
]
