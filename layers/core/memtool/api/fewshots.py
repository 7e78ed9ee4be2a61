"""Bodies, parameters and answers of the few-shot review API (GET /fewshots, POST /fewshots/{id}/approve|reject)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel, ConfigDict, Field

from memtool.api.identity import Identity
from memtool.api.limits import PlainText
from memtool.cache.fewshots import FewshotValue
from memtool.errors import Forbidden, ValidationFailed
from memtool.memory.records import MemoryRecord, MemoryStatus

REVIEWER_ROLE = "admin"
REASON_MAX_CHARS = 500


class FewshotStatus(StrEnum):
    """The statuses a few-shot goes through (docs/architecture.md, Memory)."""

    PENDING_REVIEW = "pending_review"
    APPROVED = "approved"
    REJECTED = "rejected"
    ARCHIVED = "archived"


FewshotStatusParam = Annotated[FewshotStatus, Query(description="only few-shots in this status (default: the review queue)")]


class ReviewBody(BaseModel):
    """POST /fewshots/{id}/approve|reject: why (optional); the body itself may be left out."""

    model_config = ConfigDict(extra="forbid")

    reason: PlainText | None = Field(None, max_length=REASON_MAX_CHARS, description="kept as the version's status_reason")


class _Answer(BaseModel):
    # Every field is in every answer, defaults included: the document says so.
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


class FewshotView(_Answer):
    """One few-shot as a reviewer sees it (its current version)."""

    id: str
    version: int
    status: FewshotStatus
    question: str
    sql: str
    intent: dict[str, Any] | None = Field(description="the resolved intent the answer ran with")
    confidence: float
    fail_count: int = Field(description="failures of episodes that applied it; above the limit it is retired from search")
    author: str | None = Field(description="the user whose thumbs-up made the candidate (never its reviewer)")
    reviewed_by: str | None
    reviewed_at: datetime | None
    status_reason: str | None
    created_at: datetime


class FewshotListing(_Answer):
    items: list[FewshotView]
    next_cursor: str | None


def fewshot_view(record: MemoryRecord) -> FewshotView:
    """The record as a reviewer sees it; one whose value is not a few-shot's (written by hand
    through /memories) shows its content as the question and no SQL, so it can still be rejected."""
    try:
        value = FewshotValue.of(record)
    except ValidationFailed:
        value = FewshotValue(question=record.content, sql="")
    return FewshotView(
        id=record.id,
        version=record.version,
        status=FewshotStatus(record.status.value),
        question=value.question,
        sql=value.sql,
        intent=value.intent,
        confidence=record.confidence,
        fail_count=record.credit.failures,
        author=value.author or record.provenance.author,
        reviewed_by=value.reviewed_by,
        reviewed_at=value.reviewed_at,
        status_reason=record.status_reason,
        created_at=record.created_at,
    )


def memory_status(status: FewshotStatus) -> MemoryStatus:
    return MemoryStatus(status.value)


def require_reviewer(who: Identity) -> None:
    """Reviewing the few-shot library is for admins only."""
    if REVIEWER_ROLE not in who.roles:
        raise Forbidden("the few-shot library is reviewed by admins: this needs the admin role", field="roles")


__all__ = [
    "FewshotListing",
    "FewshotStatus",
    "FewshotStatusParam",
    "FewshotView",
    "ReviewBody",
    "fewshot_view",
    "memory_status",
    "require_reviewer",
]
