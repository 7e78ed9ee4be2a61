"""Keeps the vector index in step with the memory table, one stream change at a time.

INSERT/MODIFY of a head indexes that version (an older version never overwrites a newer one)
and records the head's index state; REMOVE purges the index entry, and when DynamoDB's TTL
removed the head, its snapshots too (and a session's working memory is distilled into the user's
profile, as ending it does). Changes that do not make a new version (index-state and
credit updates) are ignored, so marking a record indexed does not index it again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from memtool.memory.records import IndexState, MemoryKind, MemoryRecord
from memtool.memory.slots import SESSION_TURNS
from memtool.memory.store import Partition
from memtool.retrieval.documents import facet_ids, index_documents
from memtool.retrieval.embedders import Embedder
from memtool.retrieval.index import DeleteRef, VectorIndex

logger = logging.getLogger("memtool.indexer")

TTL_PRINCIPAL = "dynamodb.amazonaws.com"

Outcome = Literal["indexed", "stale", "purged", "ignored"]


@dataclass(frozen=True)
class StreamChange:
    event_name: str  # INSERT | MODIFY | REMOVE
    new_image: dict[str, Any] | None
    old_image: dict[str, Any] | None
    by_ttl: bool = False

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> StreamChange:
        dynamodb = record.get("dynamodb") or {}
        identity = record.get("userIdentity") or {}
        return cls(
            event_name=record["eventName"],
            new_image=dynamodb.get("NewImage"),
            old_image=dynamodb.get("OldImage"),
            by_ttl=identity.get("type") == "Service" and identity.get("principalId") == TTL_PRINCIPAL,
        )


class IndexedStore(Protocol):
    """What the indexer needs of a record store: its change images, and index bookkeeping.

    DynamoDB's stream images and the SQLite outbox's images differ; each store decodes its own.
    """

    def record_from_image(self, image: dict[str, Any]) -> MemoryRecord | None: ...

    def mark_indexed(self, where: Partition, memory_id: str, version: int, state: IndexState) -> bool: ...

    def purge_snapshots(self, where: Partition, memory_id: str) -> int: ...


class MemoryIndexer:
    def __init__(
        self,
        store: IndexedStore,
        index: VectorIndex,
        embedder: Embedder,
        *,
        on_session_expired: Callable[[MemoryRecord], object] | None = None,
    ) -> None:
        self._store = store
        self._index = index
        self._embedder = embedder
        # A session whose working memory DynamoDB's TTL removed is distilled, as DELETE /sessions/{id} does.
        self._on_session_expired = on_session_expired

    def apply(self, change: StreamChange) -> Outcome:
        if change.event_name == "REMOVE":
            return self._purge(change)
        record = self._store.record_from_image(change.new_image or {})
        if record is None:
            return "ignored"  # snapshots and slots are not searched
        old = self._store.record_from_image(change.old_image or {}) if change.old_image else None
        if old is not None and old.version == record.version:
            return "ignored"  # no new version: an index-state or credit update
        return self.index(record)

    def index(self, record: MemoryRecord) -> Outcome:
        """Index one version of a head and record that it is indexed (the stream and the
        maintenance reconciliation both come here)."""
        report = self._index.upsert(index_documents(record, self._embedder.embed, self._embedder.id))
        if record.id in report.skipped_stale:
            return "stale"
        self._store.mark_indexed(Partition(record.tenant, record.owner), record.id, record.version, IndexState.INDEXED)
        return "indexed"

    def is_indexed(self, record: MemoryRecord) -> bool:
        """The index holds this version of the record (or a newer one)."""
        found = self._index.indexed_version(record.id, record.tenant)
        return found is not None and found >= record.version

    def _purge(self, change: StreamChange) -> Outcome:
        record = self._store.record_from_image(change.old_image or {})
        if record is None:
            return "ignored"
        self._index.delete([DeleteRef(memory_id=doc_id, tenant=record.tenant, version=record.version) for doc_id in facet_ids(record)])
        if change.by_ttl:
            self._store.purge_snapshots(Partition(record.tenant, record.owner), record.id)
            if (
                self._on_session_expired is not None
                and record.kind is MemoryKind.WORKING
                and SESSION_TURNS.matches(record.kind, record.key)
            ):
                try:
                    self._on_session_expired(record)
                except Exception:
                    logger.warning("the expired session %s could not be distilled", record.key, exc_info=True)
        return "purged"
