"""Bodies, parameters and answers of the memory API (POST/GET/PATCH/DELETE /memories)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator, model_validator

from memtool.api.limits import JsonValue, PlainText
from memtool.memory.commands import MemoryEdit, MemoryPageRequest, NewMemory
from memtool.memory.records import MemoryKind, MemoryRecord, MemoryScope, MemoryStatus, SourceRef, Trigger
from memtool.planning.plan import Route

_KEY = re.compile(r"^[^\s#]{1,200}$")
# Ids, sessions and episodes travel inside table keys, where '#' separates the parts.
ID_PATTERN = r"^[A-Za-z0-9_.:\-]{1,128}$"
MAX_VERSION = 2**31 - 1

Confidence = Annotated[float, Field(ge=0.0, le=1.0, strict=True)]
Tag = Annotated[PlainText, Field(min_length=1, max_length=64)]
# The id pattern leaves no room for control characters, so these need no PlainText check.
Identifier = Annotated[StrictStr, Field(pattern=ID_PATTERN)]
SessionId = Identifier


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class ProvenanceIn(_Body):
    trigger: Trigger = Trigger.EXPLICIT
    episode_id: Identifier | None = None
    sources: list[SourceRef] = Field(default_factory=list, max_length=50)

    @field_validator("sources")
    @classmethod
    def _source_shape(cls, sources: list[SourceRef]) -> list[SourceRef]:
        for source in sources:
            if not re.fullmatch(ID_PATTERN, source.id):
                raise ValueError("source ids are 1-128 letters, digits, '_', '.', ':' or '-'")
            if source.version is not None and not 1 <= source.version <= MAX_VERSION:
                raise ValueError("source versions start at 1")
        return sources


class DependsOnIn(_Body):
    """One item a memory depends on: a source (POST /sources) or another memory, at a version."""

    source_id: Identifier | None = None
    memory_id: Identifier | None = None
    version: int | None = Field(None, ge=1, le=MAX_VERSION, strict=True, description="left out: the newest version now")

    @model_validator(mode="after")
    def _one_target(self) -> DependsOnIn:
        if (self.source_id is None) == (self.memory_id is None):
            raise ValueError("give exactly one of source_id and memory_id")
        return self

    def ref(self) -> SourceRef:
        if self.source_id is not None:
            return SourceRef(id=self.source_id, version=self.version, depends_on="source")
        assert self.memory_id is not None
        return SourceRef(id=self.memory_id, version=self.version, depends_on="memory")


class CreateMemoryBody(_Body):
    kind: MemoryKind
    content: PlainText = Field(min_length=1)
    key: PlainText | None = Field(
        None,
        description="slot name: 1-200 characters without spaces or '#'. A correction with a value.term is kept "
        "under term.<term> (left out, it is filled in): a second correction of the term supersedes the first",
    )
    value: JsonValue = None
    source_text: PlainText | None = None
    scope: MemoryScope | None = None
    confidence: Confidence = 1.0
    session_id: SessionId | None = None
    tags: list[Tag] = Field(default_factory=list, max_length=20)
    provenance: ProvenanceIn = Field(default_factory=ProvenanceIn)
    depends_on: list[DependsOnIn] = Field(
        default_factory=list,
        max_length=20,
        description="what the memory depends on: a newer version of one, or its deletion, makes the memory stale "
        "(GET /memories/{id} and the answers citing it say so); a cycle is refused",
    )

    @field_validator("key")
    @classmethod
    def _key_shape(cls, key: str | None) -> str | None:
        if key is not None and not _KEY.fullmatch(key):
            raise ValueError("must be 1-200 characters without spaces or '#'")
        return key

    def command(self) -> NewMemory:
        """The memory service's command for this body."""
        return NewMemory(
            kind=self.kind,
            content=self.content,
            key=self.key,
            value=self.value,
            source_text=self.source_text,
            scope=self.scope,
            confidence=self.confidence,
            session_id=self.session_id,
            tags=list(self.tags),
            trigger=self.provenance.trigger,
            episode_id=self.provenance.episode_id,
            sources=[*self.provenance.sources, *(d.ref() for d in self.depends_on)],
        )


