"""The record-store port: versioned memory records, whatever holds them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from memtool.memory.records import (
    MemoryDraft,
    MemoryKind,
    MemoryPatch,
    MemoryRecord,
    MemoryStatus,
)


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


class MemoryStore(Protocol):
    def create(self, where: Partition, draft: MemoryDraft, now: datetime) -> WriteOutcome: ...

    def update(
        self, where: Partition, memory_id: str, patch: MemoryPatch, expected_version: int, now: datetime
    ) -> WriteOutcome: ...

    def get(self, where: Partition, memory_id: str, now: datetime, version: int | None = None) -> MemoryRecord: ...

    def history(self, where: Partition, memory_id: str, now: datetime) -> list[MemoryRecord]: ...

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

    def get_slot(self, where: Partition, kind: MemoryKind, key: str, now: datetime) -> MemoryRecord | None: ...

    def get_many(self, tenant: str, refs: Sequence[tuple[str, str]]) -> dict[str, MemoryRecord]:
        """Heads by (owner, memory id) within one tenant; missing ones are absent."""

    def heads(self, where: Partition, kinds: Sequence[MemoryKind] | None = None, limit: int = 2000) -> list[MemoryRecord]: ...
