"""The body and the answer of POST /ask."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memtool.api.limits import Question
from memtool.api.memories import SessionId
from memtool.planning.plan import Route


class AskConditions(BaseModel):
    """This-time conditions: they win over the profile for this question, without changing it."""

    model_config = ConfigDict(extra="forbid")

    unit: Literal["元", "万元", "分"] | None = None
    chart: Literal["line", "bar", "pie", "kpi_card", "table"] | None = None


class AskBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: Question
    session_id: SessionId | None = None
    route: Route | None = None
    conditions: AskConditions = Field(default_factory=AskConditions)


class AskError(BaseModel):
    """Why an ask failed, in words a caller can act on; never a stack trace."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    error: str = Field(description="a stable code")
    message: str = Field(description="what went wrong, for a person")
    step: str | None = Field(None, description="the AskFlow step that failed, when one did")


class AskAnswer(BaseModel):
    # Every field is in every answer, defaults included: the OpenAPI document says so.
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    episode_id: str
    route: str | None
    status: Literal["answered", "partial", "needs_clarification", "remembered", "failed"] = Field(
        description="partial: the data was answered but an analysis the question asked for could not run (notes say which and why)"
    )
    question: str
    sql: str | None = None
    columns: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)
    row_count: int = 0
    truncated: bool = False
    chart: dict[str, Any] | None = None
    answer: str | None = None
    citations: list[dict[str, Any]] = Field(default_factory=list)
    memories_used: list[dict[str, Any]] = Field(
        default_factory=list, description="the memories that shaped this answer (feedback credits these)"
    )
    memories_recalled: list[dict[str, Any]] = Field(
        default_factory=list, description="every memory recall returned for the question, used or not"
    )
    carried_over: list[str] = Field(default_factory=list, description="what a follow-up took from the previous question")
    recall_coverage: dict[str, Any] | None = None
    clarification: dict[str, Any] | None = None
    notes: list[str] = Field(default_factory=list)
    error: AskError | None = None
    repaired: dict[str, Any] | None = Field(
        None, description="{root_cause, cause, memory_id}: the SQL failed, a diagnosis verified a repair by running it, and this answer ran it"
    )
    diagnosis: dict[str, Any] | None = Field(
        None, description="the failed answer's diagnosis: the failure, every hypothesis with its test result"
    )
    cache: dict[str, Any] | None = Field(
        None,
        description="the SQL cache: {hit, key, similarity, bound_slots, reason, entry}; a hit skipped recall and planning, and its SQL ran again",
    )
    analysis: dict[str, Any] | None = Field(
        None,
        description="deep analyses: {status, tool, result, summary, analyses: [{kind, tool, runner, success, result, summary, error}], skipped, queries, chart_png}",
    )
    timings: dict[str, float] = Field(default_factory=dict)
