"""Recall scoring: relevance × decay × credit × recency of use × tool match."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from memtool.memory.policy import EPISODIC_DECAY_PER_DAY
from memtool.memory.records import MemoryKind, MemoryRecord
from memtool.retrieval.index import RRF_RANK_CONSTANT

BEST_FUSED = 2.0 / (RRF_RANK_CONSTANT + 1)  # first in both lists
DECAY_FLOOR = 0.1
TOOL_MATCH_BOOST = 1.25


@dataclass(frozen=True)
class ScoreParts:
    relevance: float
    decay: float
    credit: float
    recency: float
    tool_match: float

    @property
    def total(self) -> float:
        return self.relevance * self.decay * self.credit * self.recency * self.tool_match


def relevance(fused: float | None, cosine: float | None, lexical_share: float | None = None) -> float:
    """Rank agreement from the index blended with similarity where the index gives it."""
    if fused is not None:
        rank = min(1.0, fused / BEST_FUSED)
    else:
        rank = lexical_share or 0.0
    if cosine is None:
        return rank
    return 0.5 * rank + 0.5 * max(0.0, cosine)


def _days(since: datetime | None, now: datetime) -> float | None:
    return None if since is None else max(0.0, (now - since).total_seconds() / 86400)


def decay(record: MemoryRecord, now: datetime) -> float:
    """Episodic memories lose 0.02 of their weight per day since last used (or written)."""
    if record.kind is not MemoryKind.EPISODIC:
        return 1.0
    days = _days(record.last_used_at or record.updated_at, now) or 0.0
    return max(DECAY_FLOOR, 1.0 - EPISODIC_DECAY_PER_DAY * days)


def credit(record: MemoryRecord) -> float:
    """Success rate with a neutral prior (1.0 with no evidence), nudged by feedback and confidence."""
    c = record.credit
    success_rate = 2.0 * (c.successes + 1) / (c.successes + c.failures + 2)
    feedback = 1.0 + 0.25 * math.tanh(c.feedback_score)
    return max(0.05, min(2.5, success_rate * feedback * max(0.1, record.confidence)))


def recency(record: MemoryRecord, now: datetime) -> float:
    days = _days(record.last_used_at, now)
    return 1.0 if days is None else 1.0 + 0.2 * math.exp(-days / 14)


def score(
    record: MemoryRecord,
    now: datetime,
    *,
    fused: float | None,
    cosine: float | None,
    lexical_share: float | None,
    tool_match: bool,
) -> ScoreParts:
    return ScoreParts(
        relevance=relevance(fused, cosine, lexical_share),
        decay=decay(record, now),
        credit=credit(record),
        recency=recency(record, now),
        tool_match=TOOL_MATCH_BOOST if tool_match else 1.0,
    )
