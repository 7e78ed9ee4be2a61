"""The embedded vector index: the ``VectorIndex`` port on one machine, persisted in SQLite.

Documents live in one SQLite file (WAL) under a folder and, once opened, in memory: one
partition per (tenant, embedder) (``retrieval.embedded_partition``: unit vectors, filter codes,
BM25 postings and, above ``approximate_from`` live documents, an inverted file). Tenants never
share a partition, and a query only ever sees documents of its own embedder id. One lock guards
everything: the local HTTP server is threaded.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import numpy as np

from memtool.retrieval.embedded_partition import K1 as K1
from memtool.retrieval.embedded_partition import ApproximateSearch, Partition, unit_rows
from memtool.retrieval.embedded_partition import B as B
from memtool.retrieval.embedded_partition import Postings as _Postings  # noqa: F401 - tests/unit/test_bounded_memory.py imports it here
from memtool.retrieval.index import (
    DeleteRef,
    IndexDocument,
    IndexHit,
    IndexQuery,
    IndexUnavailable,
    UpsertReport,
    reciprocal_rank_fusion,
)

# Hybrid fuses deeper lists than it returns, so a document ranked just below k in both lists
# can still win on the sum.
HYBRID_DEPTH = 2
CACHE_KIB = 512  # SQLite page cache of the index database
SCHEMA_VERSION = 1
DATABASE_FILE = "index.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    tenant     TEXT    NOT NULL,
    memory_id  TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    owner      TEXT    NOT NULL,
    kind       TEXT    NOT NULL,
    status     TEXT    NOT NULL,
    scope      TEXT    NOT NULL,
    key        TEXT,
    tags       TEXT    NOT NULL,
    tools      TEXT    NOT NULL,
    embedder   TEXT    NOT NULL,
    updated_at TEXT,
    text       TEXT    NOT NULL,
    dimension  INTEGER NOT NULL,
    vector     BLOB    NOT NULL,
    PRIMARY KEY (tenant, memory_id)
)
"""

_UPSERT = """
INSERT INTO documents (tenant, memory_id, version, owner, kind, status, scope, key, tags, tools,
                       embedder, updated_at, text, dimension, vector)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (tenant, memory_id) DO UPDATE SET
    version = excluded.version, owner = excluded.owner, kind = excluded.kind,
    status = excluded.status, scope = excluded.scope, key = excluded.key, tags = excluded.tags,
    tools = excluded.tools, embedder = excluded.embedder, updated_at = excluded.updated_at,
    text = excluded.text, dimension = excluded.dimension, vector = excluded.vector
WHERE excluded.version >= documents.version
"""


