"""The SQLite store's outbox drained into the real indexer: delivery, retries, dead letters, lag."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from memtool.flows.indexing import MemoryIndexer, StreamChange
from memtool.memory.records import IndexState, MemoryDraft, MemoryKind
from memtool.memory.sqlite_store import SQLiteMemoryStore
from memtool.memory.store import Partition
from memtool.retrieval.embedded_index import EmbeddedIndex
from memtool.retrieval.embedders import HashingEmbedder
from memtool.retrieval.index import IndexFilter, IndexQuery
from memtool.runtime.outbox_drain import BackgroundOutboxDrain, OutboxDrainer

LI = Partition("acme", "li")
NOW = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


class FlakyIndexer:
    """The real indexer, except that changes of the ids in ``failing`` raise (a broken index),
    forever or for the first ``times`` attempts."""

    def __init__(self, real: MemoryIndexer, failing: set[str], times: int | None = None) -> None:
        self.real = real
        self.failing = failing
        self.times = times
        self.applied: list[str] = []

    def apply(self, change: StreamChange) -> str:
        image = change.new_image or change.old_image or {}
        memory_id = (image.get("record") or {}).get("id")
        if memory_id in self.failing and (self.times is None or self.times > 0):
            if self.times is not None:
                self.times -= 1
            raise ConnectionError(f"index down for {memory_id}")
        self.applied.append(memory_id)
        return self.real.apply(change)


@pytest.fixture
def parts(tmp_path: Path):
    store = SQLiteMemoryStore(tmp_path / "memtool.sqlite3")
    index = EmbeddedIndex(tmp_path / "index")
    index.ensure()
    embedder = HashingEmbedder(64)
    yield store, index, embedder, MemoryIndexer(store, index, embedder)
    index.close()
    store.close()


def write(store: SQLiteMemoryStore, text: str) -> str:
    return store.create(LI, MemoryDraft(kind=MemoryKind.EPISODIC, content=text), NOW).record.id


def found(index: EmbeddedIndex, embedder: HashingEmbedder, text: str) -> list[str]:
    query = IndexQuery(
        text=text,
        vector=embedder.embed([text])[0],
        k=10,
        filter=IndexFilter(tenant="acme", owners=("li",), embedder=embedder.id),
    )
    return [hit.memory_id for hit in index.lexical(query)]


def test_every_change_is_delivered_once_and_the_record_marked_indexed(parts):
    store, index, embedder, indexer = parts
    ids = [write(store, f"note number {n} about 华东 revenue") for n in range(5)]
    drainer = OutboxDrainer(store=lambda: store, indexer=lambda: indexer, now=lambda: NOW, batch_size=2)

    assert drainer.drain() == 5
    assert drainer.drain() == 0  # nothing twice
    assert store.outbox_stats(NOW).pending == 0
    assert all(store.get(LI, memory_id, NOW).index_state is IndexState.INDEXED for memory_id in ids)
    assert set(found(index, embedder, "华东 revenue")) == set(ids)
    assert drainer.stats()["delivered"] == 5 and drainer.stats()["lag_seconds"] is None


def test_a_change_that_keeps_failing_becomes_a_dead_letter_and_the_rest_flow(parts):
    store, index, embedder, indexer = parts
    bad = write(store, "the one the index refuses")
    good = [write(store, f"fine note {n}") for n in range(3)]
    flaky = FlakyIndexer(indexer, failing={bad})
    drainer = OutboxDrainer(store=lambda: store, indexer=lambda: flaky, now=lambda: NOW, max_attempts=3)

    # Each round delivers what it can; the failing change is retried on the next round
    rounds = [drainer.drain() for _ in range(4)]

    assert sum(rounds) == 3
    stats = drainer.stats()
    assert stats["dead_letters"] == 1 and stats["pending"] == 0
    assert stats["failed_attempts"] == 3 and "index down" in stats["last_error"]
    assert store.get(LI, bad, NOW).index_state is IndexState.PENDING
    assert all(store.get(LI, memory_id, NOW).index_state is IndexState.INDEXED for memory_id in good)

    # A restart revives the dead letter; with the index healthy again it is delivered
    assert store.revive_dead_letters() == 1
    assert OutboxDrainer(store=lambda: store, indexer=lambda: indexer, now=lambda: NOW).drain() == 1
    assert store.get(LI, bad, NOW).index_state is IndexState.INDEXED
    assert store.outbox_stats(NOW).dead == 0


def test_a_change_delivered_but_not_acknowledged_is_delivered_again_harmlessly(parts):
    store, index, embedder, indexer = parts
    memory_id = write(store, "delivered twice after a crash")
    entry = store.outbox_batch()[0]
    change = StreamChange(entry.event_name, entry.new_image, entry.old_image, entry.by_ttl)
    assert indexer.apply(change) == "indexed"  # ... and the process dies before outbox_done

    drainer = OutboxDrainer(store=lambda: store, indexer=lambda: indexer, now=lambda: NOW)
    assert drainer.drain() == 1
    assert found(index, embedder, "delivered twice") == [memory_id]
    assert store.outbox_stats(NOW).pending == 0


def test_the_background_drain_delivers_on_its_own_and_drains_on_stop(parts):
    store, index, embedder, indexer = parts
    background = BackgroundOutboxDrain(
        OutboxDrainer(store=lambda: store, indexer=lambda: indexer, now=lambda: NOW), interval=3600
    ).start()
    memory_id = write(store, "left for the final drain")
    background.stop()  # the interval never elapsed: the stop's final drain delivered it
    assert store.get(LI, memory_id, NOW).index_state is IndexState.INDEXED


def test_a_failed_change_holds_back_the_later_changes_of_its_memory(parts):
    """Out of order, a retried INSERT after the REMOVE would put a forgotten memory back."""
    from memtool.memory.records import MemoryPatch

    store, index, embedder, indexer = parts
    doomed = write(store, "forgotten words quokka")
    other = write(store, "kept words quokka")
    store.update(LI, doomed, MemoryPatch(content="forgotten words quokka v2"), expected_version=1, now=NOW)
    store.forget(LI, doomed)
    flaky = FlakyIndexer(indexer, failing={doomed}, times=1)  # the first delivery (INSERT) fails once
    drainer = OutboxDrainer(store=lambda: store, indexer=lambda: flaky, now=lambda: NOW)

    drainer.drain()  # INSERT fails: the MODIFY and REMOVE of that memory wait; the other memory flows
    assert found(index, embedder, "quokka") == [other]
    drainer.drain()  # INSERT, MODIFY, REMOVE in order

    assert found(index, embedder, "quokka") == [other]
    assert store.outbox_stats(NOW).pending == 0
