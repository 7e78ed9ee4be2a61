"""The body and the answer of POST /ask."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from memtool.planning.plan import Route


class AskConditions(BaseModel):
    """This-time conditions: they win over the profile for this question, without changing it."""

    model_config = ConfigDict(extra="forbid")

    unit: Literal["元", "万元", "分"] | None = None
    chart: Literal["line", "bar", "pie", "kpi_card", "table"] | None = None


class AskBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: StrictStr = Field(min_length=1, max_length=2000)
    session_id: StrictStr | None = Field(None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+$")
    route: Route | None = None
    conditions: AskConditions = Field(default_factory=AskConditions)


class AskAnswer(BaseModel):
    episode_id: str
    route: str | None
    status: Literal["answered", "needs_clarification", "failed"]
    question: str
    sql: str | None = None
    columns: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)
    row_count: int = 0
    truncated: bool = False
    chart: dict[str, Any] | None = None
    answer: str | None = None
    citations: list[dict[str, Any]] = Field(default_factory=list)
    memories_used: list[dict[str, Any]] = Field(default_factory=list)
    recall_coverage: dict[str, Any] | None = None
    clarification: dict[str, Any] | None = None
    notes: list[str] = Field(default_factory=list)
    error: dict[str, Any] | None = None
    timings: dict[str, float] = Field(default_factory=dict)
