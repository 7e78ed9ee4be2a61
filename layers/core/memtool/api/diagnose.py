"""Bodies and answers of POST /diagnose, GET /episodes/{id}, POST /lessons/{id}/share and the review of
diagnoses (GET /diagnoses, POST /diagnoses/{id}/confirm|reject)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from memtool.api.identity import IDENTIFIER_PATTERN
from memtool.api.limits import PlainText
from memtool.api.memories import Identifier
from memtool.diagnosis.requests import Expected
from memtool.memory.records import MemoryRecord

COMMENT_MAX_CHARS = 2000


class DiagnoseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    episode_id: Identifier = Field(description="the episode to diagnose (episode_id of POST /ask); the caller's own")
    expected: Expected | None = Field(None, description="the value the answer should have been: {value, unit?}")
    comment: Annotated[PlainText, Field(max_length=COMMENT_MAX_CHARS)] | None = Field(
        None, description="what is wrong, in the user's words"
    )


class ShareBody(BaseModel):
    """POST /lessons/{id}/share: whose lesson it is (a curator may share any user's in the tenant),
    and whether its author shares their question, comment and expected value with it."""

    model_config = ConfigDict(extra="forbid")

    owner: Annotated[StrictStr, Field(pattern=IDENTIFIER_PATTERN)] | None = Field(
        None, description="the user whose lesson it is; default: the caller"
    )
    include_context: StrictBool = Field(
        False,
        description="the copy keeps the question, the comment and the expected value too; "
        "only for the caller's own lesson (default: the cause, the repair and the evidence only)",
    )


class DiagnosisAnswer(BaseModel):
    """A diagnosis: the failure, every hypothesis with its test result, and the verified repair if any."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    episode_id: str
    failure: dict[str, Any]
    verified: bool
    cause: str | None = None
    root_cause: str | None = None
    repairs: list[dict[str, Any]] = Field(default_factory=list)
    repaired_sql: str | None = None
    repaired_output: dict[str, Any] | None = None
    evidence: str | None = None
    expected: dict[str, Any] | None = None
    baseline: dict[str, Any] | None = None
    hypotheses: list[dict[str, Any]] = Field(default_factory=list)
    executions: int = 0
    budget: int = 0
    memory_id: str | None = None
    memory_version: int | None = None
    status: str | None = Field(None, description="active: a verified lesson; pending_review: unverified, never applied")
    nothing_to_explain: bool = Field(False, description="the answer already gives the expected value: nothing was kept")
    notes: list[str] = Field(default_factory=list)


class EpisodeView(BaseModel):
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    episode: dict[str, Any] = Field(description="the episode memory: question, intent, SQL, outcome, feedback, lessons applied")
    diagnoses: list[dict[str, Any]] = Field(default_factory=list, description="its causal memories, oldest first")


class ConfirmBody(BaseModel):
    """POST /diagnoses/{id}/confirm: whose diagnosis, and which hypothesis's repair (optional)."""

    model_config = ConfigDict(extra="forbid")

    owner: Annotated[StrictStr, Field(pattern=IDENTIFIER_PATTERN)] | None = Field(
        None, description="the user whose diagnosis it is (curators); default: the caller"
    )
    hypothesis: Annotated[StrictStr, Field(pattern=r"^h[0-9]{1,3}$")] | None = Field(
        None, description="the hypothesis whose repair is confirmed (h1, h2, …); default: the first whose repair ran"
    )


class RejectBody(BaseModel):
    """POST /diagnoses/{id}/reject: whose diagnosis, and why (optional)."""

    model_config = ConfigDict(extra="forbid")

    owner: Annotated[StrictStr, Field(pattern=IDENTIFIER_PATTERN)] | None = Field(
        None, description="the user whose diagnosis it is (curators); default: the caller"
    )
    reason: PlainText | None = Field(None, max_length=500, description="kept as the archived version's status_reason")


class ReviewStatus(StrEnum):
    PENDING_REVIEW = "pending_review"


ReviewStatusParam = Annotated[ReviewStatus, Query(description="the diagnoses in this status: pending_review (the default)")]


class DiagnosisListing(BaseModel):
    """GET /diagnoses: the diagnoses waiting for a person, newest first."""

    items: list[MemoryRecord]
