"""One partition of the embedded vector index in memory (``retrieval.embedded_index``): one
tenant's documents of one embedder, and the search over them.

A partition holds a float32 matrix of unit vectors, parallel code arrays for owner/kind/status,
and a BM25 inverted index (k1=1.2, b=0.75) over ``text.terms``. Filters are boolean masks applied
inside the search, so k results survive them.

Search is exact below ``approximate_from`` live documents. Above it, vectors are kept clustered
(an inverted file: spherical k-means centroids, rows stored list by list) and a query scans the
nearest lists until it has seen a fixed share of the rows its filter lets through; rows written
since the last clustering sit in a tail that is always scanned, and filters that let few rows
through are scanned exactly. Deletions are tombstones until the partition compacts. Nothing here
locks: the index that owns the partitions does.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from memtool.retrieval.index import IndexDocument, IndexFilter, IndexHit
from memtool.retrieval.text import terms

K1, B = 1.2, 0.75

# Storage bounds of a partition (see ``Partition._reserve`` and ``maintain``). A rewritten memory
# (a new version, a decay, a session turn) leaves a tombstone; under a soak's load about a third
# of the slots were tombstones when compaction waited for 1,024 of them (or a quarter), each
# holding its vector (1 KiB at 256 dimensions) and postings. Compacting at an eighth (at least
# 256) keeps them few; compaction is linear in the partition's rows and postings, so it stays
# amortised O(1) per write.
FIRST_BLOCK = 1024
GROWTH_DIVISOR = 4  # grow by capacity // 4
COMPACT_AFTER = 256
COMPACT_SHARE = 8  # compact when more than size // 8 slots are tombstones


@dataclass(frozen=True)
class ApproximateSearch:
    """When and how a partition is searched approximately (an inverted file over k-means lists).

    The defaults hold recall@10 above 0.95 against exact search on the recall benchmark
    (bench/recall_bench.py) while keeping 100k-document queries within a few milliseconds.
    """

    approximate_from: int = 32_768  # live documents in a partition; below this, every query is exact
    scan_fraction: float = 0.1  # share of the filter's rows a query looks at
    candidates_per_k: int = 16  # ... but at least this many filter-passing rows per requested hit
    min_probes: int = 4
    exact_below: int = 4096  # a filter passing at most this many rows is scanned exactly
    training_sample_per_list: int = 64
    kmeans_iterations: int = 10
    seed: int = 0

    def lists_for(self, live: int) -> int:
        return int(min(4096, max(16, round(1.6 * math.sqrt(live)))))


class Codes:
    """Small string vocabularies (owners, kinds, statuses) as dense integer codes."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._code: dict[str, int] = {}

    def code(self, name: str) -> int:
        found = self._code.get(name)
        if found is None:
            found = self._code[name] = len(self.names)
            self.names.append(name)
        return found

    def lookup(self, wanted: Iterable[str]) -> np.ndarray:
        """A table indexed by code: True for the wanted names."""
        table = np.zeros(max(1, len(self.names)), dtype=bool)
        for name in wanted:
            found = self._code.get(name)
            if found is not None:
                table[found] = True
        return table


