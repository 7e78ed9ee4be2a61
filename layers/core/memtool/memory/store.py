"""The record-store port: versioned memory records, whatever holds them.

Besides the ``MemoryStore`` protocol this module holds what every adapter must do the same way:
how a new version is made from a patch, when a same-key write changes nothing, and the rule that a
record which cannot be read back is never stored (``storable_json``). The contract suite in
tests/integration/test_memory_store.py runs one set of behaviour tests on every adapter.
"""

from __future__ import annotations

import builtins
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pydantic_core import to_jsonable_python

from memtool.errors import ValidationFailed
from memtool.memory.policy import expires_at, policy_for
from memtool.memory.records import (
    Credit,
    IndexState,
    MemoryDraft,
    MemoryKind,
    MemoryPatch,
    MemoryRecord,
    MemoryStatus,
    new_memory_id,
)

logger = logging.getLogger("memtool.memory")


@dataclass(frozen=True)
class Partition:
    """Whose memories: a tenant and an owner (a user id, or TENANT_OWNER for shared ones)."""

    tenant: str
    owner: str


TENANT_OWNER = "_tenant"


@dataclass(frozen=True)
class WriteOutcome:
    record: MemoryRecord
    created: bool
    superseded: MemoryRecord | None = None
    unchanged: bool = False


@dataclass(frozen=True)
class MemoryPage:
    items: list[MemoryRecord]
    next_cursor: str | None
    # Ids of stored records on this page that could not be decoded: left out, not fatal.
    skipped: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class IndexPurge:
    """What the indexer needs to remove a forgotten memory from every index."""

    tenant: str
    owner: str
    memory_id: str
    last_version: int


@dataclass(frozen=True)
class ForgetOutcome:
    memory_id: str
    versions_removed: int
    purge: IndexPurge
    removed_versions: list[int] = field(default_factory=list)


class UndecodableRecord(ValidationFailed):
    """A stored record that cannot be read back (damaged, or written by an incompatible version).

    Single reads raise it; multi-record reads skip the record and report its id instead, so one
    bad record degrades a listing rather than breaking it. ``forget`` still removes it.
    """

    def __init__(self, memory_id: str, reason: str = "") -> None:
        super().__init__(f"memory {memory_id} cannot be decoded; an admin can delete it", field="id")
        self.memory_id = memory_id
        self.reason = reason


def forgotten(where: Partition, memory_id: str, versions: list[int], last_version: int) -> ForgetOutcome:
    """What a forget removed, and what the indexer needs to purge it (both adapters answer this)."""
    return ForgetOutcome(
        memory_id=memory_id,
        versions_removed=len(versions),
        removed_versions=versions,
        purge=IndexPurge(tenant=where.tenant, owner=where.owner, memory_id=memory_id, last_version=last_version),
    )


