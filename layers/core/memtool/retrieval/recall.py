"""Route-aware hybrid recall that goes back to the source.

Candidates come from the index (BM25 + k-NN fused by reciprocal rank), then every candidate is
read back from the record store by id: what is missing, expired, inactive, of another tenant or
owner is dropped; a candidate whose index entry is older than the record is returned as the
record is now (and re-scored against its current text). Survivors are scored, cut to the route's
budget per kind, and reported with a coverage that says what recall could and could not see.
With the index unavailable, recall falls back to BM25 over the record store and says so.
A record the store cannot decode, or that recall cannot score, is skipped, logged and counted
(``skipped_undecodable`` and ``skipped_ids``): one bad record never fails the whole recall.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from memtool.errors import ValidationFailed
from memtool.memory.records import MemoryKind, MemoryRecord, MemoryScope, MemoryStatus
from memtool.memory.store import TENANT_OWNER, MemoryStore, Partition
from memtool.retrieval.documents import searchable_text, tools_used
from memtool.retrieval.embedders import Embedder
from memtool.retrieval.index import (
    IndexFilter,
    IndexHit,
    IndexQuery,
    IndexUnavailable,
    VectorIndex,
)
from memtool.retrieval.lexical import bm25_scores
from memtool.retrieval.scoring import ScoreParts, score
from memtool.runtime.clock import Clock

LIVE_STATUSES = (MemoryStatus.ACTIVE, MemoryStatus.APPROVED)

logger = logging.getLogger("memtool.retrieval")


@dataclass(frozen=True)
class RecallRequest:
    tenant: str
    user: str
    text: str
    route: str
    tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class RecalledMemory:
    record: MemoryRecord
    score: float
    parts: ScoreParts
    cosine: float | None
    refreshed: bool  # the index held an older version; this is the record as it is now


@dataclass
class RecallCoverage:
    route: str
    budgets: dict[str, int]
    embedder: str
    index_available: bool = True
    fallback: str | None = None
    reason: str | None = None
    candidates_seen: int = 0
    returned: int = 0
    stale_refreshed: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    skipped_ids: list[str] = field(default_factory=list)  # records that could not be read or used

    def skip(self, memory_ids: Sequence[str]) -> None:
        for memory_id in memory_ids:
            if memory_id not in self.skipped_ids:
                self.skipped_ids.append(memory_id)

    @property
    def skipped_undecodable(self) -> int:
        return len(self.skipped_ids)

    def as_dict(self) -> dict[str, object]:
        return {
            "route": self.route,
            "budgets": self.budgets,
            "embedder": self.embedder,
            "index_available": self.index_available,
            "fallback": self.fallback,
            "reason": self.reason,
            "candidates_seen": self.candidates_seen,
            "returned": self.returned,
            "stale_refreshed": self.stale_refreshed,
            "dropped": dict(self.dropped),
            "skipped_undecodable": self.skipped_undecodable,
            "skipped_ids": list(self.skipped_ids),
        }


@dataclass(frozen=True)
class RecallResult:
    memories: list[RecalledMemory]
    coverage: RecallCoverage

    def of_kind(self, kind: MemoryKind) -> list[RecalledMemory]:
        return [m for m in self.memories if m.record.kind is kind]


@dataclass(frozen=True)
class _Candidate:
    hit: IndexHit
    lexical_share: float | None = None


class Recall:
    def __init__(
        self,
        store: MemoryStore,
        index: VectorIndex | None,
        embedder: Embedder,
        clock: Clock,
        budgets: Mapping[str, Mapping[str, int]],
        *,
        min_candidates: int = 40,
        fallback_scan_limit: int = 2000,
    ) -> None:
        self._store = store
        self._index = index
        self._embedder = embedder
        self._clock = clock
        self._budgets = budgets
        self._min_candidates = min_candidates
        self._scan_limit = fallback_scan_limit

    def budget_for(self, route: str) -> dict[str, int]:
        if route not in self._budgets:
            raise ValidationFailed(f"unknown route; one of {', '.join(sorted(self._budgets))}", field="route")
        return {kind: n for kind, n in self._budgets[route].items() if n > 0}

    def recall(self, request: RecallRequest) -> RecallResult:
        budgets = self.budget_for(request.route)
        coverage = RecallCoverage(route=request.route, budgets=budgets, embedder=self._embedder.id)
        kinds = tuple(MemoryKind(kind) for kind in budgets)
        if not kinds or not request.text.strip():
            return RecallResult([], coverage)
        k = max(self._min_candidates, 4 * sum(budgets.values()))
        vector: list[float] | None = None
        skipped: list[str] = []
        try:
            if self._index is None:
                raise IndexUnavailable("no vector index is configured")
            vector = self._embedder.embed([request.text])[0]
            query = IndexQuery(
                filter=IndexFilter(
                    tenant=request.tenant,
                    owners=(request.user, TENANT_OWNER),
                    embedder=self._embedder.id,
                    kinds=tuple(kind.value for kind in kinds),
                    statuses=tuple(status.value for status in LIVE_STATUSES),
                ),
                k=k,
                text=request.text,
                vector=vector,
            )
            candidates = [_Candidate(hit) for hit in self._index.hybrid(query)]
            # Only the caller's and the tenant's records are read back (or reported as skipped).
            refs = [(c.hit.owner, c.hit.memory_id) for c in candidates if c.hit.owner in (request.user, TENANT_OWNER)]
            records = self._store.get_many(request.tenant, refs, skipped=skipped)
        except IndexUnavailable as exc:
            coverage.index_available = False
            coverage.fallback = "lexical_store_scan"
            coverage.reason = str(exc)
            candidates, records = self._lexical_fallback(request, kinds, k, skipped)
        if skipped:
            logger.warning("recall for %s/%s skipped memories the store could not read: %s", request.tenant, request.user, ", ".join(skipped))
        coverage.skip(skipped)
        coverage.candidates_seen = len(candidates)
        survivors = self._back_to_source(request, candidates, records, vector, coverage)
        chosen: list[RecalledMemory] = []
        for kind in kinds:
            ranked = sorted((m for m in survivors if m.record.kind is kind), key=lambda m: -m.score)
            chosen.extend(ranked[: budgets[kind.value]])
        coverage.returned = len(chosen)
        return RecallResult(chosen, coverage)

    # ---- steps --------------------------------------------------------------------------

    def _back_to_source(
        self,
        request: RecallRequest,
        candidates: Sequence[_Candidate],
        records: Mapping[str, MemoryRecord],
        vector: list[float] | None,
        coverage: RecallCoverage,
    ) -> list[RecalledMemory]:
        now = self._clock.now()
        wanted_tools = set(request.tools)
        survivors = []
        for candidate in candidates:
            hit = candidate.hit
            if hit.memory_id in coverage.skipped_ids:
                continue  # the store could not read it: counted as skipped, not as missing
            record = records.get(hit.memory_id)
            reason = self._drop_reason(request, hit, record, now)
            if reason is not None:
                coverage.dropped[reason] += 1
                continue
            assert record is not None
            try:
                cosine, refreshed = hit.cosine, False
                if record.version > hit.version and vector is not None:
                    # The index still holds older text: judge the record by what it says now.
                    fresh = self._embedder.embed([searchable_text(record)])[0]
                    cosine, refreshed = sum(a * b for a, b in zip(vector, fresh, strict=True)), True
                parts = score(
                    record,
                    now,
                    fused=hit.fused,
                    cosine=cosine,
                    lexical_share=candidate.lexical_share,
                    tool_match=bool(wanted_tools & set(tools_used(record))),
                )
            except (ValueError, TypeError, ArithmeticError) as exc:
                # A record stored in a shape recall cannot use degrades recall; it never breaks it.
                logger.warning("recall skipped memory %s that it could not score: %s", record.id, exc)
                coverage.skip([record.id])
                continue
            coverage.stale_refreshed += int(refreshed)
            survivors.append(RecalledMemory(record, parts.total, parts, cosine, refreshed))
        return survivors

    @staticmethod
    def _drop_reason(request: RecallRequest, hit: IndexHit, record: MemoryRecord | None, now) -> str | None:
        if hit.owner not in (request.user, TENANT_OWNER):
            return "other_owner"
        if record is None:
            return "missing"
        if record.tenant != request.tenant:
            return "other_tenant"
        if record.owner != request.user and not (record.owner == TENANT_OWNER and record.scope is MemoryScope.TENANT):
            return "other_owner"
        if record.is_expired(now):
            return "expired"
        if record.status not in LIVE_STATUSES:
            return "inactive"
        if record.version < hit.version:
            return "stale_version"
        return None

    def _lexical_fallback(
        self, request: RecallRequest, kinds: Sequence[MemoryKind], k: int, skipped: list[str]
    ) -> tuple[list[_Candidate], dict[str, MemoryRecord]]:
        records: dict[str, MemoryRecord] = {}
        for owner in (request.user, TENANT_OWNER):
            partition = Partition(request.tenant, owner)
            for record in self._store.heads(partition, kinds, limit=self._scan_limit, skipped=skipped):
                records[record.id] = record
        pool = list(records.values())
        scores = bm25_scores(request.text, [searchable_text(r) for r in pool])
        best = max(scores, default=0.0)
        ranked = sorted(
            ((s, r) for s, r in zip(scores, pool, strict=True) if s > 0), key=lambda pair: (-pair[0], pair[1].id)
        )[:k]
        candidates = [
            _Candidate(
                IndexHit(memory_id=r.id, version=r.version, owner=r.owner, kind=r.kind.value, lexical=s),
                lexical_share=s / best if best and not math.isclose(best, 0.0) else 0.0,
            )
            for s, r in ranked
        ]
        return candidates, records

