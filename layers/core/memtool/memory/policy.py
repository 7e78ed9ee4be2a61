"""Lifecycle policy per memory kind: time to live, default scope and status, allowed statuses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from memtool.memory.records import MemoryKind, MemoryScope, MemoryStatus


@dataclass(frozen=True)
class KindPolicy:
    ttl: timedelta | None
    default_scope: MemoryScope
    allowed_scopes: frozenset[MemoryScope]
    initial_status: MemoryStatus
    allowed_statuses: frozenset[MemoryStatus]


_PLAIN = frozenset({MemoryStatus.ACTIVE, MemoryStatus.ARCHIVED})
_REVIEWED = frozenset(
    {MemoryStatus.PENDING_REVIEW, MemoryStatus.APPROVED, MemoryStatus.REJECTED, MemoryStatus.ARCHIVED}
)
_USER = frozenset({MemoryScope.USER})
_TENANT = frozenset({MemoryScope.TENANT})

# Working memory lives for the session plus one day; every turn refreshes it, so the
# day counts from the last turn of the session.
KIND_POLICIES: dict[MemoryKind, KindPolicy] = {
    MemoryKind.WORKING: KindPolicy(timedelta(days=1), MemoryScope.USER, _USER, MemoryStatus.ACTIVE, _PLAIN),
    MemoryKind.PROFILE: KindPolicy(timedelta(days=365), MemoryScope.USER, _USER, MemoryStatus.ACTIVE, _PLAIN),
    MemoryKind.EPISODIC: KindPolicy(timedelta(days=90), MemoryScope.USER, _USER, MemoryStatus.ACTIVE, _PLAIN),
    MemoryKind.CORRECTION: KindPolicy(
        timedelta(days=180), MemoryScope.USER, _USER | _TENANT, MemoryStatus.ACTIVE, _PLAIN
    ),
    MemoryKind.KNOWLEDGE: KindPolicy(None, MemoryScope.TENANT, _TENANT, MemoryStatus.ACTIVE, _PLAIN),
    MemoryKind.FEWSHOT: KindPolicy(None, MemoryScope.TENANT, _TENANT, MemoryStatus.PENDING_REVIEW, _REVIEWED),
    # A diagnosis: verified ones are active lessons (the user's; a curator may share one with the
    # tenant); unverified ones wait as pending_review and never steer generation.
    # A cached SQL (memtool.cache.sql_cache): tenant-wide unless user memories shaped it; its time
    # to live is the setting MEMTOOL_CACHE_TTL_SECONDS (this is the default).
    MemoryKind.CACHE: KindPolicy(timedelta(minutes=15), MemoryScope.TENANT, _USER | _TENANT, MemoryStatus.ACTIVE, _PLAIN),
    MemoryKind.CAUSAL: KindPolicy(
        timedelta(days=180),
        MemoryScope.USER,
        _USER | _TENANT,
        MemoryStatus.ACTIVE,
        frozenset({MemoryStatus.ACTIVE, MemoryStatus.PENDING_REVIEW, MemoryStatus.ARCHIVED}),
    ),
}

# Episodic relevance decays linearly by this much per day since last use (floored at 0.1).
EPISODIC_DECAY_PER_DAY = 0.02


def policy_for(kind: MemoryKind) -> KindPolicy:
    return KIND_POLICIES[kind]


def expires_at(kind: MemoryKind, now: datetime, ttl_seconds: int | None = None) -> datetime | None:
    if ttl_seconds is not None:
        return now + timedelta(seconds=ttl_seconds)
    ttl = KIND_POLICIES[kind].ttl
    return None if ttl is None else now + ttl
