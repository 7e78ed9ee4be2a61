"""Bodies and answers of POST /maintenance/run, GET /conflicts and POST /conflicts/{id}/resolve."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memtool.lifecycle.conflicts import Conflict


class MaintenanceStep(StrEnum):
    DECAY = "decay"
    CONSOLIDATE = "consolidate"
    CONFLICTS = "conflicts"
    CAPACITY = "capacity"
    PII_RESCAN = "pii_rescan"
    RECONCILE = "reconcile"


class MaintenanceRunBody(BaseModel):
    """POST /maintenance/run: which steps (all when left out); the body itself may be left out."""

    model_config = ConfigDict(extra="forbid")

    steps: list[MaintenanceStep] | None = Field(None, min_length=1, max_length=6, description="the steps to run; default: every step")


class _Answer(BaseModel):
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


class MaintenanceReport(_Answer):
    steps: dict[str, dict[str, Any]] = Field(description="step -> its counts (read, decayed, archived, summaries, evicted, …)")
    tenants: dict[str, Any] = Field(default_factory=dict, description="the caller's tenant -> its steps' counts")
    started_at: datetime | None
    finished_at: datetime | None


class MaintenanceRunAnswer(_Answer):
    status: Literal["succeeded", "running"] = Field(description="running: started in AWS (a Standard execution); the report comes later")
    report: MaintenanceReport | None = Field(description="this run's report; when running, the last run's (or null)")
    execution_arn: str | None = Field(None, description="the MaintenanceFlow execution (AWS)")


class ResolveConflictBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keep: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_]+$", description="the memory to keep; the others are archived")


class ConflictMemory(_Answer):
    id: str
    version: int
    content: str
    means: Any = Field(description="what it says the term means (its value.maps_to)")
    confidence: float
    updated_at: datetime
    scope: str


class ConflictView(_Answer):
    id: str
    kind: Literal["correction"]
    term: str
    owner: str = Field(description="the user whose memories disagree, or _tenant for the shared ones")
    winner: str = Field(description="the memory recall uses until it is resolved: the newer, then the more confident")
    memories: list[ConflictMemory]


class ConflictListing(_Answer):
    conflicts: list[ConflictView]


class ConflictResolved(_Answer):
    id: str
    kept: str
    archived: list[dict[str, Any]] = Field(description="the memories archived: id and new version")


def conflict_listing(found: list[Conflict]) -> ConflictListing:
    return ConflictListing(conflicts=[ConflictView.model_validate(c.as_dict()) for c in found])
