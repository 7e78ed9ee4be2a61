"""What a planner returns: SQL to run, a clarification to ask, or a knowledge answer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from memtool.semantic.intent import Intent

Route = Literal["nl2sql_query", "kpi_lookup", "business_knowledge_qa", "deep_analysis_workflow"]
ROUTES: tuple[str, ...] = ("nl2sql_query", "kpi_lookup", "business_knowledge_qa", "deep_analysis_workflow")


class Clarification(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str  # what to ask the user, in the user's language
    term: str | None = None  # the unknown or ambiguous words
    options: list[str] = Field(default_factory=list)  # choices the user can pick from


class Citation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str  # "catalog:metric/net_revenue" or "memory:<id>@v<version>"
    text: str


class AppliedMemory(BaseModel):
    """A memory that shaped the plan (not merely recalled): credit from feedback goes to these."""

    model_config = ConfigDict(extra="forbid")

    id: str
    version: int
    kind: str  # "correction", "profile", "knowledge", "fewshot", ...
    why: str = ""  # e.g. "term 收入 -> metric net_revenue", "unit 万元", "intent template"


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["planned", "needs_clarification", "answered"]
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