def _omittable(**constraints: Any) -> Any:
    """A field that may be left out but not sent as null: typed without None, defaulting to None."""

    def no_default(schema: dict[str, Any]) -> None:
        schema.pop("default", None)

    return Field(None, json_schema_extra=no_default, **constraints)


class PatchMemoryBody(_Body):
    """Omitting a field keeps it. ``null`` clears ``value`` and ``source_text``; for the fields a
    memory always has (content, status, confidence, tags) ``null`` is refused, never read as "keep"."""

    expected_version: int = Field(ge=1, le=MAX_VERSION, strict=True)
    content: PlainText = _omittable(min_length=1)
    value: JsonValue = None
    source_text: PlainText | None = None
    status: MemoryStatus = _omittable()
    confidence: Confidence = _omittable()
    tags: list[Tag] = _omittable(max_length=20)

    def command(self) -> MemoryEdit:
        """The memory service's command: the fields sent, and only those, change."""
        return MemoryEdit.model_validate(self.model_dump(exclude_unset=True) | {"expected_version": self.expected_version})


class ListMemoriesQuery(_Body):
    kind: MemoryKind | None = None
    status: MemoryStatus | None = None
    scope: MemoryScope = MemoryScope.USER
    cursor: PlainText | None = Field(None, max_length=2048)
    limit: int = Field(20, ge=1, le=100)

    def command(self) -> MemoryPageRequest:
        return MemoryPageRequest(kind=self.kind, status=self.status, scope=self.scope, cursor=self.cursor, limit=self.limit)


# ---- parameters, as the routes declare them (Powertools validates and documents them) ---------

MemoryIdParam = Annotated[str, Path(pattern=ID_PATTERN, description="the memory's id")]
SessionIdParam = Annotated[str, Path(pattern=ID_PATTERN, description="the session's id (session_id of POST /ask)")]
KindParam = Annotated[MemoryKind | None, Query(description="only memories of this kind")]
StatusParam = Annotated[MemoryStatus | None, Query(description="only memories in this status")]
ScopeParam = Annotated[MemoryScope, Query(description="user: the caller's own; tenant: shared ones")]
CursorParam = Annotated[PlainText | None, Query(max_length=2048, description="next_cursor of the previous page (opaque)")]
LimitParam = Annotated[int, Query(ge=1, le=100, description="page size")]
SearchTextParam = Annotated[PlainText, Query(min_length=1, max_length=2000, description="the text to recall for")]
RouteParam = Annotated[Route, Query(description="the ask route whose budgets apply")]
ToolsParam = Annotated[PlainText | None, Query(max_length=500, description="comma-separated tool names")]
VersionParam = Annotated[int | None, Query(ge=1, le=MAX_VERSION, description="that version instead of the current one")]
HistoryParam = Annotated[bool, Query(description="also return every version")]


def tool_names(tools: str | None) -> tuple[str, ...]:
    return tuple(t.strip() for t in (tools or "").split(",") if t.strip())


# ---- answers ---------------------------------------------------------------------------------


class _Answer(BaseModel):
    # Every field is in every answer, defaults included: the document says so.
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


class SupersededView(_Answer):
    version: int
    content: str


class MemoryWritten(_Answer):
    """POST /memories: the stored version and what it replaced."""

    memory: MemoryRecord
    created: bool
    unchanged: bool
    superseded: SupersededView | None
    redactions: dict[str, int]


class MemoryRevised(_Answer):
    """PATCH /memories/{id}: the new version."""

    memory: MemoryRecord
    previous_version: int | None
    redactions: dict[str, int]


class MemoryListing(_Answer):
    items: list[MemoryRecord]
    next_cursor: str | None
    skipped: list[str] = Field(
        default_factory=list,
        description="ids of stored memories on this page that could not be read; an admin can delete them by id",
    )