class EmbeddedIndex:
    """The vector index for local runs and tests: exact (or inverted-file) k-NN, BM25 and their
    fusion over documents kept in ``folder/index.sqlite3``; ``folder=None`` keeps them in memory
    only."""

    def __init__(self, folder: Path | None, *, approximate: ApproximateSearch | None = None) -> None:
        self._folder = Path(folder) if folder is not None else None
        self._approximate = approximate or ApproximateSearch()
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._data_version: int | None = None
        self._ready = False
        self._partitions: dict[tuple[str, str], Partition] = {}
        # tenant -> its partitions' embedder ids (almost always one): which partition holds a
        # document is asked of these few, not kept per document (a map of every (tenant, id) to
        # its embedder cost about 250 bytes a document)
        self._embedders_of: dict[str, list[str]] = {}

    # ---- lifecycle -------------------------------------------------------------------------

    def ensure(self) -> None:
        with self._lock:
            self._open()

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
            self._db = None
            self._ready = False
            self._partitions.clear()
            self._embedders_of.clear()

    def __enter__(self) -> EmbeddedIndex:
        self.ensure()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _open(self) -> None:
        if self._ready:
            self._follow_other_writers()
            return
        if self._folder is not None:
            try:
                self._folder.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self._folder / DATABASE_FILE, check_same_thread=False, timeout=10.0)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                # written to far more than read (everything is loaded once, at start): SQLite's
                # default 2 MB page cache would only fill with pages nobody reads again
                db.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
                with db:
                    db.execute(_SCHEMA)
                    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            except (OSError, sqlite3.Error) as exc:
                raise IndexUnavailable(f"embedded index at {self._folder}: {exc}") from exc
            self._db = db
            self._load()
        self._ready = True

    def _follow_other_writers(self) -> None:
        """Another process wrote to the file (``memtool serve`` and a CLI, say): reload it."""
        if self._db is None:
            return
        try:
            version = self._db.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error as exc:
            raise IndexUnavailable(f"embedded index: {exc}") from exc
        if version != self._data_version:
            self._partitions.clear()
            self._embedders_of.clear()
            self._load()

    def _load(self) -> None:
        """Read every document into its partition, a chunk at a time (the file may be large)."""
        assert self._db is not None
        pending: dict[tuple[str, str], tuple[list[IndexDocument], list[np.ndarray]]] = {}
        try:
            self._data_version = self._db.execute("PRAGMA data_version").fetchone()[0]
            cursor = self._db.execute(
                "SELECT tenant, memory_id, version, owner, kind, status, scope, key, tags, tools, embedder,"
                " updated_at, text, vector FROM documents"
            )
            for row in cursor:
                place = (row[0], row[10])
                documents, vectors = pending.setdefault(place, ([], []))
                documents.append(
                    IndexDocument(
                        memory_id=row[1],
                        version=row[2],
                        tenant=row[0],
                        owner=row[3],
                        kind=row[4],
                        status=row[5],
                        scope=row[6],
                        key=row[7],
                        tags=tuple(json.loads(row[8])),
                        tools=tuple(json.loads(row[9])),
                        embedder=row[10],
                        updated_at=datetime.fromisoformat(row[11]) if row[11] else None,
                        text=row[12],
                        vector=(),  # travels beside it, already a unit float32 row
                    )
                )
                vectors.append(np.frombuffer(row[13], dtype=np.float32))
                if len(documents) >= 4096:
                    self._load_chunk(place, *pending.pop(place))
        except sqlite3.Error as exc:
            raise IndexUnavailable(f"embedded index: {exc}") from exc
        for place, (documents, vectors) in pending.items():
            self._load_chunk(place, documents, vectors)
        for partition in self._partitions.values():
            partition.maintain()

    def _load_chunk(self, place: tuple[str, str], documents: list[IndexDocument], vectors: list[np.ndarray]) -> None:
        partition = self._partitions.get(place)
        if partition is None:
            partition = self._new_partition(place, len(vectors[0]))
        fits = [i for i, vector in enumerate(vectors) if len(vector) == partition.dimension]
        if len(fits) < len(documents):  # one embedder id written with two dimensions: the first stands
            documents, vectors = [documents[i] for i in fits], [vectors[i] for i in fits]
        if documents:
            partition.add(documents, np.stack(vectors))

    def _new_partition(self, place: tuple[str, str], dimension: int) -> Partition:
        partition = self._partitions[place] = Partition(dimension, self._approximate)
        self._embedders_of.setdefault(place[0], []).append(place[1])
        return partition

    # ---- writes ----------------------------------------------------------------------------

    def upsert(self, documents: Sequence[IndexDocument]) -> UpsertReport:
        with self._lock:
            self._open()
            dimensions = self._check(documents)
            winners: dict[tuple[str, str], IndexDocument] = {}
            written: list[str] = []
            stale: list[str] = []
            for document in documents:
                key = (document.tenant, document.memory_id)
                current = winners[key].version if key in winners else self._version_of(*key)
                if current is not None and document.version < current:
                    stale.append(document.memory_id)
                    continue
                winners[key] = document
                written.append(document.memory_id)
            if not winners:
                return UpsertReport(written=written, skipped_stale=stale)
            arriving: dict[tuple[str, str], list[IndexDocument]] = {}
            for document in winners.values():
                arriving.setdefault((document.tenant, document.embedder), []).append(document)
            unit = {
                place: unit_rows([d.vector for d in members], dimensions[place]) for place, members in arriving.items()
            }
            self._persist(arriving, unit)
            touched = set(arriving)
            for key in winners:
                previous = self._forget(key)
                if previous is not None:
                    touched.add(previous)  # a document may move to another embedder
            for place, members in arriving.items():
                partition = self._partitions.get(place)
                if partition is None:
                    partition = self._new_partition(place, dimensions[place])
                partition.add(members, unit[place])
            for place in touched:
                self._partitions[place].maintain()
            return UpsertReport(written=written, skipped_stale=stale)

    def delete(self, refs: Sequence[DeleteRef]) -> int:
        with self._lock:
            self._open()
            doomed: dict[tuple[str, str], int] = {}
            for ref in refs:
                key = (ref.tenant, ref.memory_id)
                current = self._version_of(*key)
                if current is not None and current <= ref.version:
                    doomed[key] = current
            if not doomed:
                return 0
            if self._db is not None:
                try:
                    with self._db:
                        self._db.executemany(
                            "DELETE FROM documents WHERE tenant = ? AND memory_id = ? AND version <= ?",
                            [(tenant, memory_id, version) for (tenant, memory_id), version in doomed.items()],
                        )
                except sqlite3.Error as exc:
                    raise IndexUnavailable(f"embedded index: {exc}") from exc
            places = {place for key in doomed if (place := self._forget(key)) is not None}
            for place in places:
                self._partitions[place].maintain()
            return len(doomed)

    def indexed_version(self, memory_id: str, tenant: str) -> int | None:
        with self._lock:
            self._open()
            return self._version_of(tenant, memory_id)

    def _place_of(self, tenant: str, memory_id: str) -> tuple[str, str] | None:
        """The partition holding the document, if any (a tenant has one per embedder it used)."""
        for embedder in self._embedders_of.get(tenant, ()):
            if memory_id in self._partitions[(tenant, embedder)].slot_of:
                return (tenant, embedder)
        return None

    def _version_of(self, tenant: str, memory_id: str) -> int | None:
        place = self._place_of(tenant, memory_id)
        return None if place is None else self._partitions[place].version_of(memory_id)

    def _forget(self, key: tuple[str, str]) -> tuple[str, str] | None:
        """Tombstone the document wherever it is; returns the partition it was in."""
        place = self._place_of(*key)
        if place is not None:
            self._partitions[place].remove(key[1])
        return place

    def _check(self, documents: Sequence[IndexDocument]) -> dict[tuple[str, str], int]:
        """Validate the whole batch before anything is written; returns each partition's dimension."""
        dimensions = {place: partition.dimension for place, partition in self._partitions.items()}
        for document in documents:
            if not document.tenant or not document.memory_id or not document.embedder:
                raise ValueError(f"document {document.memory_id!r} needs a tenant, an id and an embedder")
            length = len(document.vector)
            if length == 0:
                raise ValueError(f"document {document.memory_id!r} has an empty vector")
            place = (document.tenant, document.embedder)
            expected = dimensions.setdefault(place, length)
            if length != expected:
                raise ValueError(
                    f"document {document.memory_id!r}: embedder {document.embedder!r} vectors have"
                    f" {expected} dimensions here, this one has {length}"
                )
        return dimensions

    def _persist(self, arriving: dict[tuple[str, str], list[IndexDocument]], unit: dict[tuple[str, str], np.ndarray]) -> None:
        if self._db is None:
            return
        rows = [
            (
                d.tenant, d.memory_id, d.version, d.owner, d.kind, d.status, d.scope, d.key,
                json.dumps(list(d.tags), ensure_ascii=False), json.dumps(list(d.tools), ensure_ascii=False),
                d.embedder, d.updated_at.isoformat() if d.updated_at else None, d.text,
                vectors.shape[1], vectors[i].tobytes(),
            )
            for place, members in arriving.items()
            for vectors in (unit[place],)
            for i, d in enumerate(members)
        ]
        try:
            with self._db:
                self._db.executemany(_UPSERT, rows)
        except sqlite3.Error as exc:
            raise IndexUnavailable(f"embedded index: {exc}") from exc

    # ---- queries ---------------------------------------------------------------------------

    def knn(self, query: IndexQuery) -> list[IndexHit]:
        with self._lock:
            self._open()
            return self._search(query, vector_depth=query.k, text_depth=0)

    def exact_knn(self, query: IndexQuery) -> list[IndexHit]:
        """Brute force over every row the filter passes: the reference the approximate path is
        measured against."""
        with self._lock:
            self._open()
            return self._search(query, vector_depth=query.k, text_depth=0, exact=True)

    def lexical(self, query: IndexQuery) -> list[IndexHit]:
        with self._lock:
            self._open()
            return self._search(query, vector_depth=0, text_depth=query.k)

    def hybrid(self, query: IndexQuery) -> list[IndexHit]:
        with self._lock:
            self._open()
            depth = HYBRID_DEPTH * query.k
            return self._search(query, vector_depth=depth, text_depth=depth, fuse=True)

    def exact_hybrid(self, query: IndexQuery) -> list[IndexHit]:
        """``hybrid`` with exact k-NN underneath: the reference for the approximate path's fusion."""
        with self._lock:
            self._open()
            depth = HYBRID_DEPTH * query.k
            return self._search(query, vector_depth=depth, text_depth=depth, exact=True, fuse=True)

    def _search(
        self, query: IndexQuery, *, vector_depth: int, text_depth: int, exact: bool = False, fuse: bool = False
    ) -> list[IndexHit]:
        partition = self._partitions.get((query.filter.tenant, query.filter.embedder))
        if partition is None or query.k <= 0:
            return []
        allowed = partition.mask(query.filter)
        by_vector: list[IndexHit] = []
        unit = self._unit_query(query.vector, partition.dimension) if vector_depth else None
        if unit is not None:
            slots, scores = partition.nearest(unit, allowed, vector_depth, exact=exact)
            by_vector = [partition.hit(i, cosine=s) for i, s in zip(slots.tolist(), scores.tolist(), strict=True)]
        by_text: list[IndexHit] = []
        if text_depth and query.text.strip():
            slots, scores = partition.bm25(query.text, allowed, text_depth)
            by_text = [partition.hit(i, lexical=s) for i, s in zip(slots.tolist(), scores.tolist(), strict=True)]
        if fuse:
            return reciprocal_rank_fusion(by_vector, by_text, k=query.k)
        return by_vector or by_text

    @staticmethod
    def _unit_query(vector: Sequence[float] | None, dimension: int) -> np.ndarray | None:
        if vector is None:
            return None
        unit = np.asarray(vector, dtype=np.float32).ravel()
        if unit.shape != (dimension,):
            return None  # a vector of another shape is another embedder's: nothing here compares to it
        norm = float(np.linalg.norm(unit))
        if not math.isfinite(norm) or norm == 0.0:
            return None
        return unit / norm

    # ---- introspection (benchmarks, diagnostics) ----------------------------------------------

    def stats(self) -> dict[str, dict[str, int | bool]]:
        with self._lock:
            self._open()
            return {
                f"{tenant}/{embedder}": {
                    "live": p.live_count,
                    "rows": p.size,
                    "capacity": len(p.live),
                    "dimension": p.dimension,
                    "approximate": p.centroids is not None,
                    "lists": 0 if p.centroids is None else len(p.centroids),
                    "unclustered": p.size - p.clustered if p.centroids is not None else 0,
                }
                for (tenant, embedder), p in self._partitions.items()
            }
