"""What the rule parser recognised in a question, before defaults and before an intent: the
spans it found and what they mean, and the term mappings corrections teach. The parser fills it;
follow-ups, clarification replies and masking read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from memtool.semantic.catalog import Lang
from memtool.semantic.entities import EntityValue
from memtool.semantic.intent import TimeWindow
from memtool.semantic.time_expressions import ComparisonKind, TimeMatch

Unit = Literal["元", "万元", "分"]


class MappingTarget(BaseModel):
    """What a taught term means: a metric, a dimension (grouping), or a dimension value (filter)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str | None = None
    dimension: str | None = None
    value: str | None = None

    @model_validator(mode="after")
    def _one_meaning(self) -> MappingTarget:
        if (self.metric is None) == (self.dimension is None):
            raise ValueError("maps_to needs exactly one of metric or dimension")
        if self.value is not None and self.dimension is None:
            raise ValueError("a value needs its dimension")
        return self

    def describe(self) -> str:
        """How a citation names the target: "metric gross_revenue", "region = 华东", "dimension city"."""
        if self.metric is not None:
            return f"metric {self.metric}"
        if self.value is not None:
            return f"{self.dimension} = {self.value}"
        return f"dimension {self.dimension}"


class TermMapping(BaseModel):
    """A correction as data: ``term`` means ``maps_to`` (taught by the user, cited by id@version)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    term: str
    maps_to: MappingTarget
    memory_id: str | None = None
    version: int | None = None

    @property
    def source(self) -> str:
        if self.memory_id is None:
            return "request"
        return f"memory:{self.memory_id}" + (f"@v{self.version}" if self.version is not None else "")


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    kind: str
    text: str
    payload: Any = None
    priority: int = 5  # lower wins a tie in length


@dataclass
class ParsedQuestion:
    """Everything the parser recognised, before defaults: the route classifier reads this too."""

    text: str
    lang: Lang
    metrics: list[str] = field(default_factory=list)
    ambiguous: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    group_dims: list[str] = field(default_factory=list)
    grain: str | None = None
    trend: bool = False
    filters: dict[str, list[str]] = field(default_factory=dict)
    exclusions: dict[str, list[str]] = field(default_factory=dict)
    entity_conflicts: list[tuple[str, list[EntityValue]]] = field(default_factory=list)
    outside: list[tuple[str, str]] = field(default_factory=list)  # (name, dimension)
    times: list[TimeMatch] = field(default_factory=list)
    comparison: ComparisonKind | Literal["previous"] | None = None
    top_n: int | None = None
    order: Literal["asc", "desc"] | None = None
    superlative: bool = False
    plural: bool = False
    unit: Unit | None = None
    share: bool = False
    unknown_terms: list[str] = field(default_factory=list)
    ignored_words: list[str] = field(default_factory=list)
    corrections_used: list[TermMapping] = field(default_factory=list)
    incompatible: list[str] = field(default_factory=list)  # dimensions the metric lacks
    spans: list[Span] = field(default_factory=list)
    follow_up_markers: list[str] = field(default_factory=list)  # "replace" | "extend" | "narrow" | "weak"
    dropped_dims: list[str] = field(default_factory=list)  # "不限渠道": filters (and grouping) to drop
    carried_window: TimeWindow | None = None  # a follow-up's window, from the previous turn
    lasting: list[str] = field(default_factory=list)  # "以后", "默认", "from now on": a standing preference
    this_time: bool = False  # "这次", "just this once": for this question only
    chart: str | None = None  # a chart the question names ("柱状图", "bar chart")
    date_columns: list[str] = field(default_factory=list)  # dates the question names ("by enddate"): time_column choices

    @property
    def has_grouping(self) -> bool:
        return bool(self.group_dims) or self.grain is not None or self.trend

    @property
    def metric(self) -> str | None:
        return self.metrics[0] if len(self.metrics) == 1 else None
