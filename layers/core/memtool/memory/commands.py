"""What a caller asks the memory service to do, as domain commands.

The HTTP API validates its bodies (plain text, key shapes, value bounds) and translates them into
these (``CreateMemoryBody.command()``); the flows that remember things on their own (an ask's
episode and turn, a diagnosis's lesson, a preference stated in chat) build them directly. The
memory service applies its own rules (scopes, sizes, PII, reserved kinds) to both alike.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memtool.memory.records import MemoryKind, MemoryScope, MemoryStatus, SourceRef, Trigger


class NewMemory(BaseModel):
    """Remember this for the caller (a new memory, or a new version of the slot ``key`` names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: MemoryKind
    content: str
    key: str | None = None
    value: Any = None
    source_text: str | None = None
    scope: MemoryScope | None = None  # None: the kind's default scope
    confidence: float = 1.0
    session_id: str | None = None
    tags: list[str] = Field(default_factory=list)
    trigger: Trigger = Trigger.EXPLICIT  # what made the memory (the author is the caller)
    episode_id: str | None = None
    sources: list[SourceRef] = Field(default_factory=list)


class MemoryEdit(BaseModel):
    """A new version of a memory: only the fields given change (``value=None`` given clears it).

    Which fields were given is pydantic's ``model_fields_set``: build one with the fields to
    change as keyword arguments (or ``model_validate`` a mapping of them).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    expected_version: int = Field(ge=1)
    content: str | None = None
    value: Any = None
    source_text: str | None = None
    status: MemoryStatus | None = None
    confidence: float | None = None
    tags: list[str] | None = None

    def changes(self) -> dict[str, Any]:
        """The fields given, by name (``expected_version`` is the precondition, not a change)."""
        return self.model_dump(exclude_unset=True, exclude={"expected_version"})


class MemoryPageRequest(BaseModel):
    """A page of the caller's (or the tenant's) memories, optionally of one kind or status."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: MemoryKind | None = None
    status: MemoryStatus | None = None
    scope: MemoryScope = MemoryScope.USER
    cursor: str | None = None
    limit: int = Field(20, ge=1)
