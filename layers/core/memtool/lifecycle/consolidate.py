"""Consolidate: many episodes that say the same thing become one summary.

Per user and route, the active episodic memories are embedded (the index's embedder) and
clustered greedily: each episode joins the first cluster whose centroid it is at least
``consolidate_similarity`` (cosine, default 0.8) close to, or starts one. A cluster of at least
``consolidate_min_cluster`` (5) members gets one summary memory, written by rules:

- kind ``episodic``, key ``summary.<digest of the member ids>`` (so a rerun finds it, never a
  second one), ``value.summary_of`` = the member ids, the shared intent (the metric, the
  dimensions and filters most members used, the usual window), the count and the outcomes;
- content: the cluster's most central member's text and how many episodes it stands for, so a
  search for their common subject finds the summary.

The members are then archived with ``status_reason: consolidated into <id>``. A run that stopped
between the two is completed by the next one: members an active summary lists are archived
before anything is clustered. Pinned memories and summaries themselves are never members.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from memtool.lifecycle.walk import LifecycleStore, StepResult, archive, is_pinned, walk
from memtool.memory.records import MemoryDraft, MemoryKind, MemoryRecord, MemoryStatus, Provenance, SourceRef, Trigger
from memtool.memory.store import TENANT_OWNER, Partition

SUMMARY_KEY_PREFIX = "summary."
EMBED_CHUNK = 64  # texts per embedder call (Bedrock's Titan takes one at a time; the batch is ours)


class TextEmbedder(Protocol):
    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class SummaryWriter(Protocol):
    """Writes a cluster's sentence (``lifecycle.bedrock_summary``); None keeps the rules' one."""

    model_id: str

    def summarise(self, members: Sequence[MemoryRecord], rules: Mapping[str, Any]) -> str | None: ...


def is_summary(record: MemoryRecord) -> bool:
    return isinstance(record.value, dict) and isinstance(record.value.get("summary_of"), list)


def route_of(record: MemoryRecord) -> str:
    value = record.value
    route = value.get("route") if isinstance(value, dict) else None
    return route if isinstance(route, str) and route else "note"


@dataclass
class Cluster:
    members: list[int] = field(default_factory=list)
    total: list[float] = field(default_factory=list)

    def centroid_cosine(self, vector: Sequence[float]) -> float:
        norm = sum(x * x for x in self.total) ** 0.5
        if norm == 0:
            return 0.0
        return sum(a * b for a, b in zip(self.total, vector, strict=True)) / norm

    def join(self, index: int, vector: Sequence[float]) -> None:
        self.members.append(index)
        self.total = list(vector) if not self.total else [a + b for a, b in zip(self.total, vector, strict=True)]


def clusters_of(vectors: Sequence[Sequence[float]], similarity: float) -> list[Cluster]:
    """Greedy leader clustering on normalised vectors, in the order given (oldest first)."""
    found: list[Cluster] = []
    for index, vector in enumerate(vectors):
        best, best_cosine = None, similarity
        for cluster in found:
            cosine = cluster.centroid_cosine(vector)
            if cosine >= best_cosine:
                best, best_cosine = cluster, cosine
        if best is None:
            best = Cluster()
            found.append(best)
        best.join(index, vector)
    return found


def _intent(record: MemoryRecord) -> dict[str, Any]:
    value = record.value if isinstance(record.value, dict) else {}
    intent = value.get("intent")
    return intent if isinstance(intent, dict) else {}


def _most_common(values: list[Any]) -> Any:
    shown = Counter(repr(v) for v in values if v not in (None, [], {}))
    if not shown:
        return None
    top = shown.most_common(1)[0][0]
    return next(v for v in values if repr(v) == top)


def shared_intent(members: Sequence[MemoryRecord]) -> dict[str, Any]:
    """What most members asked: the metric, dimensions and filters, and the usual window."""
    intents = [_intent(m) for m in members]
    return {
        "metric": _most_common([i.get("metric") for i in intents]),
        "dimensions": _most_common([i.get("dimensions") for i in intents]) or [],
        "filters": _most_common([i.get("filters") for i in intents]) or [],
        "window": _most_common([i.get("time_window") or i.get("window") for i in intents]),
    }


def summary_draft(members: Sequence[MemoryRecord], central: MemoryRecord, route: str) -> MemoryDraft:
    ids = sorted(m.id for m in members)
    digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:24]
    outcomes = Counter(str(m.value.get("outcome")) for m in members if isinstance(m.value, dict) and m.value.get("outcome") is not None)
    intent = shared_intent(members)
    said = f"{len(members)} similar episodes, such as: {central.content}"
    if intent["metric"]:
        parts = [f"metric {intent['metric']}"]
        if intent["dimensions"]:
            parts.append("by " + ", ".join(map(str, intent["dimensions"])))
        if intent["window"]:
            parts.append(f"window {intent['window']}")
        said += " (" + "; ".join(parts) + ")"
    return MemoryDraft(
        kind=MemoryKind.EPISODIC,
        key=SUMMARY_KEY_PREFIX + digest,
        content=said[:2000],
        value={
            "summary_of": ids,
            "route": route,
            "intent": intent,
            "count": len(members),
            "outcomes": dict(outcomes),
            "first_at": min(m.created_at for m in members).isoformat(),
            "last_at": max(m.created_at for m in members).isoformat(),
            "written_by": "rules",
        },
        confidence=max(m.confidence for m in members),
        provenance=Provenance(
            trigger=Trigger.INTERACTION, author="maintenance", sources=[SourceRef(id=m.id, version=m.version) for m in members][:50]
        ),
        tags=["summary"],
    )


class Consolidate:
    name = "consolidate"

    def __init__(
        self,
        store: LifecycleStore,
        embedder: TextEmbedder,
        *,
        min_cluster: int = 5,
        similarity: float = 0.8,
        batch: int = 2000,
        writer: SummaryWriter | None = None,
    ) -> None:
        self._writer = writer
        self._store = store
        self._embedder = embedder
        self._min_cluster = min_cluster
        self._similarity = similarity
        self._batch = batch

    def run(self, tenant: str, cursor: str | None, now: datetime) -> StepResult:
        def visit(where: Partition, heads: list[MemoryRecord], result: StepResult) -> None:
            if where.owner == TENANT_OWNER:
                return  # episodes are a user's
            active = [r for r in heads if r.status is MemoryStatus.ACTIVE]
            done = self._finish_interrupted(where, active, result, now)
            members = [r for r in active if not is_summary(r) and not is_pinned(r) and r.id not in done]
            by_route: dict[str, list[MemoryRecord]] = {}
            for record in sorted(members, key=lambda r: r.id):  # ids sort by creation: oldest first
                by_route.setdefault(route_of(record), []).append(record)
            for route, records in by_route.items():
                if len(records) < self._min_cluster:
                    continue
                result.add("clustered", len(records))
                vectors = self._vectors([r.content for r in records])
                for cluster in clusters_of(vectors, self._similarity):
                    if len(cluster.members) < self._min_cluster:
                        continue
                    self._summarise(where, [records[i] for i in cluster.members], [vectors[i] for i in cluster.members], route, result, now)

        return walk(self._store, tenant, cursor, self._batch, (MemoryKind.EPISODIC,), visit, now)

    def _vectors(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), EMBED_CHUNK):
            out.extend(self._embedder.embed(texts[start : start + EMBED_CHUNK]))
        return out

    def _summarise(
        self, where: Partition, members: list[MemoryRecord], vectors: list[list[float]], route: str, result: StepResult, now: datetime
    ) -> None:
        total = [sum(column) for column in zip(*vectors, strict=True)]
        central = max(range(len(members)), key=lambda i: sum(a * b for a, b in zip(vectors[i], total, strict=True)))
        draft = summary_draft(members, members[central], route)
        if self._writer is not None:
            written = self._writer.summarise(members, draft.value["intent"] | {"count": len(members)})
            if written:  # the model's sentence, then the central member's words (what a search finds)
                draft = draft.model_copy(
                    update={
                        "content": f"{written} — {len(members)} similar episodes, such as: {members[central].content}"[:2000],
                        "value": {**draft.value, "written_by": f"bedrock:{self._writer.model_id}"},
                    }
                )
        outcome = self._store.create(where, draft, now)
        if outcome.created:
            result.add("summaries")
        summary_id = outcome.record.id
        for member in members:
            if archive(self._store, where, member, f"consolidated into {summary_id}", now, result):
                result.add("consolidated")

    def _finish_interrupted(self, where: Partition, active: list[MemoryRecord], result: StepResult, now: datetime) -> set[str]:
        """Archive the members an active summary lists that are still active; their ids."""
        listed = {mid: s.id for s in active if is_summary(s) for mid in s.value["summary_of"]}
        for record in active:
            summary_id = listed.get(record.id)
            done = summary_id is not None and not is_summary(record)
            if done and archive(self._store, where, record, f"consolidated into {summary_id}", now, result):
                result.add("consolidated")
        return set(listed)
