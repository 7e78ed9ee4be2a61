"""The SQLite record store beyond the shared contract: the file, the transactional outbox, TTL
purges, the connection pool, and what only real processes can show (kill -9, two writers)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memtool.errors import ValidationFailed, VersionConflict
from memtool.memory import sqlite_store
from memtool.memory.records import IndexState, MemoryDraft, MemoryKind, MemoryPatch
from memtool.memory.sqlite_store import SCHEMA_VERSION, SQLiteMemoryStore
from memtool.memory.store import Partition, UndecodableRecord

from tests.support import ROOT

LI = Partition("acme", "li")
NOW = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "memtool.sqlite3"


@pytest.fixture
def store(path: Path):
    opened = SQLiteMemoryStore(path)
    yield opened
    opened.close()


def draft(kind=MemoryKind.PROFILE, content="金额默认用元", **fields) -> MemoryDraft:
    return MemoryDraft(kind=kind, content=content, **fields)


def rows(path: Path, sql: str, *params) -> list[tuple]:
    """Read the file with a connection of its own, as another process would."""
    with closing(sqlite3.connect(path)) as db:
        return db.execute(sql, params).fetchall()


# ---- the file -----------------------------------------------------------------------------------


def test_the_file_is_wal_with_full_sync_and_a_schema_version(store, path):
    assert rows(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert rows(path, "PRAGMA journal_mode") == [("wal",)]
    tables = {name for (name,) in rows(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"heads", "versions", "slots", "outbox"} <= tables
    with store._pool.lease() as conn:
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (10_000,)


def test_a_file_from_a_newer_memtool_is_refused(path):
    SQLiteMemoryStore(path).close()
    with closing(sqlite3.connect(path)) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(RuntimeError, match="schema"):
        SQLiteMemoryStore(path)


def test_reopening_keeps_everything(path):
    with SQLiteMemoryStore(path) as first:
        record = first.create(LI, draft(key="unit", content="元"), NOW).record
    with SQLiteMemoryStore(path) as again:
        assert again.get(LI, record.id, NOW).content == "元"
        assert again.get_slot(LI, MemoryKind.PROFILE, "unit", NOW).id == record.id


def test_heads_are_stored_as_json_with_the_columns_reads_use(store, path):
    record = store.create(LI, draft(kind=MemoryKind.WORKING, content="x", session_id="s1"), NOW).record
    [(kind, status, version, expires_at, text)] = rows(
        path, "SELECT kind, status, version, expires_at, record FROM heads WHERE id = ?", record.id
    )
    assert (kind, status, version) == ("working", "active", 1)
    assert expires_at == int((NOW + timedelta(days=1)).timestamp()) * 1_000_000  # exact microseconds
    assert json.loads(text) == record.model_dump(mode="json")


# ---- the transactional outbox -----------------------------------------------------------------


def test_every_change_leaves_one_outbox_entry_with_its_images(store):
    record = store.create(LI, draft(content="v1"), NOW).record
    store.update(LI, record.id, MemoryPatch(content="v2"), expected_version=1, now=NOW + timedelta(minutes=1))
    store.forget(LI, record.id)

    insert, modify, remove = store.outbox_batch()

    assert (insert.event_name, insert.old_image, insert.by_ttl, insert.attempts) == ("INSERT", None, False, 0)
    assert insert.new_image == {"item_type": "head", "record": record.model_dump(mode="json")}
    assert insert.created_at == NOW
    assert modify.event_name == "MODIFY" and modify.created_at == NOW + timedelta(minutes=1)
    assert (modify.old_image["record"]["version"], modify.new_image["record"]["version"]) == (1, 2)
    assert remove.event_name == "REMOVE" and remove.new_image is None
    assert store.record_from_image(remove.old_image).version == 2
    assert insert.seq < modify.seq < remove.seq


def test_writes_that_fail_leave_no_outbox_entry(store, path):
    record = store.create(LI, draft(key="unit", content="元"), NOW).record
    stale = store.get(LI, record.id, NOW)
    store.update(LI, record.id, MemoryPatch(content="分"), expected_version=1, now=NOW)
    before = rows(path, "SELECT seq FROM outbox")

    # A conditional write that lost, a stale expected version, a refused value, a same-value write
    with pytest.raises(VersionConflict):
        store._write_version(stale, MemoryPatch(content="lost"), NOW)
    with pytest.raises(VersionConflict):
        store.update(LI, record.id, MemoryPatch(content="stale"), expected_version=1, now=NOW)
    with pytest.raises(ValidationFailed):
        store.create(LI, draft(content="bad", value=float("nan")), NOW)
    assert store.create(LI, draft(key="unit", content="分"), NOW).unchanged

    assert rows(path, "SELECT seq FROM outbox") == before
    assert [v for (v,) in rows(path, "SELECT version FROM versions WHERE id = ?", record.id)] == [1, 2]


def test_a_change_rolled_back_midway_leaves_neither_the_change_nor_its_entry(store, path, monkeypatch):
    record = store.create(LI, draft(content="v1"), NOW).record
    before = (rows(path, "SELECT * FROM heads"), rows(path, "SELECT * FROM versions"), rows(path, "SELECT * FROM outbox"))

    def crash(*args, **kwargs):  # the outbox insert is the last statement of the transaction
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(SQLiteMemoryStore, "_enqueue", staticmethod(crash))
    with pytest.raises(sqlite3.OperationalError):
        store.update(LI, record.id, MemoryPatch(content="v2"), expected_version=1, now=NOW)

    after = (rows(path, "SELECT * FROM heads"), rows(path, "SELECT * FROM versions"), rows(path, "SELECT * FROM outbox"))
    assert after == before


def test_mark_indexed_writes_no_outbox_entry(store):
    record = store.create(LI, draft(content="v1"), NOW).record
    store.outbox_done([e.seq for e in store.outbox_batch()])
    assert store.mark_indexed(LI, record.id, 1, IndexState.INDEXED)
    assert store.outbox_batch() == []
    assert store.get(LI, record.id, NOW).index_state == IndexState.INDEXED


def test_outbox_batches_oldest_first_and_done_deletes(store):
    ids = [store.create(LI, draft(kind=MemoryKind.EPISODIC, content=f"e{n}"), NOW).record.id for n in range(5)]

    first = store.outbox_batch(limit=2)
    assert [e.new_image["record"]["id"] for e in first] == ids[:2]
    store.outbox_done([e.seq for e in first])
    store.outbox_done([])

    rest = store.outbox_batch(limit=10)
    assert [e.new_image["record"]["id"] for e in rest] == ids[2:]
    store.outbox_done([e.seq for e in rest])
    assert store.outbox_batch() == []
    assert store.outbox_stats(NOW).pending == 0


def test_a_change_that_keeps_failing_becomes_a_dead_letter(store):
    store.create(LI, draft(content="poison pill"), NOW)
    healthy = store.create(LI, draft(content="fine"), NOW).record
    [pill, fine] = store.outbox_batch()

    assert store.outbox_failed(pill.seq, "IndexDown: boom", max_attempts=3) is False
    assert store.outbox_failed(pill.seq, "IndexDown: boom", max_attempts=3) is False
    assert [e.attempts for e in store.outbox_batch()] == [2, 0]
    assert store.outbox_failed(pill.seq, "IndexDown: still", max_attempts=3) is True

    # A dead letter is kept (with its last error) but never handed out again
    assert [e.seq for e in store.outbox_batch()] == [fine.seq]
    assert fine.new_image["record"]["id"] == healthy.id
    assert store.outbox_stats(NOW) == sqlite_store.OutboxStats(pending=1, dead=1, oldest_pending_seconds=0.0)
    assert rows(store.path, "SELECT attempts, dead, last_error FROM outbox WHERE seq = ?", pill.seq) == [
        (3, 1, "IndexDown: still")
    ]
    assert store.outbox_failed(10_000, "no such entry", max_attempts=1) is False


def test_outbox_stats_report_the_age_of_the_oldest_pending_change(store):
    assert store.outbox_stats(NOW) == sqlite_store.OutboxStats(pending=0, dead=0, oldest_pending_seconds=None)
    store.create(LI, draft(content="old"), NOW)
    store.create(LI, draft(content="new"), NOW + timedelta(seconds=30))
    stats = store.outbox_stats(NOW + timedelta(seconds=90))
    assert (stats.pending, stats.dead, stats.oldest_pending_seconds) == (2, 0, 90.0)


# ---- TTL ----------------------------------------------------------------------------------------


def test_purge_expired_removes_expired_memories_and_announces_ttl_removals(store, path):
    working = [
        store.create(LI, draft(kind=MemoryKind.WORKING, key=f"k{n}", content=f"w{n}", session_id="s"), NOW).record
        for n in range(3)
    ]
    store.update(LI, working[0].id, MemoryPatch(content="w0 v2"), expected_version=1, now=NOW)
    profile = store.create(LI, draft(content="stays"), NOW).record
    store.outbox_done([e.seq for e in store.outbox_batch()])
    later = NOW + timedelta(days=1, seconds=1)

    assert store.purge_expired(NOW) == 0
    assert store.purge_expired(later, limit=2) == 2
    assert store.purge_expired(later, limit=2) == 1
    assert store.purge_expired(later) == 0

    for record in working:
        assert rows(path, "SELECT 1 FROM heads WHERE id = ? UNION ALL SELECT 1 FROM versions WHERE id = ?"
                    " UNION ALL SELECT 1 FROM slots WHERE id = ?", record.id, record.id, record.id) == []
    assert store.get(LI, profile.id, later).content == "stays"
    removals = store.outbox_batch()
    assert {(e.event_name, e.by_ttl) for e in removals} == {("REMOVE", True)}
    assert sorted((r.id, r.version) for r in map(store.record_from_image, (e.old_image for e in removals))) == sorted(
        [(working[0].id, 2), (working[1].id, 1), (working[2].id, 1)]
    )
    assert store.purge_snapshots(LI, working[0].id) == 0  # the indexer's follow-up finds nothing left
    # The slots are free again
    assert store.create(LI, draft(kind=MemoryKind.WORKING, key="k0", content="w0", session_id="s"), later).created


# ---- damaged records ----------------------------------------------------------------------------


def test_forgetting_a_damaged_record_still_tells_the_indexer_what_to_purge(store, path):
    record = store.create(LI, draft(content="v1"), NOW).record
    store.update(LI, record.id, MemoryPatch(content="v2"), expected_version=1, now=NOW)
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE heads SET record = '{broken' WHERE id = ?", (record.id,))
    store.outbox_done([e.seq for e in store.outbox_batch()])

    store.forget(LI, record.id)

    [removal] = store.outbox_batch()
    purged = store.record_from_image(removal.old_image)
    assert (purged.id, purged.tenant, purged.owner, purged.version) == (record.id, "acme", "li", 2)


def test_a_stored_record_that_names_another_memory_is_never_returned(store, path):
    mine = store.create(LI, draft(content="mine"), NOW).record
    theirs = store.create(Partition("other", "zhao"), draft(content="secret"), NOW).record
    with closing(sqlite3.connect(path)) as db, db:
        (text,) = db.execute("SELECT record FROM heads WHERE id = ?", (theirs.id,)).fetchone()
        db.execute("UPDATE heads SET record = ? WHERE id = ?", (text, mine.id))

    with pytest.raises(UndecodableRecord):
        store.get(LI, mine.id, NOW)
    skipped: list[str] = []
    assert store.heads(LI, skipped=skipped) == [] and skipped == [mine.id]


def test_record_from_image_returns_none_for_anything_undecodable(store):
    assert store.record_from_image({}) is None
    assert store.record_from_image({"item_type": "head", "record": {"id": "x"}}) is None
    assert store.record_from_image({"item_type": "head", "record": "not a record"}) is None
    assert store.record_from_image({"item_type": "slot", "record": {}}) is None


# ---- threads --------------------------------------------------------------------------------------


def test_many_short_lived_threads_share_a_bounded_pool(path, monkeypatch):
    opened: list[sqlite3.Connection] = []
    real_open = sqlite_store.open_connection

    def counting_open(at: Path) -> sqlite3.Connection:
        conn = real_open(at)
        opened.append(conn)
        return conn

    monkeypatch.setattr(sqlite_store, "open_connection", counting_open)
    store = SQLiteMemoryStore(path, pool_size=4)
    record = store.create(LI, draft(content="shared"), NOW).record
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            store.get(LI, record.id, NOW)
            store.create(LI, draft(kind=MemoryKind.EPISODIC, content=f"t{n}"), NOW)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    for _ in range(4):  # waves of threads that come and go, like the HTTP server's
        threads = [threading.Thread(target=work, args=(n,)) for n in range(25)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert errors == []
    assert len(opened) <= 4
    assert len(store.list(LI, NOW, kind=MemoryKind.EPISODIC, limit=200).items) == 100
    store.close()
    with pytest.raises(sqlite3.ProgrammingError):
        opened[0].execute("SELECT 1")  # closed
    with pytest.raises(RuntimeError, match="closed"):
        store.get(LI, record.id, NOW)


def test_readers_are_not_blocked_by_a_writer_and_writers_wait_their_turn(store, path):
    record = store.create(LI, draft(content="before"), NOW).record
    # Given another process's connection holding the write lock, with an uncommitted change
    with closing(sqlite3.connect(path, isolation_level=None, check_same_thread=False)) as other:
        other.execute("BEGIN IMMEDIATE")
        other.execute("UPDATE heads SET status = 'archived' WHERE id = ?", (record.id,))
        released = threading.Timer(0.5, lambda: other.execute("COMMIT"))

        # Then reads go on at once and see the last committed state
        started = time.monotonic()
        assert store.get(LI, record.id, NOW).content == "before"
        assert [r.id for r in store.list(LI, NOW).items] == [record.id]
        assert time.monotonic() - started < 0.4

        # And a write waits for the lock (busy timeout) instead of failing
        released.start()
        written = store.create(LI, draft(content="after"), NOW).record
        assert time.monotonic() - started >= 0.45
        released.join()
    assert store.get(LI, written.id, NOW).content == "after"


# ---- processes ------------------------------------------------------------------------------------

_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "layers" / "core"), str(ROOT)])}

_WRITER = textwrap.dedent(
    """
    import sys
    from datetime import UTC, datetime
    from pathlib import Path
    from memtool.memory.records import MemoryDraft, MemoryKind
    from memtool.memory.sqlite_store import SQLiteMemoryStore
    from memtool.memory.store import Partition

    store = SQLiteMemoryStore(Path(sys.argv[1]))
    n = 0
    while True:
        record = store.create(
            Partition("acme", "li"),
            MemoryDraft(kind=MemoryKind.EPISODIC, content=f"episode {n}"),
            datetime.now(UTC),
        ).record
        print(record.id, flush=True)  # acknowledged: create() returned
        n += 1
    """
)


def test_acknowledged_writes_survive_kill_9(path):
    # Given a process that writes in a loop and prints each id once create() has returned
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_ENV
    )
    try:
        acknowledged = []
        deadline = time.monotonic() + 20
        while len(acknowledged) < 40 and time.monotonic() < deadline:
            line = writer.stdout.readline()
            if not line:
                break
            acknowledged.append(line.strip())
        # When it is killed mid-loop, with no chance to clean up
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait(timeout=10)
        stderr = writer.stderr.read()
        writer.stdout.close()
        writer.stderr.close()
    assert len(acknowledged) == 40, stderr

    # Then every acknowledged write is there after reopening, with its change for the indexer
    with SQLiteMemoryStore(path) as reopened:
        found = reopened.get_many("acme", [("li", memory_id) for memory_id in acknowledged])
        assert sorted(found) == sorted(acknowledged)
        announced = {e.new_image["record"]["id"] for e in reopened.outbox_batch(limit=10_000) if e.event_name == "INSERT"}
        assert set(acknowledged) <= announced
        assert rows(path, "PRAGMA integrity_check") == [("ok",)]


_UPDATER = textwrap.dedent(
    """
    import sys
    from datetime import UTC, datetime
    from pathlib import Path
    from memtool.errors import VersionConflict
    from memtool.memory.records import MemoryPatch
    from memtool.memory.sqlite_store import SQLiteMemoryStore
    from memtool.memory.store import Partition

    store = SQLiteMemoryStore(Path(sys.argv[1]))
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    try:
        store.update(Partition("acme", "li"), sys.argv[2], MemoryPatch(content=sys.argv[3]), 1, datetime.now(UTC))
        print("won", flush=True)
    except VersionConflict as conflict:
        print(f"conflict {conflict.current_version}", flush=True)
    """
)


def test_two_processes_writing_one_version_have_exactly_one_winner(store, path):
    record = store.create(LI, draft(content="base"), NOW).record
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _UPDATER, str(path), record.id, f"process {n}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_ENV,
        )
        for n in range(2)
    ]
    try:
        for writer in writers:
            assert writer.stdout.readline().strip() == "ready", writer.stderr.read()
        for writer in writers:
            writer.stdin.write("go\n")
            writer.stdin.flush()
        results = sorted(writer.communicate(timeout=20)[0].strip() for writer in writers)
    finally:
        for writer in writers:
            writer.kill()
            writer.wait(timeout=10)

    assert results == ["conflict 2", "won"]
    head = store.get(LI, record.id, NOW)
    assert head.version == 2 and head.content in {"process 0", "process 1"}
    assert [r.version for r in store.history(LI, record.id, NOW)] == [1, 2]
    assert [e.event_name for e in store.outbox_batch()] == ["INSERT", "MODIFY"]


def test_each_pooled_connection_keeps_a_small_page_cache(tmp_path: Path) -> None:
    # bounded memory (issue 21, item 8): the pool's page caches are 8 × 512 KiB, not 8 × SQLite's 2 MiB
    with closing(sqlite_store.open_connection(tmp_path / "state.sqlite3")) as conn:
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == -sqlite_store.CACHE_KIB == -512
