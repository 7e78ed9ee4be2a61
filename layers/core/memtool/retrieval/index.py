"""The vector index port: documents, filtered queries and hits, whatever engine serves them.

Every query carries a tenant, and adapters apply the filter inside the search (so k results
survive it) — never after. Scores: ``cosine`` is true cosine similarity in [-1, 1], ``lexical``
is BM25, ``fused`` is reciprocal-rank fusion of the two lists (rank constant 60).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

RRF_RANK_CONSTANT = 60


class IndexUnavailable(Exception):
    """The index cannot answer now (down, throttled, misconfigured); callers degrade visibly."""


@dataclass(frozen=True)
class IndexDocument:
    memory_id: str
    version: int
    tenant: str
    owner: str
    kind: str
    status: str
    scope: str
    text: str  # what BM25 searches: content plus the user's own words
    vector: Sequence[float]
    embedder: str  # embedder id; a query never compares vectors from different embedders
    key: str | None = None
    tags: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    updated_at: datetime | None = None


@dataclass(frozen=True)
class IndexFilter:
    tenant: str
    owners: tuple[str, ...]
    embedder: str
    kinds: tuple[str, ...] | None = None
    statuses: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.tenant or not self.owners:
            raise ValueError("an index query needs a tenant and at least one owner")


@dataclass(frozen=True)
class IndexQuery:
    filter: IndexFilter
    k: int
    text: str = ""
    vector: Sequence[float] | None = None


@dataclass(frozen=True)
class IndexHit:
    memory_id: str
    version: int
    owner: str
    kind: str
    cosine: float | None = None
    lexical: float | None = None
    fused: float | None = None


@dataclass(frozen=True)
class UpsertReport:
    written: list[str] = field(default_factory=list)
    skipped_stale: list[str] = field(default_factory=list)  # a newer version is indexed


@dataclass(frozen=True)
class DeleteRef:
    memory_id: str
    tenant: str
    version: int  # the last version the record had; an index entry newer than this survives


class VectorIndex(Protocol):
    def ensure(self) -> None:
        """Create the index, mappings and pipelines if they are missing (idempotent)."""

    def upsert(self, documents: Sequence[IndexDocument]) -> UpsertReport:
        """Write documents; an older version never overwrites a newer one (an equal one rewrites)."""

    def delete(self, refs: Sequence[DeleteRef]) -> int: ...

    def indexed_version(self, memory_id: str, tenant: str) -> int | None: ...

    def knn(self, query: IndexQuery) -> list[IndexHit]:
        """Top-k by cosine among documents passing the filter; hits carry true cosine."""

    def lexical(self, query: IndexQuery) -> list[IndexHit]:
        """Top-k by BM25 among documents passing the filter."""

    def hybrid(self, query: IndexQuery) -> list[IndexHit]:
        """BM25 and k-NN fused by reciprocal rank; hits carry ``fused``."""


class UnreachableIndex:
    """Stands in for an index that could not even be built (bad endpoint, no credentials), so
    recall degrades with the real reason in its coverage instead of failing."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def ensure(self) -> None:
        raise IndexUnavailable(self.reason)

    def upsert(self, documents: Sequence[IndexDocument]) -> UpsertReport:
        raise IndexUnavailable(self.reason)

    def delete(self, refs: Sequence[DeleteRef]) -> int:
        raise IndexUnavailable(self.reason)

    def indexed_version(self, memory_id: str, tenant: str) -> int | None:
        raise IndexUnavailable(self.reason)

    def knn(self, query: IndexQuery) -> list[IndexHit]:
        raise IndexUnavailable(self.reason)

    def lexical(self, query: IndexQuery) -> list[IndexHit]:
        raise IndexUnavailable(self.reason)

    def hybrid(self, query: IndexQuery) -> list[IndexHit]:
        raise IndexUnavailable(self.reason)


def reciprocal_rank_fusion(*ranked: Sequence[IndexHit], k: int, rank_constant: int = RRF_RANK_CONSTANT) -> list[IndexHit]:
    """Fuse ranked hit lists: score = Σ 1 / (rank_constant + rank), ranks from 1."""
    fused: dict[str, float] = {}
    best: dict[str, IndexHit] = {}
    for hits in ranked:
        for rank, hit in enumerate(hits, start=1):
            fused[hit.memory_id] = fused.get(hit.memory_id, 0.0) + 1.0 / (rank_constant + rank)
            seen = best.get(hit.memory_id)
            best[hit.memory_id] = IndexHit(
                memory_id=hit.memory_id,
                version=max(hit.version, seen.version) if seen else hit.version,
                owner=hit.owner,
                kind=hit.kind,
                cosine=hit.cosine if hit.cosine is not None else (seen.cosine if seen else None),
                lexical=hit.lexical if hit.lexical is not None else (seen.lexical if seen else None),
            )
    order = sorted(fused, key=lambda mid: (-fused[mid], mid))[:k]
    return [
        IndexHit(
            memory_id=mid,
            version=best[mid].version,
            owner=best[mid].owner,
            kind=best[mid].kind,
            cosine=best[mid].cosine,
            lexical=best[mid].lexical,
            fused=fused[mid],
        )
        for mid in order
    ]
