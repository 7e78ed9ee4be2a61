"""Decay: what experience taught fades when it is not used, and what stays unused leaves.

Episodes and lessons (``episodic``, ``causal``) lose ``EPISODIC_DECAY_PER_DAY`` (0.02) of their
stored confidence per day since their anchor: the later of their last use and their last write.
The ranking applies the same rate from the same anchor (``retrieval.scoring.decay``), so once a
decay is written the anchor moves and nothing is counted twice. A decay is written as a new
version only once it lowers confidence by ``decay_min_step`` (default 0.1, about every five days)
or reaches the floor, so history is not a diary of small steps; the next run goes on from the
new version's time.

Archived, with the reason in ``status_reason``:
- a memory unused for ``archive_unused_days`` (60), counted from the same anchor;
- a user's memory whose confidence decayed below ``archive_low_confidence`` while its feedback
  score stays below ``retire_below_score`` after ``retire_after_uses`` uses.
Pinned memories (``value.pinned: true``) never decay or leave; shared (tenant) lessons are
archived only for disuse, never for one user's ratings.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memtool.lifecycle.walk import LIVE, LifecycleStore, StepResult, archive, is_pinned, walk, write_patch
from memtool.memory.policy import EPISODIC_DECAY_PER_DAY
from memtool.memory.records import MemoryKind, MemoryPatch, MemoryRecord, MemoryScope
from memtool.memory.store import Partition

DECAYING = (MemoryKind.EPISODIC, MemoryKind.CAUSAL)


@dataclass(frozen=True)
class DecayPolicy:
    floor: float = 0.1
    min_step: float = 0.1
    unused_days: int = 60
    low_confidence: float = 0.3
    low_score: float = -0.2
    low_after_uses: int = 5


def anchor(record: MemoryRecord) -> datetime:
    """When the memory was last used or written, whichever is later."""
    used = record.last_used_at
    return record.updated_at if used is None or used < record.updated_at else used


def decayed_confidence(record: MemoryRecord, now: datetime, floor: float) -> float:
    days = max(0.0, (now - anchor(record)).total_seconds() / 86400)
    return max(floor, record.confidence - EPISODIC_DECAY_PER_DAY * days)


def archive_reason(record: MemoryRecord, confidence: float, now: datetime, policy: DecayPolicy) -> str | None:
    unused = (now - anchor(record)).days
    if unused >= policy.unused_days:
        return f"archived by maintenance: unused for {unused} days (MEMTOOL_ARCHIVE_UNUSED_DAYS={policy.unused_days})"
    credit = record.credit
    if (
        record.scope is MemoryScope.USER
        and confidence < policy.low_confidence
        and credit.uses >= policy.low_after_uses
        and credit.feedback_score < policy.low_score
    ):
        return (
            f"archived by maintenance: confidence {confidence:.2f} and feedback score {credit.feedback_score:.2f}"
            f" stay low after {credit.uses} uses"
        )
    return None


class Decay:
    name = "decay"

    def __init__(self, store: LifecycleStore, policy: DecayPolicy, batch: int = 2000) -> None:
        self._store = store
        self._policy = policy
        self._batch = batch

    def run(self, tenant: str, cursor: str | None, now: datetime) -> StepResult:
        def visit(where: Partition, heads: list[MemoryRecord], result: StepResult) -> None:
            for record in heads:
                if record.status not in LIVE or is_pinned(record):
                    continue
                result.add("checked")
                confidence = decayed_confidence(record, now, self._policy.floor)
                reason = archive_reason(record, confidence, now, self._policy)
                if reason is not None:
                    if archive(self._store, where, record, reason, now, result):
                        result.add("archived")
                    continue
                drop = record.confidence - confidence
                at_floor = confidence <= self._policy.floor and record.confidence > self._policy.floor
                if not (drop >= self._policy.min_step - 1e-9 or (drop > 0 and at_floor)):
                    continue
                if write_patch(self._store, where, record, MemoryPatch(confidence=round(confidence, 4)), now, result) is not None:
                    result.add("decayed")

        return walk(self._store, tenant, cursor, self._batch, DECAYING, visit, now)
