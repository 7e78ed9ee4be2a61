"""Capacity: no owner keeps more live memories of a kind than its limit.

``MEMTOOL_CAPACITY_<KIND>`` per owner (a user, or the tenant's shared partition) and kind:
episodic 5,000, causal 500, cache 10,000, correction 2,000 by default. Over the limit, the lowest
scored leave first (credit × decay, the recall score without a question), then the least recently
used, then the oldest. They are archived with the reason (an archived cached SQL answers nothing;
its time to live removes it). Pinned memories count toward the limit and never leave.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from memtool.lifecycle.walk import LIVE, LifecycleStore, StepResult, archive, is_pinned, walk
from memtool.memory.records import MemoryKind, MemoryRecord
from memtool.memory.store import Partition
from memtool.retrieval.scoring import credit, decay


def eviction_order(record: MemoryRecord, now: datetime) -> tuple[float, datetime, datetime, str]:
    """Lowest first: the score, then the last use (never used counts as its creation), then age
    (the id, which sorts by creation, breaks a tie of timestamps)."""
    return (credit(record) * decay(record, now), record.last_used_at or record.created_at, record.created_at, record.id)


class Capacity:
    name = "capacity"

    def __init__(self, store: LifecycleStore, limits: Mapping[MemoryKind, int], batch: int = 2000) -> None:
        self._store = store
        self._limits = dict(limits)
        self._batch = batch

    def run(self, tenant: str, cursor: str | None, now: datetime) -> StepResult:
        def visit(where: Partition, heads: list[MemoryRecord], result: StepResult) -> None:
            for kind, limit in self._limits.items():
                live = [r for r in heads if r.kind is kind and r.status in LIVE]
                over = len(live) - limit
                if over <= 0:
                    continue
                result.add(f"over_{kind.value}")
                movable = sorted((r for r in live if not is_pinned(r)), key=lambda r: eviction_order(r, now))
                for record in movable[:over]:
                    if archive(
                        self._store, where, record, f"evicted by maintenance: over the {kind.value} capacity of {limit}", now, result
                    ):
                        result.add("evicted")

        result = walk(self._store, tenant, cursor, self._batch, tuple(self._limits), visit, now)
        result.counts.setdefault("evicted", 0)
        return result
