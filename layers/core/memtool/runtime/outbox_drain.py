"""Drains the SQLite store's transactional outbox into the indexer: the local event source.

In AWS the DynamoDB stream feeds the indexer Lambda; locally every write leaves a row in the
store's outbox in the same transaction, and this drain hands each row to the same
``MemoryIndexer`` the stream handler uses. A row is deleted only after the indexer took it, so a
crash (even ``kill -9``) between the two delivers it again on restart; the indexer is idempotent
by (memory id, version). A row that keeps failing is retried up to ``max_attempts`` times with a
growing pause, then kept as a dead letter (the local stand-in for the indexer's DLQ).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from memtool.flows.indexing import StreamChange
from memtool.runtime.polling import BackgroundDrain

if TYPE_CHECKING:
    from memtool.flows.indexing import MemoryIndexer
    from memtool.memory.sqlite_store import SQLiteMemoryStore

logger = logging.getLogger("memtool.indexer")


@dataclass
class OutboxDrainer:
    # Both are asked for at every round, not captured: the container may rebuild them (a reset
    # closes the store it built), and the drain must follow.
    store: Callable[[], SQLiteMemoryStore]
    indexer: Callable[[], MemoryIndexer]
    now: Callable[[], datetime]
    batch_size: int = 100
    max_attempts: int = 5
    delivered: int = 0
    failed_attempts: int = 0
    last_error: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def drain(self, max_batches: int | None = None) -> int:
        """Deliver pending changes, oldest first; returns how many the indexer took."""
        taken = 0
        batches = 0
        with self._lock:
            store = self.store()
            while max_batches is None or batches < max_batches:
                batch = store.outbox_batch(limit=self.batch_size)
                if not batch:
                    break
                batches += 1
                indexer = self.indexer()
                done: list[int] = []
                failed_now = 0
                held: set[tuple[str, str] | None] = set()
                for entry in batch:
                    memory = _memory_of(entry)
                    if memory in held:
                        # A memory's changes are applied in order: a MODIFY retried after a later
                        # REMOVE would put a forgotten memory back into the index.
                        continue
                    change = StreamChange(
                        event_name=entry.event_name,
                        new_image=entry.new_image,
                        old_image=entry.old_image,
                        by_ttl=entry.by_ttl,
                    )
                    try:
                        indexer.apply(change)
                    except Exception as exc:  # noqa: BLE001 - one bad change must not stop other memories' changes
                        held.add(memory)
                        failed_now += 1
                        self.failed_attempts += 1
                        self.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
                        dead = store.outbox_failed(entry.seq, self.last_error, self.max_attempts)
                        logger.warning(
                            "indexing change %s failed (attempt %s%s): %s",
                            entry.seq,
                            entry.attempts + 1,
                            ", now a dead letter" if dead else "",
                            self.last_error,
                        )
                        continue
                    done.append(entry.seq)
                store.outbox_done(done)
                self.delivered += len(done)
                taken += len(done)
                if failed_now:
                    break  # retry the failures on the next round, after the caller's pause
        return taken

    def stats(self) -> dict[str, Any]:
        outbox = self.store().outbox_stats(self.now())
        return {
            "delivered": self.delivered,
            "pending": outbox.pending,
            "dead_letters": outbox.dead,
            "lag_seconds": None if outbox.oldest_pending_seconds is None else round(outbox.oldest_pending_seconds, 3),
            "failed_attempts": self.failed_attempts,
            "last_error": self.last_error,
        }


def _memory_of(entry: Any) -> tuple[str, str] | None:
    """(tenant, memory id) of an outbox entry; None when its images name no record."""
    record = ((entry.new_image or entry.old_image) or {}).get("record") or {}
    tenant, memory_id = record.get("tenant"), record.get("id")
    return (str(tenant), str(memory_id)) if tenant and memory_id else None


@dataclass
class BackgroundOutboxDrain(BackgroundDrain):
    """The outbox drain in a background thread (see ``BackgroundDrain``)."""

    drainer: OutboxDrainer

    thread_name: ClassVar[str] = "memtool-outbox"
    what: ClassVar[str] = "outbox drain"
    join_seconds: ClassVar[float] = 10.0