class MemoryStore(Protocol):
    def create(self, where: Partition, draft: MemoryDraft, now: datetime) -> WriteOutcome: ...

    def update(
        self, where: Partition, memory_id: str, patch: MemoryPatch, expected_version: int, now: datetime
    ) -> WriteOutcome: ...

    def get(self, where: Partition, memory_id: str, now: datetime, version: int | None = None) -> MemoryRecord: ...

    def update_credit(
        self,
        where: Partition,
        memory_id: str,
        compute: Callable[[MemoryRecord], Credit],
        used_at: datetime,
        now: datetime,
    ) -> MemoryRecord:
        """Set the live head's credit to ``compute(head)`` and its use time; returns the head as written.

        Usage metadata, not content: no new version, no snapshot, nothing the indexer acts on. Never
        loses a concurrent update: ``compute`` sees the head as it is when the write lands, so it
        may run more than once (it must be pure, e.g. ``credit_after``) and may run while the store
        holds a write lock (it must be quick). ``last_used_at`` only moves forward. ``NotFound``
        for a missing or expired head, ``UndecodableRecord`` for one that cannot be read.
        """

    def history(self, where: Partition, memory_id: str, now: datetime) -> list[MemoryRecord]: ...

    def unindexed(self, before: datetime, now: datetime, limit: int = 500) -> list[MemoryRecord]:
        """Heads (of every partition) whose current version is not indexed and was written before ``before``."""
        ...

    def partitions(self, tenant: str | None = None, after: Partition | None = None, limit: int = 500) -> builtins.list[Partition]:
        """The partitions that hold heads (of ``tenant``, or of every tenant), in (tenant, owner)
        order, starting after ``after``: how maintenance walks a tenant's users with a cursor."""
        ...

    def list(
        self,
        where: Partition,
        now: datetime,
        kind: MemoryKind | None = None,
        status: MemoryStatus | None = None,
        cursor: str | None = None,
        limit: int = 20,
    ) -> MemoryPage: ...

    def forget(self, where: Partition, memory_id: str) -> ForgetOutcome: ...

    def delete_by_id(self, where: Partition, memory_id: str) -> ForgetOutcome:
        """Admin delete: like forget, and it works on a record that cannot be decoded."""

    def get_slot(self, where: Partition, kind: MemoryKind, key: str, now: datetime) -> MemoryRecord | None: ...

    def get_many(
        self, tenant: str, refs: Sequence[tuple[str, str]], skipped: builtins.list[str] | None = None
    ) -> dict[str, MemoryRecord]:
        """Heads by (owner, memory id) within one tenant; missing ones are absent.

        Ids of records that cannot be decoded are appended to ``skipped`` when given.
        """

    def heads(
        self,
        where: Partition,
        kinds: Sequence[MemoryKind] | None = None,
        limit: int = 2000,
        skipped: builtins.list[str] | None = None,
    ) -> builtins.list[MemoryRecord]:
        """Up to ``limit`` heads, expired or not, newest id first; undecodable ids go to ``skipped``."""

    # ---- the indexer's side (flows.indexing.IndexedStore) ----------------------------------

    def record_from_image(self, image: dict[str, Any]) -> MemoryRecord | None:
        """The record a change image carries (a stream image, an outbox entry); None when it does not decode."""

    def mark_indexed(self, where: Partition, memory_id: str, version: int, state: IndexState) -> bool: ...

    def purge_snapshots(self, where: Partition, memory_id: str) -> int: ...


# ---- what every adapter does the same way ---------------------------------------------------


def first_version(where: Partition, draft: MemoryDraft, now: datetime) -> MemoryRecord:
    """Version 1 of a new memory, with the kind's default scope, status and time to live."""
    policy = policy_for(draft.kind)
    return MemoryRecord(
        id=new_memory_id(),
        tenant=where.tenant,
        owner=where.owner,
        kind=draft.kind,
        key=draft.key,
        content=draft.content,
        value=draft.value,
        source_text=draft.source_text,
        scope=draft.scope or policy.default_scope,
        status=draft.status or policy.initial_status,
        version=1,
        confidence=draft.confidence,
        provenance=draft.provenance,
        session_id=draft.session_id,
        tags=draft.tags,
        created_at=now,
        updated_at=now,
        expires_at=expires_at(draft.kind, now, draft.ttl_seconds),
        redactions=draft.redactions,
    )


def supersede_patch(draft: MemoryDraft) -> MemoryPatch:
    """A same-key create as a patch on the memory that holds the slot."""
    return MemoryPatch(
        content=draft.content,
        value=draft.value,
        source_text=draft.source_text,
        status=draft.status or policy_for(draft.kind).initial_status,
        confidence=draft.confidence,
        tags=draft.tags,
        provenance=draft.provenance,
        redactions=draft.redactions,
        ttl_seconds=draft.ttl_seconds,
    )


def same_content(current: MemoryRecord, patch: MemoryPatch) -> bool:
    """A same-key write that would change nothing visible makes no new version."""
    return (
        current.content == patch.content
        and current.value == patch.value
        and current.status == patch.status
        and (patch.source_text is None or current.source_text == patch.source_text)
    )


