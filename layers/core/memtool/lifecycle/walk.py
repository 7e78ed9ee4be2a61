"""How a maintenance step walks a tenant: partition after partition, a bounded batch per call.

A step is called with a tenant and a cursor (the last owner it finished, or None to start). It
takes partitions in (tenant, owner) order after the cursor, reads each one's heads whole, and
stops once it has read ``batch`` heads: the result's cursor is the last owner it finished, or None
when the tenant is done. MaintenanceFlow calls the step again while a cursor comes back, so a run
is bounded per call and resumes where a failed call left off. Every write is conditional on the
version read (a memory that changed meanwhile is left for the next run) and every step is
idempotent: a second run over the same state changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from memtool.errors import NotFound, VersionConflict
from memtool.memory.records import MemoryKind, MemoryPatch, MemoryRecord, MemoryStatus
from memtool.memory.store import MemoryStore, Partition

# A partition is read whole (capacity and consolidation compare its memories): far above any
# capacity default, so a partition is never cut in two.
PARTITION_READ_LIMIT = 100_000
LIVE = (MemoryStatus.ACTIVE, MemoryStatus.APPROVED)


# The steps take the record store port itself (memory.store.MemoryStore).
LifecycleStore = MemoryStore


@dataclass
class StepResult:
    """Counts of what one call did, and where the next call starts (None: the tenant is done)."""

    counts: dict[str, int] = field(default_factory=dict)
    cursor: str | None = None
    notes: list[str] = field(default_factory=list)

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n


def partitions_from(store: LifecycleStore, tenant: str, cursor: str | None, page: int = 200) -> Iterator[Partition]:
    """The tenant's partitions after the cursor's owner, in order, page by page."""
    after = Partition(tenant, cursor) if cursor is not None else None
    while True:
        found = store.partitions(tenant, after, page)
        yield from found
        if len(found) < page:
            return
        after = found[-1]


def walk(
    store: LifecycleStore,
    tenant: str,
    cursor: str | None,
    batch: int,
    kinds: Sequence[MemoryKind] | None,
    visit: Callable[[Partition, list[MemoryRecord], StepResult], None],
    now: datetime,
) -> StepResult:
    """Visit the live, unexpired heads of each partition after ``cursor`` until ``batch`` heads were read."""
    result = StepResult()
    read = 0
    for where in partitions_from(store, tenant, cursor):
        skipped: list[str] = []
        heads = [r for r in store.heads(where, kinds, PARTITION_READ_LIMIT, skipped) if not r.is_expired(now)]
        result.add("partitions")
        result.add("read", len(heads))
        if skipped:
            result.add("undecodable", len(skipped))
        visit(where, heads, result)
        read += len(heads)
        if read >= batch:
            result.cursor = where.owner
            return result
    return result


def is_pinned(record: MemoryRecord) -> bool:
    """A golden memory (``value.pinned: true``, set by a curator): it never decays, leaves or merges."""
    return isinstance(record.value, dict) and record.value.get("pinned") is True


def write_patch(
    store: LifecycleStore, where: Partition, record: MemoryRecord, patch: MemoryPatch, now: datetime, result: StepResult
) -> MemoryRecord | None:
    """A new version, conditional on the version read; None when the memory changed or left meanwhile.

    Maintenance keeps what a caller's edit would reset: the memory's expiry (a decayed episode
    does not live longer for it) and its redaction counts.
    """
    keep: dict[str, object] = {}
    if "ttl_seconds" not in patch.model_fields_set and record.expires_at is not None:
        keep["ttl_seconds"] = max(1, int((record.expires_at - now).total_seconds()))
    if "redactions" not in patch.model_fields_set and record.redactions:
        keep["redactions"] = dict(record.redactions)
    if keep:
        patch = patch.model_copy(update=keep)
        patch.model_fields_set.update(keep)
    try:
        return store.update(where, record.id, patch, record.version, now).record
    except (VersionConflict, NotFound):
        result.add("raced")  # changed since it was read: the next run sees it as it is now
        return None


def archive(store: LifecycleStore, where: Partition, record: MemoryRecord, reason: str, now: datetime, result: StepResult) -> bool:
    written = write_patch(store, where, record, MemoryPatch(status=MemoryStatus.ARCHIVED, status_reason=reason), now, result)
    return written is not None
