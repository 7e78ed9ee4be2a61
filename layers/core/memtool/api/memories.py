"""Bodies and views of the memory API (POST/GET/PATCH/DELETE /memories)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator

from memtool.memory.records import MemoryKind, MemoryRecord, MemoryScope, MemoryStatus, SourceRef, Trigger

_KEY = re.compile(r"^[^\s#]{1,200}$")

Confidence = Annotated[float, Field(ge=0.0, le=1.0)]
Tag = Annotated[str, Field(min_length=1, max_length=64)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class ProvenanceIn(_Body):
    trigger: Trigger = Trigger.EXPLICIT
    episode_id: StrictStr | None = Field(None, max_length=128)
    sources: list[SourceRef] = Field(default_factory=list, max_length=50)


class CreateMemoryBody(_Body):
    kind: MemoryKind
    content: StrictStr = Field(min_length=1)
    key: StrictStr | None = None
    value: Any = None
    source_text: StrictStr | None = None
    scope: MemoryScope | None = None
    confidence: Confidence = 1.0
    session_id: StrictStr | None = Field(None, min_length=1, max_length=128)
    tags: list[Tag] = Field(default_factory=list, max_length=20)
    provenance: ProvenanceIn = Field(default_factory=ProvenanceIn)

    @field_validator("key")
    @classmethod
    def _key_shape(cls, key: str | None) -> str | None:
        if key is not None and not _KEY.match(key):
            raise ValueError("must be 1-200 characters without spaces or '#'")
        return key


class PatchMemoryBody(_Body):
    expected_version: int = Field(ge=1, strict=True)
    content: StrictStr | None = Field(None, min_length=1)
    value: Any = None
    source_text: StrictStr | None = None
    status: MemoryStatus | None = None
    confidence: Confidence | None = None
    tags: list[Tag] | None = Field(None, max_length=20)


class ListMemoriesQuery(_Body):
    kind: MemoryKind | None = None
    status: MemoryStatus | None = None
    scope: MemoryScope = MemoryScope.USER
    cursor: StrictStr | None = Field(None, max_length=2048)
    limit: int = Field(20, ge=1, le=100)


class SearchMemoriesQuery(_Body):
    q: StrictStr = Field(min_length=1, max_length=2000)
    route: StrictStr = "nl2sql_query"
    tools: StrictStr | None = Field(None, max_length=500, description="comma-separated tool names")

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(t.strip() for t in (self.tools or "").split(",") if t.strip())


class GetMemoryQuery(_Body):
    version: int | None = Field(None, ge=1)
    history: bool = False


def memory_view(record: MemoryRecord) -> dict[str, Any]:
    return record.model_dump(mode="json")


def recall_view(result: Any) -> dict[str, Any]:
    """A RecallResult as JSON: each memory with its score and the parts it is made of."""
    return {
        "items": [
            {
                "memory": memory_view(m.record),
                "score": round(m.score, 6),
                "parts": {k: round(v, 6) for k, v in vars(m.parts).items()},
                "cosine": None if m.cosine is None else round(m.cosine, 6),
                "refreshed": m.refreshed,
            }
            for m in result.memories
        ],
        "coverage": result.coverage.as_dict(),
    }
