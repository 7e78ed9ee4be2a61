"""How a memory record becomes searchable text and an index document."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memtool.memory.records import MemoryRecord
from memtool.retrieval.index import IndexDocument


def searchable_text(record: MemoryRecord) -> str:
    """Content, the user's own words and the slot key: what both BM25 and the embedder see."""
    parts = [record.content]
    if record.source_text and record.source_text != record.content:
        parts.append(record.source_text)
    if record.key:
        parts.append(record.key)
    return "\n".join(parts)


def tools_used(record: MemoryRecord) -> tuple[str, ...]:
    """Tools in the record's trajectory (``value.trajectory[].tool``) and ``tool:<name>`` tags."""
    names: list[str] = [tag.split(":", 1)[1] for tag in record.tags if tag.startswith("tool:")]
    value: Any = record.value
    if isinstance(value, dict):
        for step in value.get("trajectory") or []:
            if isinstance(step, dict) and isinstance(step.get("tool"), str):
                names.append(step["tool"])
        for name in value.get("tools") or []:
            if isinstance(name, str):
                names.append(name)
    return tuple(dict.fromkeys(names))


def index_document(record: MemoryRecord, vector: Sequence[float], embedder_id: str) -> IndexDocument:
    return IndexDocument(
        memory_id=record.id,
        version=record.version,
        tenant=record.tenant,
        owner=record.owner,
        kind=record.kind.value,
        status=record.status.value,
        scope=record.scope.value,
        text=searchable_text(record),
        vector=list(vector),
        embedder=embedder_id,
        key=record.key,
        tags=tuple(record.tags),
        tools=tools_used(record),
        updated_at=record.updated_at,
    )
