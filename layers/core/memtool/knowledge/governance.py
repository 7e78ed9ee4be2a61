"""What sources, proposals, pre-fill tasks and suggestions share: each is a ``knowledge`` record in
the tenant's shared partition, in a slot under a reserved key prefix (memtool.memory.slots), whose
``value`` is a pydantic model read back as hostile input, listed by scanning the partition's
knowledge a few pages at a time (docs/knowledge.md)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from memtool.memory.records import MemoryDraft, MemoryKind, MemoryRecord, MemoryScope, MemoryStatus, Provenance, Trigger
from memtool.memory.store import TENANT_OWNER, MemoryStore, Partition

Model = TypeVar("Model", bound=BaseModel)
Item = TypeVar("Item")
SCAN_PAGES = 20  # store pages one listing reads at most, looking for its records among the knowledge


def shared(tenant: str) -> Partition:
    return Partition(tenant, TENANT_OWNER)


def governance_draft(
    key: str, content: str, value: BaseModel | dict[str, Any], author: str, tags: list[str], *, max_chars: int = 2000
) -> MemoryDraft:
    """A new governance record: shared, active, written explicitly by ``author``; ``content`` is
    its one-line summary (a suggestion's is its effective value), cut to ``max_chars``."""
    return MemoryDraft(
        kind=MemoryKind.KNOWLEDGE,
        content=content[:max_chars],
        key=key,
        value=value.model_dump(mode="json") if isinstance(value, BaseModel) else value,
        scope=MemoryScope.TENANT,
        status=MemoryStatus.ACTIVE,
        provenance=Provenance(trigger=Trigger.EXPLICIT, author=author),
        tags=tags,
    )


def parsed(record: MemoryRecord, prefix: str, model: type[Model]) -> Model | None:
    """``record``'s value as ``model`` when it is a shared knowledge record under ``prefix`` whose
    value validates; None otherwise (a record written beneath the service is no such record)."""
    if record.kind is not MemoryKind.KNOWLEDGE or record.scope is not MemoryScope.TENANT:
        return None
    if not (record.key and record.key.startswith(prefix)) or not isinstance(record.value, dict):
        return None
    try:
        return model.model_validate(record.value)
    except ValidationError:
        return None


def scan(
    store: MemoryStore, tenant: str, now: datetime, pick: Callable[[MemoryRecord], Item | None], cursor: str | None, limit: int
) -> tuple[list[Item], str | None]:
    """A page of what ``pick`` keeps of the tenant's shared knowledge: store pages are read until one
    keeps something or ``SCAN_PAGES`` were read; the cursor goes on from there."""
    items: list[Item] = []
    next_cursor = cursor
    for _ in range(SCAN_PAGES):
        page = store.list(shared(tenant), now, kind=MemoryKind.KNOWLEDGE, cursor=next_cursor, limit=limit)
        items.extend(kept for kept in (pick(r) for r in page.items) if kept is not None)
        next_cursor = page.next_cursor
        if items or next_cursor is None:
            break
    return items, next_cursor
