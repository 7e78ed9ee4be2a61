"""Credit under contention: concurrent credits, and version writes racing them, lose nothing.

Each test would fail if a store lost an update: a read-modify-write of the credit that is not
atomic drops uses, and a version write that puts back the credit it read drops ledger entries.
SQLite is raced by threads and by processes sharing one file. DynamoDB is raced by threads
against the locked-down moto server (``LocalMotoServer``), which applies each call atomically as
DynamoDB does for one item; moto in-process is neither atomic nor isolated under threads, so a
pass there would prove nothing (docs/architecture.md, Tests: prove what moto cannot).
"""

from __future__ import annotations

import multiprocessing
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memtool.errors import VersionConflict
from memtool.memory.credit import credit_after
from memtool.memory.records import Credit, MemoryDraft, MemoryKind, MemoryPatch, MemoryRecord
from memtool.memory.sqlite_store import SQLiteMemoryStore
from memtool.memory.store import MemoryStore, Partition
from memtool.runtime import container
from memtool.runtime.aws import client
from memtool.clock import FrozenClock
from memtool.runtime.moto_server import LocalMotoServer
from memtool.settings import Settings, use_settings
from memtool.runtime.tables import create_tables

from tests.integration.test_memory_store import run_together

LI = Partition("acme", "li")
ALPHA = 0.3
CREDITS = 20


@pytest.fixture(scope="module")
def moto_server() -> Iterator[LocalMotoServer]:
    """moto over HTTP behind ``LockedDownMoto``: one DynamoDB call at a time, atomic as in AWS."""
    server = LocalMotoServer("127.0.0.1", 0).start()
    yield server
    server.stop()


@pytest.fixture(params=["dynamodb", "sqlite"])
def store(request: pytest.FixtureRequest, clock: FrozenClock, tmp_path: Path, template: dict[str, Any]) -> MemoryStore:
    if request.param == "sqlite":
        sqlite = SQLiteMemoryStore(tmp_path / "memtool.sqlite3")
        request.addfinalizer(sqlite.close)
        return sqlite
    server: LocalMotoServer = request.getfixturevalue("moto_server")
    suffix = uuid.uuid4().hex[:8]
    settings = Settings(
        runtime="local",
        region="us-east-1",
        aws_endpoint_url=server.endpoint,
        home=tmp_path / "memtool-home",
        store="dynamodb",
        memory_table=f"memory-{suffix}",
        idempotency_table=f"idempotency-{suffix}",
        aws_access_key_id="memtool-local",
        aws_secret_access_key="memtool-local",
    )
    use_settings(settings)
    create_tables(client("dynamodb", settings), settings, template)
    return container.memory_store()


def rated(episode_id: str, reward: float, clock: FrozenClock) -> Callable[[MemoryRecord], Credit]:
    return lambda head: credit_after(head.credit, episode_id=episode_id, reward=reward, alpha=ALPHA, now=clock.now())


def reward_of(n: int) -> float:
    return 1.0 if n % 2 == 0 else -1.0


