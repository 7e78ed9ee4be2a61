"""Route-aware hybrid recall that goes back to the source, with a relevance floor.

Candidates come from the index (BM25 + k-NN fused by reciprocal rank), then every candidate is
read back from the record store by id: what is missing, expired, inactive, of another tenant or
owner is dropped; a candidate whose index entry is older than the record is returned as the
record is now (and re-scored against its current text). Survivors are scored, cut to the route's
budget per kind, and reported with a coverage that says what recall could and could not see.
With the index unavailable, recall falls back to BM25 over the record store and says so.
A record the store cannot decode, or that recall cannot score, is skipped, logged and counted
(``skipped_undecodable`` and ``skipped_ids``): one bad record never fails the whole recall.

What survives the source check must also be worth injecting; each drop is counted in
``coverage.dropped`` under its reason:

- ``negative_example``: an episodic memory whose ``value.outcome`` is set and is not "answered"
  (failed, needs_clarification, ...), whose ``credit.feedback_score`` is below 0, or that has
  more failures than successes. A bad episode is never shown to the planner as an example.
- ``overridden``: a live correction teaching the same ``value.term`` (normalised) as another live
  correction that wins: the caller's own over the tenant's, then the newer ``updated_at``, then
  the higher confidence.
- ``below_floor``: neither the cosine similarity between the question and the memory reaches the
  kind's ``min_cosine`` nor does the memory match the question on a key term. The key-term rule is
  defined in :mod:`memtool.retrieval.scoring`: a word (≥ 2 characters, not filler) of the memory's
  ``key``, ``content`` or ``source_text``, a CJK bigram of them (no particles, no filler), or a
  correction's whole ``value.term`` occurs in the question. Where there is no cosine (the lexical
  fallback, a hit the index found by BM25 alone) only the key-term rule admits a candidate, so
  "zzz qqq unrelated words" recalls nothing on either path.
- ``low_score``: the final score (relevance × decay × credit × recency × tool match) is below the
  kind's ``min_score``.
- ``near_duplicate``: within a kind, a candidate whose content is identical (normalised) to, or
  whose embedding has cosine ≥ ``duplicate_cosine`` with, a better-ranked kept one. Only the
  candidates recall walks to fill the budget are embedded (in batches of the slots still free).

Term corrections are always found: every live correction of the caller and of the tenant (scope
tenant) is read once per recall; one whose ``value.term`` occurs in the question (the key-term
rule's phrase match) joins the candidates even when the index missed it, passes both floors, and
comes first, on top of the correction budget (every term the question names keeps its meaning).
Kinds missing from ``min_cosine``/``min_score`` use the defaults (0.5 and 0.2, as in the settings).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType

from memtool.clock import Clock
from memtool.errors import ValidationFailed
from memtool.memory.records import MemoryKind, MemoryRecord, MemoryScope, MemoryStatus
from memtool.memory.slots import is_governance_record, is_maintenance_record
from memtool.memory.store import TENANT_OWNER, MemoryStore, Partition
from memtool.retrieval.documents import memory_id_of, searchable_text, tools_used
from memtool.retrieval.embedders import Embedder
from memtool.retrieval.index import (
    IndexFilter,
    IndexHit,
    IndexQuery,
    IndexUnavailable,
    VectorIndex,
)
from memtool.retrieval.lexical import bm25_scores
from memtool.retrieval.scoring import QuestionTerms, ScoreParts, correction_term, score
from memtool.retrieval.text import normalize

LIVE_STATUSES = (MemoryStatus.ACTIVE, MemoryStatus.APPROVED)
ANSWERED = "answered"
# Outcomes whose SQL and data were right: "partial" answered the data, only an analysis did not run.
GOOD_OUTCOMES = frozenset({ANSWERED, "partial"})

# The same defaults as the settings (recall_min_cosine, recall_min_score, recall_duplicate_cosine).
DEFAULT_MIN_COSINE = 0.5
DEFAULT_MIN_SCORE = 0.2
DEFAULT_DUPLICATE_COSINE = 0.95
DEFAULT_MIN_COSINES: Mapping[str, float] = MappingProxyType({kind.value: DEFAULT_MIN_COSINE for kind in MemoryKind})
DEFAULT_MIN_SCORES: Mapping[str, float] = MappingProxyType({kind.value: DEFAULT_MIN_SCORE for kind in MemoryKind})

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
    term_match: bool = False  # a correction whose value.term the question names


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
    term_match: bool = False  # a live correction whose value.term occurs in the question


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
        min_cosine: Mapping[str, float] = DEFAULT_MIN_COSINES,
        min_score: Mapping[str, float] = DEFAULT_MIN_SCORES,
        duplicate_cosine: float = DEFAULT_DUPLICATE_COSINE,
    ) -> None:
        self._store = store
        self._index = index
        self._embedder = embedder
        self._clock = clock
        self._budgets = budgets
        self._min_candidates = min_candidates
        self._scan_limit = fallback_scan_limit
        self._min_cosine = dict(min_cosine)
        self._min_score = dict(min_score)
        self._duplicate_cosine = duplicate_cosine

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
        scanned: Mapping[str, MemoryRecord] | None = None  # the fallback's scan, when it ran
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
            candidates = [_Candidate(hit) for hit in fold_facets(self._index.hybrid(query))]
            # Only the caller's and the tenant's records are read back (or reported as skipped).
            refs = [(c.hit.owner, c.hit.memory_id) for c in candidates if c.hit.owner in (request.user, TENANT_OWNER)]
            records = self._store.get_many(request.tenant, refs, skipped=skipped)
        except IndexUnavailable as exc:
            coverage.index_available = False
            coverage.fallback = "lexical_store_scan"
            coverage.reason = str(exc)
            candidates, records = self._lexical_fallback(request, kinds, k, skipped)
            scanned = records
        question = QuestionTerms.of(request.text)
        winners: dict[str, str] = {}
        if MemoryKind.CORRECTION in kinds:
            corrections = self._live_corrections(request, scanned, skipped)
            winners = _term_winners(request, corrections)
            candidates, records = _with_term_corrections(question, candidates, records, corrections)
        if skipped:
            logger.warning(
                "recall for %s/%s skipped memories the store could not read: %s", request.tenant, request.user, ", ".join(skipped)
            )
        coverage.skip(skipped)
        coverage.candidates_seen = len(candidates)
        vectors: dict[str, list[float]] = {}  # memory id -> embedding of its current text, when recall made one
        survivors = self._back_to_source(request, question, candidates, records, vector, winners, vectors, coverage)
        chosen: list[RecalledMemory] = []
        for kind in kinds:
            # Corrections of terms the question names all come first, on top of the budget: each one
            # changes what the question means, so none may be cut ("江浙沪9月的营收" needs both). The
            # rest fill the budget by score (a stable sort: ties keep the index's order).
            ranked = sorted((m for m in survivors if m.record.kind is kind), key=lambda m: (not m.term_match, -m.score))
            named = sum(1 for m in ranked if m.term_match)
            chosen.extend(self._diverse(ranked, budgets[kind.value] + named, vectors, coverage))
        coverage.returned = len(chosen)
        return RecallResult(chosen, coverage)

    # ---- steps --------------------------------------------------------------------------

    def _back_to_source(
        self,
        request: RecallRequest,
        question: QuestionTerms,
        candidates: Sequence[_Candidate],
        records: Mapping[str, MemoryRecord],
        vector: list[float] | None,
        winners: Mapping[str, str],
        vectors: dict[str, list[float]],
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
            reason = self._drop_reason(request, hit, record, now) or _worth_reason(record, winners)
            if reason is not None:
                coverage.dropped[reason] += 1
                continue
            assert record is not None
            try:
                cosine, refreshed = hit.cosine, False
                if record.version > hit.version and vector is not None:
                    # The index still holds older text: judge the record by what it says now.
                    fresh = self._embedder.embed([searchable_text(record)])[0]
                    vectors[record.id] = fresh
                    cosine, refreshed = sum(a * b for a, b in zip(vector, fresh, strict=True)), True
                if not candidate.term_match and not self._above_floor(record, cosine, question):
                    coverage.dropped["below_floor"] += 1
                    continue
                parts = score(
                    record,
                    now,
                    fused=hit.fused,
                    cosine=cosine,
                    lexical_share=candidate.lexical_share,
                    tool_match=bool(wanted_tools & set(tools_used(record))),
                    term_match=candidate.term_match,
                )
            except (ValueError, TypeError, ArithmeticError) as exc:
                # A record stored in a shape recall cannot use degrades recall; it never breaks it.
                logger.warning("recall skipped memory %s that it could not score: %s", record.id, exc)
                coverage.skip([record.id])
                continue
            if not candidate.term_match and parts.total < self._min_score.get(record.kind.value, DEFAULT_MIN_SCORE):
                coverage.dropped["low_score"] += 1
                continue
            coverage.stale_refreshed += int(refreshed)
            survivors.append(RecalledMemory(record, parts.total, parts, cosine, refreshed, candidate.term_match))
        return survivors

    def _above_floor(self, record: MemoryRecord, cosine: float | None, question: QuestionTerms) -> bool:
        """Close enough in meaning (cosine at least the kind's floor) or naming a key term."""
        floor = self._min_cosine.get(record.kind.value, DEFAULT_MIN_COSINE)
        if cosine is not None and cosine >= floor:
            return True
        return question.matches_key_term(record)

    def _diverse(
        self, ranked: Sequence[RecalledMemory], budget: int, vectors: dict[str, list[float]], coverage: RecallCoverage
    ) -> list[RecalledMemory]:
        """The best ``budget`` of one kind, a near duplicate of a kept one collapsed into it.

        Embeds only the candidates it walks, a batch of the free slots at a time; with one slot or
        one candidate there is nothing to compare and nothing is embedded.
        """
        compare = budget > 1 and len(ranked) > 1
        kept: list[RecalledMemory] = []
        kept_vectors: list[list[float]] = []
        kept_contents: set[str] = set()
        position = 0
        while len(kept) < budget and position < len(ranked):
            batch = ranked[position : position + budget - len(kept)]
            position += len(batch)
            batch_vectors = self._vectors_of(batch, vectors) if compare else [None] * len(batch)
            for memory, memory_vector in zip(batch, batch_vectors, strict=True):
                content = _normalised_content(memory.record)
                if content in kept_contents or (
                    memory_vector is not None
                    and any(_dot(memory_vector, other) >= self._duplicate_cosine for other in kept_vectors)
                ):
                    coverage.dropped["near_duplicate"] += 1
                    continue
                kept.append(memory)
                kept_contents.add(content)
                if memory_vector is not None:
                    kept_vectors.append(memory_vector)
        return kept

    def _vectors_of(self, batch: Sequence[RecalledMemory], vectors: dict[str, list[float]]) -> list[list[float] | None]:
        """Embeddings of the batch's current text, one embedder call for those not embedded yet."""
        missing = [m.record for m in batch if m.record.id not in vectors]
        if missing:
            try:
                for record, embedded in zip(missing, self._embedder.embed([searchable_text(r) for r in missing]), strict=True):
                    vectors[record.id] = embedded
            except Exception as exc:  # noqa: BLE001 - an embedder outage costs diversity, never the recall
                logger.warning("recall could not embed %d candidates to collapse near duplicates: %s", len(missing), exc)
        return [vectors.get(m.record.id) for m in batch]

    def _live_corrections(
        self, request: RecallRequest, scanned: Mapping[str, MemoryRecord] | None, skipped: list[str]
    ) -> list[MemoryRecord]:
        """The caller's and the tenant's live corrections: from the fallback's scan when it ran,
        else read once from the store."""
        if scanned is not None:
            pool = [r for r in scanned.values() if r.kind is MemoryKind.CORRECTION]
        else:
            pool = []
            for owner in (request.user, TENANT_OWNER):
                partition = Partition(request.tenant, owner)
                pool.extend(self._store.heads(partition, [MemoryKind.CORRECTION], limit=self._scan_limit, skipped=skipped))
        now = self._clock.now()
        return [
            r
            for r in pool
            if r.kind is MemoryKind.CORRECTION
            and r.status is MemoryStatus.ACTIVE
            and r.tenant == request.tenant
            and _is_callers(request, r)
            and not r.is_expired(now)
        ]

    @staticmethod
    def _drop_reason(request: RecallRequest, hit: IndexHit, record: MemoryRecord | None, now) -> str | None:
        if hit.owner not in (request.user, TENANT_OWNER):
            return "other_owner"
        if record is None:
            return "missing"
        if record.tenant != request.tenant:
            return "other_tenant"
        if not _is_callers(request, record):
            return "other_owner"
        if record.is_expired(now):
            return "expired"
        if record.status not in LIVE_STATUSES:
            return "inactive"
        if is_maintenance_record(record.key):
            return "maintenance_record"
        if is_governance_record(record.key):
            return "governance_record"
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



def fold_facets(hits: Sequence[IndexHit]) -> list[IndexHit]:
    """A memory indexed under several keys (a causal memory's scenario and root cause) comes back
    as one candidate: its keys' fused ranks add up (reciprocal-rank fusion over the keys) and its
    best cosine and BM25 score stand for it."""
    folded: dict[str, IndexHit] = {}
    for hit in hits:
        memory_id = memory_id_of(hit.memory_id)
        seen = folded.get(memory_id)
        if seen is None:
            folded[memory_id] = hit if hit.memory_id == memory_id else IndexHit(
                memory_id=memory_id,
                version=hit.version,
                owner=hit.owner,
                kind=hit.kind,
                cosine=hit.cosine,
                lexical=hit.lexical,
                fused=hit.fused,
            )
            continue
        folded[memory_id] = IndexHit(
            memory_id=memory_id,
            version=max(seen.version, hit.version),
            owner=seen.owner,
            kind=seen.kind,
            cosine=_best(seen.cosine, hit.cosine),
            lexical=_best(seen.lexical, hit.lexical),
            fused=None if seen.fused is None and hit.fused is None else (seen.fused or 0.0) + (hit.fused or 0.0),
        )
    return sorted(folded.values(), key=lambda h: -(h.fused or 0.0))  # stable: ties keep the index's order


def _best(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def _is_callers(request: RecallRequest, record: MemoryRecord) -> bool:
    """The caller's own memory, or one the tenant shares."""
    return record.owner == request.user or (record.owner == TENANT_OWNER and record.scope is MemoryScope.TENANT)


def is_negative_example(record: MemoryRecord) -> bool:
    """An episode that did not answer, was rated down, or failed more often than it succeeded."""
    if record.kind is not MemoryKind.EPISODIC:
        return False
    outcome = record.value.get("outcome") if isinstance(record.value, dict) else None
    credit = record.credit
    return (outcome is not None and outcome not in GOOD_OUTCOMES) or credit.feedback_score < 0 or credit.failures > credit.successes


def _worth_reason(record: MemoryRecord | None, winners: Mapping[str, str]) -> str | None:
    """Why a live record is still not recalled: a bad example, or a correction another overrides."""
    if record is None:
        return None
    if is_negative_example(record):
        return "negative_example"
    term = correction_term(record)
    if term is not None and winners.get(term, record.id) != record.id:
        return "overridden"
    return None


def _precedence(request: RecallRequest, record: MemoryRecord) -> tuple[bool, datetime, float, str]:
    return (record.owner == request.user, record.updated_at, record.confidence, record.id)


def _term_winners(request: RecallRequest, corrections: Sequence[MemoryRecord]) -> dict[str, str]:
    """Normalised term -> id of the correction that teaches it: the caller's over the tenant's,
    then the newer, then the more confident (then the larger id, so the choice is stable)."""
    best: dict[str, MemoryRecord] = {}
    for record in corrections:
        term = correction_term(record)
        if term is None:
            continue
        seen = best.get(term)
        if seen is None or _precedence(request, record) > _precedence(request, seen):
            best[term] = record
    return {term: record.id for term, record in best.items()}


def _with_term_corrections(
    question: QuestionTerms,
    candidates: Sequence[_Candidate],
    records: Mapping[str, MemoryRecord],
    corrections: Sequence[MemoryRecord],
) -> tuple[list[_Candidate], dict[str, MemoryRecord]]:
    """Candidates plus every live correction whose term the question names (marked as term matches)."""
    out = list(candidates)
    found = dict(records)
    position = {c.hit.memory_id: i for i, c in enumerate(out)}
    for record in corrections:
        term = correction_term(record)
        if term is None or not question.has_phrase(term):
            continue
        if record.id in position:
            out[position[record.id]] = replace(out[position[record.id]], term_match=True)
            found.setdefault(record.id, record)
            continue
        hit = IndexHit(memory_id=record.id, version=record.version, owner=record.owner, kind=record.kind.value)
        position[record.id] = len(out)
        out.append(_Candidate(hit, term_match=True))
        found[record.id] = record
    return out, found


def _normalised_content(record: MemoryRecord) -> str:
    return " ".join(normalize(record.content).split())


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine of two L2-normalised vectors (the embedder port's promise)."""
    return sum(x * y for x, y in zip(a, b, strict=True))
