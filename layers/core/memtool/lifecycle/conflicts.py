"""Conflicts: live memories of one owner that say contradictory things.

Today that is corrections: two live corrections in one partition (a user's, or the tenant's) that
teach the same term (``retrieval.scoring.correction_term``: NFKC, case and spacing folded) with
different targets. The term's key keeps one correction per spelling, so two can coexist only
through spellings the key tells apart (``ＧＭＶ`` and ``GMV``), or through older paths. A user's
correction of a term the tenant also defines is not a conflict: the user's own meaning is meant
to win for them.

Recall already lets one of them steer (the newer, then the more confident: the same order as
``winner`` here). Conflicts are found when asked, never stored: ``GET /conflicts`` lists them
(a curator sees the tenant's and every user's, a user their own), the maintenance step counts
them per tenant, and resolving one archives every other member with the reason.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memtool.lifecycle.walk import LIVE, LifecycleStore, StepResult, walk
from memtool.memory.records import MemoryKind, MemoryRecord
from memtool.memory.store import Partition
from memtool.retrieval.scoring import correction_term


@dataclass(frozen=True)
class Conflict:
    id: str
    tenant: str
    owner: str
    term: str
    members: tuple[MemoryRecord, ...]  # the winner first

    @property
    def winner(self) -> MemoryRecord:
        return self.members[0]

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": "correction",
            "term": self.term,
            "owner": self.owner,
            "winner": self.winner.id,
            "memories": [
                {
                    "id": m.id,
                    "version": m.version,
                    "content": m.content,
                    "means": target_of(m),
                    "confidence": m.confidence,
                    "updated_at": m.updated_at.isoformat(),
                    "scope": m.scope.value,
                }
                for m in self.members
            ],
        }


def target_of(record: MemoryRecord) -> Any:
    value = record.value if isinstance(record.value, dict) else {}
    return value.get("maps_to", value.get("means", record.content))


def winner_order(record: MemoryRecord) -> tuple[datetime, float, str]:
    """Newer first, then more confident, then the larger id (stable): recall's order within one owner."""
    return (record.updated_at, record.confidence, record.id)


def conflicts_in(where: Partition, heads: Iterable[MemoryRecord]) -> list[Conflict]:
    by_term: dict[str, list[MemoryRecord]] = {}
    for record in heads:
        if record.kind is not MemoryKind.CORRECTION or record.status not in LIVE:
            continue
        term = correction_term(record)
        if term is not None:
            by_term.setdefault(term, []).append(record)
    found = []
    for term, records in sorted(by_term.items()):
        targets = {json.dumps(target_of(r), sort_keys=True, ensure_ascii=False, default=str) for r in records}
        if len(records) < 2 or len(targets) < 2:
            continue
        members = tuple(sorted(records, key=winner_order, reverse=True))
        digest = hashlib.sha256("\n".join([where.tenant, where.owner, *sorted(r.id for r in records)]).encode()).hexdigest()[:20]
        found.append(Conflict(f"cf_{digest}", where.tenant, where.owner, term, members))
    return found


def find_conflicts(store: LifecycleStore, partitions: Sequence[Partition], now: datetime) -> list[Conflict]:
    out: list[Conflict] = []
    for where in partitions:
        heads = [r for r in store.heads(where, (MemoryKind.CORRECTION,), 100_000) if not r.is_expired(now)]
        out.extend(conflicts_in(where, heads))
    return out


class Conflicts:
    name = "conflicts"

    def __init__(self, store: LifecycleStore, batch: int = 2000) -> None:
        self._store = store
        self._batch = batch

    def run(self, tenant: str, cursor: str | None, now: datetime) -> StepResult:
        def visit(where: Partition, heads: list[MemoryRecord], result: StepResult) -> None:
            for conflict in conflicts_in(where, heads):
                result.add("conflicts")
                result.add("memories_in_conflict", len(conflict.members))

        result = walk(self._store, tenant, cursor, self._batch, (MemoryKind.CORRECTION,), visit, now)
        result.counts.setdefault("conflicts", 0)
        return result