def next_version(current: MemoryRecord, patch: MemoryPatch, now: datetime) -> MemoryRecord:
    """The version a patch makes: one up, fresh time to live, to be indexed again."""
    changes = patch.model_dump(exclude_unset=True)
    ttl_seconds = changes.pop("ttl_seconds", None)
    if patch.provenance is not None:
        changes["provenance"] = patch.provenance
    if "status" in changes and "status_reason" not in changes:
        changes["status_reason"] = None  # a reason explains one status, never the next
    new = current.model_copy(
        update={
            **changes,
            "version": current.version + 1,
            "updated_at": now,
            "expires_at": expires_at(current.kind, now, ttl_seconds),
            "index_state": IndexState.PENDING,
            "redactions": patch.redactions or {},
        }
    )
    return MemoryRecord.model_validate(new.model_dump())


def credited(current: MemoryRecord, credit: Credit, used_at: datetime) -> MemoryRecord | None:
    """The head with a new credit and use time, or None when that changes nothing (a retry).

    ``last_used_at`` keeps the later of the two times, so credits landing out of order (an old
    episode rated late) never move it back.
    """
    last_used_at = used_at if current.last_used_at is None else max(current.last_used_at, used_at)
    if credit == current.credit and last_used_at == current.last_used_at:
        return None
    return current.model_copy(update={"credit": credit, "last_used_at": last_used_at})


def _json_text(value: Any) -> str:
    # pydantic quietly writes NaN and infinities as null; "constants" keeps them so that
    # json.dumps(allow_nan=False) can refuse them instead of storing a different value.
    text = json.dumps(
        to_jsonable_python(value, inf_nan_mode="constants"),
        allow_nan=False,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    text.encode("utf-8")  # lone surrogates cannot be stored as UTF-8 text
    return text


_UNSTORABLE = (ValueError, TypeError, RecursionError)  # pydantic's ValidationError is a ValueError


def _offending_field(record: MemoryRecord) -> str:
    for name in MemoryRecord.model_fields:
        try:
            _json_text(getattr(record, name))
        except _UNSTORABLE:
            return name
    return "value"  # the only free-form field: too deep for the JSON reader, for one


def storable_json(record: MemoryRecord) -> str:
    """The record as JSON text, proven to decode back into the same record.

    A record that cannot be read back is never stored: every adapter calls this before it
    writes and refuses with ``ValidationFailed`` (naming the field) when the round trip fails,
    e.g. for NaN or infinity, a ``value`` nested deeper than the JSON reader accepts, or text
    that is not valid Unicode.
    """
    try:
        _json_text(record.value)
        data = to_jsonable_python(record, inf_nan_mode="constants")
        text = json.dumps(data, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        text.encode("utf-8")
        back = MemoryRecord.model_validate_json(text)
    except _UNSTORABLE as exc:
        field_name = _offending_field(record)
        raise ValidationFailed(
            f"{field_name} cannot be stored: it would not read back ({type(exc).__name__}: {str(exc)[:120]})",
            field=field_name,
        ) from exc
    decoded = back.model_dump(mode="json")
    if decoded != data:
        field_name = next((name for name in data if decoded.get(name) != data[name]), "value")
        raise ValidationFailed(f"{field_name} cannot be stored: it reads back differently", field=field_name)
    return text


def decode_record(text: str | bytes) -> MemoryRecord:
    """A record from the JSON text ``storable_json`` made; raises what pydantic raises."""
    return MemoryRecord.model_validate_json(text)


def report_skipped(memory_id: str, reason: object, skipped: list[str] | None) -> None:
    """Log a record a multi-record read left out, and tell the caller when it asked."""
    logger.warning("memory %s cannot be decoded and was skipped: %s", memory_id, str(reason)[:200])
    if skipped is not None:
        skipped.append(memory_id)