class DependencyView(_Answer):
    id: str
    depends_on: str = Field(description="source or memory")
    version: int = Field(description="the version depended on")
    latest_version: int | None = Field(description="its newest version; null when it was deleted")
    name: str
    state: str = Field(description="current, newer (a later version exists) or gone")


class StaleItem(_Answer):
    memory: MemoryRecord
    dependencies: list[DependencyView] = Field(description="every dependency of the memory, as it is now")


class StaleDefinition(_Answer):
    kind: str = Field(description="metric or dimension of the tenant's semantic model")
    name: str
    dependencies: list[DependencyView] = Field(description="every source the definition declared (depends_on), as it is now")


class StaleListing(_Answer):
    """GET /knowledge/stale: the tenant's shared memories, and its model's definitions, with a
    dependency that moved on or is gone."""

    items: list[StaleItem]
    definitions: list[StaleDefinition] = Field(default_factory=list, description="metrics and dimensions of the model")


class MemoryRead(BaseModel):
    """GET /memories/{id}: ``history`` only when asked for."""

    memory: MemoryRecord
    stale: bool = Field(False, description="a dependency has a newer version or is gone")
    dependencies: list[DependencyView] = Field(default_factory=list, description="what the memory depends on, as it is now")
    history: list[MemoryRecord] | None = Field(None, description="every version, oldest first (?history=true)")


class RecalledView(_Answer):
    memory: MemoryRecord
    score: float
    parts: dict[str, float] = Field(description="relevance, decay, credit, recency, tool_match")
    cosine: float | None
    refreshed: bool = Field(description="the index held an older version; this is the record as it is now")


class RecallCoverageView(_Answer):
    """What recall looked at; fields the recall adds later pass through until documented here."""

    model_config = ConfigDict(extra="allow", json_schema_serialization_defaults_required=True)

    route: str
    budgets: dict[str, int]
    embedder: str
    index_available: bool
    fallback: str | None
    reason: str | None
    candidates_seen: int
    returned: int
    stale_refreshed: int
    dropped: dict[str, int] = Field(
        description="candidates left out, by reason (only reasons that occurred). Source checks: missing, "
        "other_tenant, other_owner, expired, inactive, maintenance_record, governance_record (a source or a proposal: "
        "read at /sources and /proposals), stale_version. Relevance floor: below_floor (cosine "
        "to the question under the kind's recall_min_cosine and no key term of the memory in the question), "
        "low_score (final score under the kind's recall_min_score), near_duplicate (same kind, identical "
        "normalised content or cosine at least recall_duplicate_cosine to a better-ranked kept memory), "
        "negative_example (an episode that did not answer, was rated down or failed more than it "
        "succeeded), overridden (a correction teaching the same term as a preferred one: the caller's over "
        "the tenant's, then newer, then more confident)"
    )
    skipped_undecodable: int = Field(0, description="stored records that could not be read and were left out")
    skipped_ids: list[str] = Field(default_factory=list, description="their ids")


class RecallView(_Answer):
    """GET /memories/search: recall as the ask flow sees it."""

    items: list[RecalledView] = Field(description="best first: by score, whatever the kind (ties in recall's order)")
    coverage: RecallCoverageView


def memory_view(record: MemoryRecord) -> dict[str, Any]:
    return record.model_dump(mode="json")


def recall_view(result: Any) -> dict[str, Any]:
    """A RecallResult as JSON: each memory with its score and the parts it is made of, best first.
    Recall keeps its memories kind by kind (each kind's budget, the named terms' corrections first
    within theirs); a reader of the search wants them ranked, so they are sorted by score here
    (a stable sort: ties keep recall's order)."""
    ranked = sorted(result.memories, key=lambda m: -m.score)
    view = RecallView(
        items=[
            RecalledView(
                memory=m.record,
                score=round(m.score, 6),
                parts={k: round(v, 6) for k, v in vars(m.parts).items()},
                cosine=None if m.cosine is None else round(m.cosine, 6),
                refreshed=m.refreshed,
            )
            for m in ranked
        ],
        coverage=RecallCoverageView.model_validate(result.coverage.as_dict()),
    )
    return view.model_dump(mode="json")
