"""How a memory record becomes searchable text and an index document."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from memtool.memory.records import MemoryKind, MemoryRecord
from memtool.retrieval.index import IndexDocument

# A memory searched by more than one key is indexed as one document per key: the first under the
# memory's id, the others under "<id>#<facet>". Recall folds them back into one memory and fuses
# their ranks. A causal memory is found by its scenario (the question) and by its root cause.
FACET_SEPARATOR = "#"
CAUSE_FACET = "cause"


def memory_id_of(document_id: str) -> str:
    """The memory an index document belongs to (a facet's id names its memory first)."""
    return document_id.split(FACET_SEPARATOR, 1)[0]


def facet_ids(record: MemoryRecord) -> list[str]:
    """Every index document id of a record: its own, then its facets'."""
    return [document_id for document_id, _ in facet_texts(record)]


def facet_texts(record: MemoryRecord) -> list[tuple[str, str]]:
    """(document id, text) for each key the record is searched by."""
    if record.kind is MemoryKind.CAUSAL:
        value = record.value if isinstance(record.value, dict) else {}
        scenario = value.get("scenario")
        if not isinstance(scenario, dict):
            scenario = {}
        asked = [str(scenario.get(k)) for k in ("question", "asked") if scenario.get(k)]
        scenario_text = "\n".join(dict.fromkeys([*asked, record.source_text or record.content]))
        cause = "\n".join(str(part) for part in (value.get("root_cause"), value.get("lesson")) if part) or record.content
        return [(record.id, scenario_text), (f"{record.id}{FACET_SEPARATOR}{CAUSE_FACET}", cause)]
    if record.kind is MemoryKind.CACHE:
        return [(record.id, record.content)]  # the masked question alone: the SQL cache matches shapes
    return [(record.id, searchable_text(record))]


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


def index_documents(
    record: MemoryRecord, embed: Callable[[list[str]], Sequence[Sequence[float]]], embedder_id: str
) -> list[IndexDocument]:
    """One document per key the record is searched by, each with its own text and vector."""
    facets = facet_texts(record)
    vectors = embed([text for _, text in facets])
    return [
        index_document(record, vector, embedder_id, document_id=document_id, text=text)
        for (document_id, text), vector in zip(facets, vectors, strict=True)
    ]


def index_document(
    record: MemoryRecord, vector: Sequence[float], embedder_id: str, *, document_id: str | None = None, text: str | None = None
) -> IndexDocument:
    return IndexDocument(
        memory_id=document_id or record.id,
        version=record.version,
        tenant=record.tenant,
        owner=record.owner,
        kind=record.kind.value,
        status=record.status.value,
        scope=record.scope.value,
        text=searchable_text(record) if text is None else text,
        vector=list(vector),
        embedder=embedder_id,
        key=record.key,
        tags=tuple(record.tags),
        tools=tools_used(record),
        updated_at=record.updated_at,
    )
