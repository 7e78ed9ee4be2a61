"""What a planner returns: SQL to run, a clarification to ask, or a knowledge answer."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memtool.semantic.intent import Intent

Route = Literal["nl2sql_query", "kpi_lookup", "business_knowledge_qa", "deep_analysis_workflow"]
ROUTES: tuple[str, ...] = ("nl2sql_query", "kpi_lookup", "business_knowledge_qa", "deep_analysis_workflow")


class Clarification(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str  # what to ask the user, in the user's language
    term: str | None = None  # the unknown or ambiguous words
    options: list[str] = Field(default_factory=list)  # choices the user can pick from
    reason: str | None = None  # ambiguous_metric, unknown_term, outside_value, ...
    targets: list[dict[str, str]] = Field(default_factory=list)  # what each option means (metric, dimension/value, window)
    pending_question: str | None = None  # the question still waiting, when a reply led to this clarification
    choices: list[dict[str, Any]] = Field(default_factory=list)  # replies already given to it: {reason, term, target}


class Citation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str  # "catalog:metric/net_revenue@<model version>" or "memory:<id>@v<version>"
    text: str
    stale: bool = False  # a dependency of the cited memory has a newer version or is gone
    depends_on: list[str] = Field(default_factory=list)  # each dependency as it is now: "refunds-policy.md v1; v2 exists"


class AppliedMemory(BaseModel):
    """A memory that shaped the plan (not merely recalled): credit from feedback goes to these."""

    model_config = ConfigDict(extra="forbid")

    id: str
    version: int
    kind: str  # "correction", "profile", "knowledge", "fewshot", ...
    why: str = ""  # e.g. "term 收入 -> metric net_revenue", "unit 万元", "intent template"


class LearnedTerm(BaseModel):
    """What a clarification reply taught: ``term`` means ``maps_to`` (becomes a correction memory)."""

    model_config = ConfigDict(extra="forbid")

    term: str
    maps_to: dict[str, str]  # {"metric": ...} or {"dimension": ..., "value": ...}
    reason: str  # the clarification's reason (ambiguous_metric, unknown_term, ambiguous_value)
    episode_id: str | None = None  # the episode that asked


class Preference(BaseModel):
    """A standing display preference stated in chat: exactly one of unit and chart."""

    model_config = ConfigDict(extra="forbid")

    unit: Literal["元", "万元", "分"] | None = None
    chart: Literal["line", "bar", "pie", "kpi_card", "table"] | None = None
    text: str  # the user's words


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["planned", "needs_clarification", "answered", "remembered"]
    route: Route
    intent: Intent | None = None
    sql: str | None = None  # Redshift dialect
    clarification: Clarification | None = None
    answer: str | None = None  # business_knowledge_qa: the definition, cited
    citations: list[Citation] = Field(default_factory=list)
    planner: str = "rules"  # "rules" | "bedrock:<model id>"
    notes: list[str] = Field(default_factory=list)  # what the planner applied (profile unit, corrections, ...)
    applied: list[AppliedMemory] = Field(default_factory=list)  # memories that shaped this plan
    carried_over: list[str] = Field(default_factory=list)  # parts taken from the previous turn
    resolved_question: str | None = None  # the question planned, when a reply answered a pending one
    clarified: list[str] = Field(default_factory=list)  # the reasons of the clarification choices applied
    learned: LearnedTerm | None = None  # a clarification reply that taught what a term means
    remember: Preference | None = None  # a standing preference the question stated ("以后默认用万元")