def test_twenty_concurrent_credits_to_one_memory_all_count(store, clock):
    # Given one memory, and 20 episodes that applied it, each rated at once on its own thread
    record = store.create(LI, MemoryDraft(kind=MemoryKind.PROFILE, content="金额默认用元"), clock.now()).record
    # (This first read also makes PynamoDB's client here, not on 20 threads at once, which is slow.)
    assert store.get(LI, record.id, clock.now()).credit == Credit()

    def credit(n: int) -> None:
        store.update_credit(LI, record.id, rated(f"ep-{n}", reward_of(n), clock), clock.now(), clock.now())

    run_together([lambda n=n: credit(n) for n in range(CREDITS)])

    # Then every episode counts exactly once, and the memory is still version 1
    head = store.get(LI, record.id, clock.now())
    assert (head.credit.uses, head.credit.successes, head.credit.failures) == (CREDITS, CREDITS // 2, CREDITS // 2)
    assert sorted(e.episode_id for e in head.credit.recent) == sorted(f"ep-{n}" for n in range(CREDITS))
    assert head.version == 1 and len(store.history(LI, record.id, clock.now())) == 1


def test_version_writes_racing_credits_lose_neither(store, clock):
    # Given one memory, 10 credits and 3 content writers that each retry until their version lands
    record = store.create(LI, MemoryDraft(kind=MemoryKind.PROFILE, content="v1"), clock.now()).record
    assert store.get(LI, record.id, clock.now()).credit == Credit()
    credits, writers = 10, 3
    landed: dict[int, str] = {}

    def write_content(n: int) -> None:
        for _ in range(200):
            head = store.get(LI, record.id, clock.now())
            try:
                new = store.update(LI, record.id, MemoryPatch(content=f"writer {n}"), head.version, clock.now()).record
            except VersionConflict:
                continue  # another writer's version landed first: write on top of it
            landed[new.version] = new.content
            return
        raise AssertionError(f"writer {n} never landed")

    def credit(n: int) -> None:
        store.update_credit(LI, record.id, rated(f"ep-{n}", reward_of(n), clock), clock.now(), clock.now())

    # When they all run at once
    run_together([lambda n=n: credit(n) for n in range(credits)] + [lambda n=n: write_content(n) for n in range(writers)])

    # Then every version landed once, the head holds the last one's content, and no credit is lost
    head = store.get(LI, record.id, clock.now())
    assert sorted(landed) == [2, 3, 4]
    assert (head.version, head.content) == (4, landed[4])
    assert [(r.version, r.content) for r in store.history(LI, record.id, clock.now())][1:] == sorted(landed.items())
    assert (head.credit.uses, head.credit.successes, head.credit.failures) == (credits, credits // 2, credits // 2)
    assert sorted(e.episode_id for e in head.credit.recent) == sorted(f"ep-{n}" for n in range(credits))


# ---- SQLite: several processes on one file ----------------------------------------------------


def credit_from_another_process(path: str, memory_id: str, episodes: list[int], start: Any) -> None:
    """A process of its own, with its own store on the same file, crediting on several threads."""
    from datetime import UTC, datetime

    clock = FrozenClock(datetime(2026, 11, 29, 9, 0, tzinfo=UTC))
    with SQLiteMemoryStore(Path(path)) as store:
        start.wait(timeout=60)
        run_together(
            [
                lambda n=n: store.update_credit(LI, memory_id, rated(f"ep-{n}", reward_of(n), clock), clock.now(), clock.now())
                for n in episodes
            ]
        )


def test_credits_from_several_processes_on_one_sqlite_file_all_count(tmp_path, clock):
    # Given a memory in a SQLite file, and 4 processes of 5 threads, each thread rating one episode
    path = tmp_path / "memtool.sqlite3"
    with SQLiteMemoryStore(path) as store:
        record = store.create(LI, MemoryDraft(kind=MemoryKind.PROFILE, content="x"), clock.now()).record
    # Not a fork of this process, which runs threads: children of a fresh server process that
    # imported this module once (spawning each would import it four times over).
    processes = multiprocessing.get_context("forkserver")
    processes.set_forkserver_preload([__name__])
    start = processes.Barrier(4)
    workers = [
        processes.Process(target=credit_from_another_process, args=(str(path), record.id, list(range(w, CREDITS, 4)), start))
        for w in range(4)
    ]

    # When they all credit at once
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)

    # Then every process finished, and every episode counts exactly once
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    with SQLiteMemoryStore(path) as store:
        head = store.get(LI, record.id, clock.now())
    assert (head.credit.uses, head.credit.successes, head.credit.failures) == (CREDITS, CREDITS // 2, CREDITS // 2)
    assert sorted(e.episode_id for e in head.credit.recent) == sorted(f"ep-{n}" for n in range(CREDITS))
    assert head.version == 1
