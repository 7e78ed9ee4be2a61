"""Memory records: the kinds, statuses and fields every stored memory carries (docs/architecture.md, Memory)."""

from __future__ import annotations

import os
import time
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, Required, cast

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, WithJsonSchema, model_serializer
from typing_extensions import TypedDict


class MemoryKind(StrEnum):
    WORKING = "working"
    PROFILE = "profile"
    EPISODIC = "episodic"
    CORRECTION = "correction"
    KNOWLEDGE = "knowledge"
    FEWSHOT = "fewshot"
    CAUSAL = "causal"
    CACHE = "cache"


class MemoryScope(StrEnum):
    USER = "user"
    TENANT = "tenant"


class MemoryStatus(StrEnum):
    ACTIVE = "active"
    PENDING_REVIEW = "pending_review"
    APPROVED = "approved"
    REJECTED = "rejected"
    SUPERSEDED = "superseded"
    ARCHIVED = "archived"


class Trigger(StrEnum):
    """What made a memory: formation is triggered, never autonomous."""

    EXPLICIT = "explicit"
    INTERACTION = "interaction"
    FEEDBACK = "feedback"
    CORRECTION = "correction"
    CLARIFICATION = "clarification"
    DIAGNOSIS = "diagnosis"


class IndexState(StrEnum):
    """'Saved' and 'indexed' differ: the stream-driven indexer moves a record to INDEXED."""

    PENDING = "pending"
    INDEXED = "indexed"
    FAILED = "failed"


# How many episodes' rewards a memory's credit remembers: a second rating of one of them
# replaces the first instead of counting twice (older ratings count as new ones again).
CREDIT_RECENT_KEPT = 50


class CreditEntry(BaseModel):
    """One episode's reward, as credited to a memory the episode applied."""

    model_config = ConfigDict(extra="forbid")

    episode_id: str
    reward: float
    at: datetime


class Credit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    uses: int = 0
    successes: int = 0
    failures: int = 0
    feedback_score: float = 0.0  # exponential moving average of the rewards credited
    recent: list[CreditEntry] = Field(default_factory=list)  # newest last, at most CREDIT_RECENT_KEPT


class SourceRefJson(TypedDict, total=False):
    """A SourceRef as JSON: ``depends_on`` only on a dependency."""

    id: Required[str]
    version: int | None
    depends_on: Literal["source", "memory"]


class SourceRef(BaseModel):
    """Where a memory came from. With ``depends_on`` set it is a dependency, checked on every read
    (memtool.knowledge.dependencies): a ``source`` or a ``memory`` at ``version``; a newer version
    or none at all makes the memory stale. Without it, a record of origin that nothing checks."""

    model_config = ConfigDict(extra="forbid")

    id: str
    version: int | None = None
    depends_on: Literal["source", "memory"] | None = None

    @model_serializer(mode="wrap")
    def _plain_when_no_dependency(self, handler: SerializerFunctionWrapHandler) -> SourceRefJson:
        """A record of origin stays ``{id, version}`` as it was stored before dependencies existed."""
        data = handler(self)
        if data.get("depends_on") is None:
            data.pop("depends_on", None)
        return cast(SourceRefJson, data)


class ProposalProvenance(BaseModel):
    """A version written by accepting a proposal (POST /proposals/{id}/accept): who proposed the
    change and which curator accepted it (memtool.flows.proposals)."""

    model_config = ConfigDict(extra="forbid")

    proposal_id: str
    proposer: str
    reviewer: str


class ProposalProvenanceJson(TypedDict):
    proposal_id: str
    proposer: str
    reviewer: str


class ProvenanceJson(TypedDict, total=False):
    """A Provenance as JSON: ``proposal`` only on a version a proposal wrote. The serializer's
    output is already plain data, so the types here are the JSON ones (the enum named in the schema)."""

    trigger: Required[Annotated[str, WithJsonSchema({"type": "string", "enum": [t.value for t in Trigger]})]]
    author: str | None
    episode_id: str | None
    sources: list[SourceRefJson]
    proposal: ProposalProvenanceJson


class Provenance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trigger: Trigger = Trigger.EXPLICIT
    author: str | None = None
    episode_id: str | None = None
    sources: list[SourceRef] = Field(default_factory=list)
    proposal: ProposalProvenance | None = None

    @model_serializer(mode="wrap")
    def _no_proposal_unless_one(self, handler: SerializerFunctionWrapHandler) -> ProvenanceJson:
        """Versions no proposal wrote keep the shape they had before proposals existed."""
        data = handler(self)
        if data.get("proposal") is None:
            data.pop("proposal", None)
        return cast(ProvenanceJson, data)


class MemoryRecord(BaseModel):
    """One version of one memory, as stored and as returned."""

    model_config = ConfigDict(extra="forbid")

    id: str
    tenant: str
    owner: str
    kind: MemoryKind
    key: str | None = None
    content: str
    value: Any = None
    source_text: str | None = None
    scope: MemoryScope
    status: MemoryStatus
    status_reason: str | None = None  # why this version has its status (e.g. archived by low credit)
    version: int
    credit: Credit = Field(default_factory=Credit)
    confidence: float = 1.0
    provenance: Provenance = Field(default_factory=Provenance)
    session_id: str | None = None
    tags: list[str] = Field(default_factory=list)
    created_at: datetime
    updated_at: datetime
    last_used_at: datetime | None = None
    expires_at: datetime | None = None
    index_state: IndexState = IndexState.PENDING
    redactions: dict[str, int] = Field(default_factory=dict)

    def is_expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now


class MemoryDraft(BaseModel):
    """What a caller asks to store; the store adds identity, version and timestamps."""

    model_config = ConfigDict(extra="forbid")

    kind: MemoryKind
    content: str
    key: str | None = None
    value: Any = None
    source_text: str | None = None
    scope: MemoryScope | None = None
    status: MemoryStatus | None = None
    confidence: float = 1.0
    provenance: Provenance = Field(default_factory=Provenance)
    session_id: str | None = None
    tags: list[str] = Field(default_factory=list)
    redactions: dict[str, int] = Field(default_factory=dict)
    ttl_seconds: int | None = Field(None, ge=1)  # a time to live other than the kind's (the SQL cache's setting)


class MemoryPatch(BaseModel):
    """Fields a new version may change; ``None`` keeps the current value."""

    model_config = ConfigDict(extra="forbid")

    content: str | None = None
    value: Any = None
    source_text: str | None = None
    status: MemoryStatus | None = None
    status_reason: str | None = None
    confidence: float | None = None
    tags: list[str] | None = None
    provenance: Provenance | None = None
    redactions: dict[str, int] | None = None
    ttl_seconds: int | None = Field(None, ge=1)  # the new version's time to live, when not the kind's


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_memory_id(prefix: str = "mem") -> str:
    """A ULID-shaped id: 48-bit millisecond time then 80 random bits, so ids sort by creation."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return f"{prefix}_{''.join(reversed(chars))}"
