"""The state AskFlow carries from step to step (JSON in Step Functions, this model in Python).

Fields the ASL's Choice states read: ``route`` (Prepare), ``plan_status`` (Plan),
``guard_status`` (Guard), ``repair_status`` and ``repair_attempts`` (Diagnose). A Catch puts the
failure under ``error`` ({"Error", "Cause"}).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# Step Functions caps a state at 256 KB: rows travel capped.
STATE_ROW_CAP = 500


class Caller(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str
    user: str
    roles: list[str] = Field(default_factory=list)


class AskInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str
    session_id: str | None = None
    route: str | None = None  # forced route
    conditions: dict[str, Any] = Field(default_factory=dict)


class MemoryUse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    version: int
    kind: str
    score: float
    content: str = ""


class AskState(BaseModel):
    model_config = ConfigDict(extra="allow")  # keeps what the ASL adds (error, failed_step)

    episode_id: str
    caller: Caller
    input: AskInput
    started_at: str
    route: str | None = None
    working: list[dict[str, Any]] = Field(default_factory=list)
    profile: dict[str, Any] = Field(default_factory=dict)  # unit, chart
    memories_used: list[MemoryUse] = Field(default_factory=list)
    recalled: list[dict[str, Any]] = Field(default_factory=list)  # the records, for the planner
    recall_coverage: dict[str, Any] | None = None
    plan_status: str | None = None
    plan: dict[str, Any] | None = None
    sql: str | None = None
    guard_status: str | None = None
    guard: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    repair_status: str | None = None
    repair_attempts: int = 0
    analysis: dict[str, Any] | None = None
    chart: dict[str, Any] | None = None
    status: str | None = None
    timings: dict[str, float] = Field(default_factory=dict)