class Postings:
    """One term's postings: row ids and term frequencies, side by side in one int32 array of
    shape (capacity, 2) that grows by a quarter (at least four rows) when full, read as arrays.

    Appends are amortised O(1) and the array holds at most a quarter more than its postings, plus
    four (a term seen once holds exactly one). Postings used to arrive as a pair of small arrays
    per write, merged only when a query read the term; terms no query reads (ids, numbers, hashes) were never merged, so
    every document cost about 6 KB of chunk objects: most of the index's memory, and of the local
    runtime's growth under load. Now a document costs a few bytes per term it holds.
    """

    __slots__ = ("_data", "count")

    def __init__(self, rows: np.ndarray, tfs: np.ndarray) -> None:
        self._data = np.empty((len(rows), 2), dtype=np.int32)
        self.count = 0
        self.extend(rows, tfs)

    def extend(self, rows: np.ndarray, tfs: np.ndarray) -> None:
        needed = self.count + len(rows)
        if needed > len(self._data):
            held = len(self._data)
            grown = np.empty((max(needed, held + max(4, held // GROWTH_DIVISOR)), 2), dtype=np.int32)
            grown[: self.count] = self._data[: self.count]
            self._data = grown
        self._data[self.count : needed, 0] = rows
        self._data[self.count : needed, 1] = tfs
        self.count = needed

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(slots, a view; term frequencies, a float32 copy): what BM25 and compaction read."""
        live = self._data[: self.count]
        return live[:, 0], live[:, 1].astype(np.float32)

    def replace(self, rows: np.ndarray, tfs: np.ndarray) -> None:
        self._data = np.empty((len(rows), 2), dtype=np.int32)
        self.count = 0
        self.extend(rows, tfs)

    @property
    def capacity(self) -> int:
        return len(self._data)


class Partition:
    """One tenant's documents of one embedder.

    A document gets a slot when it is written; slots index the ids, versions, filter codes and
    BM25 postings. A replaced or deleted document's slot is tombstoned until compaction
    renumbers the slots. Vectors sit in their own order (positions): append order until the
    partition is clustered, then grouped list by list, with ``slot_at`` mapping back.
    """

    def __init__(self, dimension: int, approximate: ApproximateSearch) -> None:
        self.dimension = dimension
        self.approximate = approximate
        self.size = 0  # slots (and positions) in use, live or tombstoned
        self.live_count = 0
        self.total_length = 0.0
        self.ids: list[str] = []
        self.slot_of: dict[str, int] = {}
        self.owners, self.kinds, self.statuses = Codes(), Codes(), Codes()
        # Each slot holds one "cell" code naming its (owner, kind, status): a filter becomes one
        # lookup table over the few cells, then one gather over the slots.
        self._cell_of: dict[tuple[int, int, int], int] = {}
        self._cells = np.zeros((0, 3), dtype=np.int32)
        self.postings: dict[str, Postings] = {}
        self._allocate(0)
        # The inverted file: positions [0, clustered) are grouped by list, offsets[i]:offsets[i+1];
        # positions [clustered, size) arrived since and are scanned exactly.
        self.centroids: np.ndarray | None = None
        self.offsets = np.zeros(1, dtype=np.int64)
        self.clustered = 0
        self.trained_for = 0

    # ---- storage ---------------------------------------------------------------------------

    _COLUMNS = ("vectors", "slot_at", "versions", "cell", "live", "lengths")

    def _allocate(self, capacity: int) -> None:
        self.vectors = np.zeros((capacity, self.dimension), dtype=np.float32)  # by position
        self.slot_at = np.zeros(capacity, dtype=np.int64)  # by position
        self.versions = np.zeros(capacity, dtype=np.int64)  # the rest by slot
        self.cell = np.zeros(capacity, dtype=np.int32)
        self.live = np.zeros(capacity, dtype=bool)
        self.lengths = np.zeros(capacity, dtype=np.float32)

    def _reserve(self, needed: int) -> None:
        """Room for ``needed`` slots. The columns grow by a quarter (not double): a partition holds
        at most a quarter more rows than it uses, plus one first block, and the copy while growing
        briefly holds 2.25 times the rows rather than three times. Appends stay amortised O(1)."""
        capacity = len(self.live)
        if needed <= capacity:
            return
        old = [getattr(self, name) for name in self._COLUMNS]
        self._allocate(max(needed, capacity + capacity // GROWTH_DIVISOR, FIRST_BLOCK))
        for name, source in zip(self._COLUMNS, old, strict=True):
            getattr(self, name)[: self.size] = source[: self.size]

    @property
    def dead(self) -> int:
        return self.size - self.live_count

    def version_of(self, memory_id: str) -> int | None:
        slot = self.slot_of.get(memory_id)
        return None if slot is None else int(self.versions[slot])

    def add(self, documents: Sequence[IndexDocument], vectors: np.ndarray) -> None:
        """Append documents (none of them present here); ``vectors`` are their unit rows."""
        count = len(documents)
        start = self.size
        self._reserve(start + count)
        fresh = slice(start, start + count)
        self.vectors[fresh] = vectors
        self.slot_at[fresh] = np.arange(start, start + count)
        self.versions[fresh] = [d.version for d in documents]
        self.cell[fresh] = [self._cell(d) for d in documents]
        self.live[fresh] = True
        batch: dict[str, tuple[list[int], list[int]]] = {}
        for slot, document in enumerate(documents, start=start):
            counts = Counter(terms(document.text))
            self.lengths[slot] = sum(counts.values())
            for term, tf in counts.items():
                entry = batch.get(term)
                if entry is None:
                    entry = batch[term] = ([], [])
                entry[0].append(slot)
                entry[1].append(tf)
            self.ids.append(document.memory_id)
            self.slot_of[document.memory_id] = slot
        for term, (slots, tfs) in batch.items():
            postings = self.postings.get(term)
            if postings is None:
                self.postings[term] = Postings(np.asarray(slots, dtype=np.int32), np.asarray(tfs, dtype=np.int32))
            else:
                postings.extend(np.asarray(slots, dtype=np.int32), np.asarray(tfs, dtype=np.int32))
        self.size += count
        self.live_count += count
        self.total_length += float(self.lengths[fresh].sum())

    def _cell(self, document: IndexDocument) -> int:
        parts = (self.owners.code(document.owner), self.kinds.code(document.kind), self.statuses.code(document.status))
        found = self._cell_of.get(parts)
        if found is None:
            found = self._cell_of[parts] = len(self._cell_of)
            self._cells = np.concatenate([self._cells, np.asarray([parts], dtype=np.int32)])
        return found

    def remove(self, memory_id: str) -> None:
        slot = self.slot_of.pop(memory_id)
        self.live[slot] = False
        self.live_count -= 1
        self.total_length -= float(self.lengths[slot])

    # ---- upkeep: compaction and the inverted file --------------------------------------------

    def maintain(self) -> None:
        """After a write: compact when tombstones pile up, (re)cluster when the partition is big."""
        settings = self.approximate
        if self.dead > max(COMPACT_AFTER, self.size // COMPACT_SHARE):
            self._compact()
        if self.live_count < settings.approximate_from:
            self.centroids, self.offsets, self.clustered, self.trained_for = None, np.zeros(1, np.int64), 0, 0
            return
        if self.centroids is None or self.live_count >= 2 * self.trained_for or 2 * self.live_count < self.trained_for:
            self._train()
            self._cluster()
        elif self.size - self.clustered > max(settings.exact_below, self.clustered // 16):
            self._cluster()

    def _train(self) -> None:
        """Spherical k-means on a sample of live vectors."""
        settings = self.approximate
        live_positions = np.flatnonzero(self.live[self.slot_at[: self.size]])
        lists = settings.lists_for(len(live_positions))
        rng = np.random.default_rng(settings.seed)
        sample_size = min(len(live_positions), lists * settings.training_sample_per_list)
        sample = self.vectors[np.sort(rng.choice(live_positions, sample_size, replace=False))]
        centroids = sample[rng.choice(sample_size, lists, replace=False)].copy()
        for _ in range(settings.kmeans_iterations):
            assignment = nearest_centroid(sample, centroids)
            counts = np.bincount(assignment, minlength=lists)
            filled = np.flatnonzero(counts)
            starts = np.concatenate(([0], np.cumsum(counts[filled])[:-1]))
            sums = np.add.reduceat(sample[np.argsort(assignment, kind="stable")], starts, axis=0)
            centroids[filled] = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
            empty = np.flatnonzero(counts == 0)
            if len(empty):  # restart empty lists on random points
                centroids[empty] = sample[rng.choice(sample_size, len(empty), replace=False)]
        self.centroids = centroids
        self.trained_for = len(live_positions)

    def _cluster(self) -> None:
        """Regroup every position by its nearest centroid; slots (and postings) stay put."""
        assert self.centroids is not None
        assignment = nearest_centroid(self.vectors[: self.size], self.centroids)
        order = np.argsort(assignment, kind="stable")
        self.vectors[: self.size] = self.vectors[order]
        self.slot_at[: self.size] = self.slot_at[order]
        counts = np.bincount(assignment, minlength=len(self.centroids))
        self.offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self.clustered = self.size

    def _compact(self) -> None:
        """Drop tombstoned slots and positions; renumber slots in the postings."""
        keep = np.flatnonzero(self.live[: self.size])
        renumber = np.full(self.size, -1, dtype=np.int64)
        renumber[keep] = np.arange(len(keep))
        kept_positions = np.flatnonzero(self.live[self.slot_at[: self.size]])
        self.vectors[: len(keep)] = self.vectors[kept_positions]
        self.slot_at[: len(keep)] = renumber[self.slot_at[kept_positions]]
        for name in ("versions", "cell", "live", "lengths"):
            column = getattr(self, name)
            column[: len(keep)] = column[keep]
        for name in self._COLUMNS:
            getattr(self, name)[len(keep) : self.size] = 0
        self.ids = [self.ids[slot] for slot in keep.tolist()]
        self.slot_of = {memory_id: slot for slot, memory_id in enumerate(self.ids)}
        emptied = []
        for term, postings in self.postings.items():
            slots, tfs = postings.arrays()
            moved = renumber[slots]
            survives = moved >= 0
            if not survives.any():
                emptied.append(term)
            else:
                postings.replace(moved[survives].astype(np.int32), tfs[survives])
        for term in emptied:
            del self.postings[term]
        # Positions kept their relative order, so the lists shrink in place.
        if self.centroids is not None:
            lists = np.repeat(np.arange(len(self.centroids)), np.diff(self.offsets))
            survivors = lists[kept_positions[kept_positions < self.clustered]]
            counts = np.bincount(survivors, minlength=len(self.centroids))
            self.offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
            self.clustered = int(self.offsets[-1])
        self.size = len(keep)

    # ---- search ----------------------------------------------------------------------------

    def mask(self, flt: IndexFilter) -> np.ndarray:
        """Which slots pass the filter (live ones only)."""
        cells = self.owners.lookup(flt.owners)[self._cells[:, 0]]
        if flt.kinds is not None:
            cells &= self.kinds.lookup(flt.kinds)[self._cells[:, 1]]
        if flt.statuses is not None:
            cells &= self.statuses.lookup(flt.statuses)[self._cells[:, 2]]
        allowed = cells[self.cell[: self.size]]
        allowed &= self.live[: self.size]
        return allowed

    def nearest(self, query: np.ndarray, allowed: np.ndarray, k: int, *, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Slots and cosines of the top-k allowed slots for a unit ``query``, best first."""
        passing = int(np.count_nonzero(allowed))
        k = min(k, passing)
        if k <= 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        allowed_at = allowed[self.slot_at[: self.size]]  # by position
        if passing <= self.approximate.exact_below:
            positions = np.flatnonzero(allowed_at)
            scores = self.vectors[positions] @ query
        elif exact or self.centroids is None:
            positions = np.flatnonzero(allowed_at)
            scores = (self.vectors[: self.size] @ query)[positions]
        else:
            positions, scores = self._probe(query, allowed_at, k)
        slots, scores = self.top(self.slot_at[positions], scores, k)
        return slots, np.clip(scores, -1.0, 1.0)

    def _probe(self, query: np.ndarray, allowed_at: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Scan the lists nearest the query until a share of the filter's rows has been seen."""
        assert self.centroids is not None
        settings = self.approximate
        closest_lists = np.argsort(-(self.centroids @ query))
        seen = np.concatenate(([0], np.cumsum(allowed_at[: self.clustered], dtype=np.int64)))
        per_list = seen[self.offsets[1:]] - seen[self.offsets[:-1]]
        wanted = max(settings.scan_fraction * seen[-1], settings.candidates_per_k * k)
        reached = np.cumsum(per_list[closest_lists])
        probes = max(settings.min_probes, int(np.searchsorted(reached, wanted)) + 1)
        blocks = [(self.offsets[i], self.offsets[i + 1]) for i in closest_lists[:probes].tolist()]
        blocks.append((self.clustered, self.size))
        found_positions, found_scores = [], []
        for start, stop in blocks:
            inside = allowed_at[start:stop]
            if stop <= start or not inside.any():
                continue
            scores = self.vectors[start:stop] @ query
            found_positions.append(np.flatnonzero(inside) + start)
            found_scores.append(scores[inside])
        if not found_positions:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        return np.concatenate(found_positions), np.concatenate(found_scores)

    def bm25(self, text: str, allowed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Slots and BM25 scores of the top-k allowed slots matching any term of ``text``."""
        wanted = set(terms(text))
        if not wanted or k <= 0 or not self.live_count:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        documents = self.live_count
        average = self.total_length / documents or 1.0
        scores = np.zeros(self.size, dtype=np.float32)
        for term in wanted:
            postings = self.postings.get(term)
            if postings is None:
                continue
            slots, tfs = postings.arrays()
            frequency = len(slots) if not self.dead else int(np.count_nonzero(self.live[slots]))
            if not frequency:
                continue
            idf = math.log(1.0 + (documents - frequency + 0.5) / (frequency + 0.5))
            norm = K1 * (1.0 - B + B * self.lengths[slots] / average)
            scores[slots] += np.float32(idf) * tfs * np.float32(K1 + 1.0) / (tfs + norm)
        scores[~allowed] = 0.0
        slots = np.flatnonzero(scores)
        return self.top(slots, scores[slots], k)

    def top(self, slots: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k best, by score then memory id, so ties come out the same whatever the storage order."""
        if len(slots) > k:
            kth = np.partition(scores, len(scores) - k)[len(scores) - k]
            contenders = scores >= kth  # everything tied with the k-th stays in the running
            slots, scores = slots[contenders], scores[contenders]
        if len(slots) > 4 * k + 1024:  # a sea of ties (zero vectors, say): storage order decides
            order = np.argsort(-scores, kind="stable")[:k]
        else:
            ids = self.ids
            order = np.asarray(sorted(range(len(slots)), key=lambda i: (-scores[i], ids[slots[i]]))[:k], dtype=np.intp)
        return slots[order], scores[order]

    def hit(self, slot: int, *, cosine: float | None = None, lexical: float | None = None) -> IndexHit:
        return IndexHit(
            memory_id=self.ids[slot],
            version=int(self.versions[slot]),
            owner=self.owners.names[self._cells[self.cell[slot], 0]],
            kind=self.kinds.names[self._cells[self.cell[slot], 1]],
            cosine=cosine,
            lexical=lexical,
        )


def nearest_centroid(vectors: np.ndarray, centroids: np.ndarray, chunk: int = 16_384) -> np.ndarray:
    out = np.empty(len(vectors), dtype=np.int64)
    for start in range(0, len(vectors), chunk):
        out[start : start + chunk] = np.argmax(vectors[start : start + chunk] @ centroids.T, axis=1)
    return out


def unit_rows(vectors: Sequence[Sequence[float]], dimension: int) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), dimension)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
