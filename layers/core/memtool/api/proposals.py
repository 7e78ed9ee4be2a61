"""Bodies, parameters and answers of the proposal API (POST/GET /proposals, accept, reject, rebase)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from pydantic import BaseModel, ConfigDict, Field, model_validator

from memtool.api.limits import JsonValue, PlainText
from memtool.api.memories import ID_PATTERN, Identifier
from memtool.flows.proposals import Decision, Proposal, ProposalListing, ProposalStatus
from memtool.memory.records import MemoryKind, MemoryRecord

Reason = Annotated[PlainText, Field(min_length=1, max_length=2000)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class ChangeIn(_Body):
    """The new content, the new value, or both (a field left out keeps the target's)."""

    content: PlainText | None = Field(None, min_length=1, max_length=8192)
    value: JsonValue = None

    @model_validator(mode="after")
    def _something(self) -> ChangeIn:
        if not self.model_fields_set & {"content", "value"}:
            raise ValueError("give content, value or both")
        if "content" in self.model_fields_set and self.content is None:
            raise ValueError("content cannot be null: leave it out to keep the target's")
        return self

    def fields(self) -> dict[str, Any]:
        return self.model_dump(mode="json", include=self.model_fields_set & {"content", "value"})


class CreateProposalBody(_Body):
    target_id: Identifier | None = Field(None, description="the shared memory to change; left out with from_memory_id: the "
                                         "shared memory of the same kind and key (a term's tenant correction)")
    change: ChangeIn | None = Field(None, description="left out with from_memory_id: that memory's content (and value)")
    reason: Reason
    from_memory_id: Identifier | None = Field(None, description="one of your own memories (a personal correction) to propose")

    @model_validator(mode="after")
    def _what(self) -> CreateProposalBody:
        if self.target_id is None and self.from_memory_id is None:
            raise ValueError("give target_id, from_memory_id or both")
        if self.change is None and self.from_memory_id is None:
            raise ValueError("give change, or from_memory_id to propose that memory")
        return self


class AcceptProposalBody(_Body):
    change: ChangeIn | None = Field(None, description="the curator's edit of the change (left out: as proposed)")
    reason: Reason | None = None


class RejectProposalBody(_Body):
    reason: Reason


class RebaseProposalBody(_Body):
    change: ChangeIn | None = Field(None, description="a new change against the target as it is now (left out: the same)")


ProposalIdParam = Annotated[str, Path(pattern=ID_PATTERN, description="the proposal's id")]
ProposalStatusParam = Annotated[ProposalStatus | None, Query(description="only proposals in this status")]
ProposalCursorParam = Annotated[PlainText | None, Query(max_length=2048, description="next_cursor of the previous page (opaque)")]
ProposalLimitParam = Annotated[int, Query(ge=1, le=100, description="page size")]


class _Answer(BaseModel):
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


class ProposalView(_Answer):
    id: str
    status: ProposalStatus = Field(description="open; outdated (the target moved past base_version: rebase it); accepted; rejected")
    target_id: str
    target_kind: MemoryKind
    target_key: str | None
    base_version: int = Field(description="the target's version the change was made against")
    target_version: int | None = Field(description="the target's version now; null when it is gone")
    change: dict[str, Any] = Field(description="content and/or value, as proposed (accepted: as written)")
    reason: str
    from_memory_id: str | None
    from_version: int | None
    proposer: str
    reviewer: str | None
    decision_reason: str | None
    decided_at: datetime | None
    result_version: int | None = Field(description="accepted: the target's version the proposal wrote")
    created_at: datetime
    updated_at: datetime


class ProposalsListing(_Answer):
    items: list[ProposalView]
    next_cursor: str | None


class ProposalDecided(_Answer):
    proposal: ProposalView
    target: MemoryRecord | None = Field(description="accepted: the target's new version; rejected: null (nothing changed)")


def proposal_view(proposal: Proposal) -> ProposalView:
    value = proposal.value
    return ProposalView(
        id=proposal.id,
        status=proposal.status,
        target_id=value.target_id,
        target_kind=value.target_kind,
        target_key=value.target_key,
        base_version=value.base_version,
        target_version=proposal.target_version,
        change=value.change,
        reason=value.reason,
        from_memory_id=value.from_memory_id,
        from_version=value.from_version,
        proposer=value.proposer,
        reviewer=value.reviewer,
        decision_reason=value.decision_reason,
        decided_at=value.decided_at,
        result_version=value.result_version,
        created_at=proposal.created_at,
        updated_at=proposal.updated_at,
    )


def proposals_listing(listing: ProposalListing) -> ProposalsListing:
    return ProposalsListing(items=[proposal_view(p) for p in listing.items], next_cursor=listing.next_cursor)


def proposal_decided(decision: Decision) -> ProposalDecided:
    return ProposalDecided(proposal=proposal_view(decision.proposal), target=decision.target)
