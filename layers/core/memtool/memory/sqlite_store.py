"""The record store on SQLite: the local runtime's embedded database, with DynamoDB's semantics.

One file in WAL mode with ``synchronous=FULL``: a write that returned is committed and survives
``kill -9``. Writers are serialised by the database (every write transaction is ``BEGIN
IMMEDIATE``, so a read-check-write never races another writer); readers run concurrently on
their own snapshots. A small bounded pool of connections serves any number of threads.

A full disk, a read-only file or a damaged page is raised as ``InsufficientStorage``,
``StoreReadOnly`` or ``StoreCorrupt`` (``memory.sqlite_tx``), never as a bare ``sqlite3`` error;
``check_database`` is the runtime's start-up check of a file.

The tables (heads, versions, slots and the outbox), their rows and the listing cursors are in
``memory.sqlite_rows``; the outbox's entries and change images in ``memory.sqlite_outbox``.

The semantics match ``DynamoMemoryStore`` (the contract suite runs on both), including the
listing orders: by kind, newest ``updated_at`` first (DynamoDB's by_kind index); otherwise by
id descending, which is creation order (the head query on ``M#<id>``).
"""

from __future__ import annotations

import builtins
import json
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memtool.errors import NotFound, StoreCorrupt, StoreReadOnly, VersionConflict
from memtool.memory.records import (
    Credit,
    IndexState,
    MemoryDraft,
    MemoryKind,
    MemoryPatch,
    MemoryRecord,
    MemoryStatus,
)
from memtool.memory.sqlite_outbox import HEAD, OutboxEntry, OutboxStats, head_image, load_image, removal_image
from memtool.memory.sqlite_rows import (
    EPOCH,
    HEAD_COLUMNS,
    SCHEMA,
    SCHEMA_VERSION,
    HeadRow,
    decode_cursor,
    encode_cursor,
    from_micros,
    has_expired,
    listing_of,
    listing_query,
    to_micros,
)
from memtool.memory.sqlite_tx import (
    forget_problems,
    note_failure,
    read_transaction,
    storage_errors,
    write_transaction,
)
from memtool.memory.store import (
    ForgetOutcome,
    MemoryPage,
    Partition,
    UndecodableRecord,
    WriteOutcome,
    credited,
    decode_record,
    first_version,
    forgotten,
    next_version,
    report_skipped,
    same_content,
    storable_json,
    supersede_patch,
)

logger = logging.getLogger("memtool.memory")

BUSY_TIMEOUT_SECONDS = 10.0
POOL_SIZE = 8
# Each pooled connection's page cache (SQLite's default is 2 MiB): the pool's caches filled as the
# store grew and were a steady part of the local runtime's memory growth under load. The OS keeps
# the file's pages cached anyway, so a miss here is a copy from memory, not a disk read.
CACHE_KIB = 512


# ---- the database file and its connections ----------------------------------------------------


def open_connection(path: Path) -> sqlite3.Connection:
    """A connection any thread may use (one at a time), in autocommit mode: we issue BEGIN.

    A file that cannot be opened, written or read (``journal_mode`` reads the header and may write
    it) fails here as ``StoreReadOnly`` or ``StoreCorrupt``, not as a bare ``sqlite3`` error.
    """
    with storage_errors(path):
        conn = sqlite3.connect(
            str(path), timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
            # WAL: readers never block the writer nor each other. The mode is stored in the file.
            conn.execute("PRAGMA journal_mode = WAL")
            # FULL: the WAL is synced at every commit, so an acknowledged write survives a crash.
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        except BaseException:
            conn.close()
            raise
    return conn


def check_database(path: Path, what: str) -> None:
    """The start-up check of one state database: it opens for writing and ``PRAGMA quick_check``
    finds every page well formed. ``what`` names it for the operator ("the memory store").

    A damaged page would otherwise answer 500 on the reads that touch it while everything else
    works; found at start, the runtime refuses to start, in one line naming the file and what to
    do. A missing file passes (it is created empty). ``quick_check`` reads every page but skips
    the index-against-table comparison of ``integrity_check``: seconds for a large file, not minutes.
    """
    if not path.exists():
        return
    moved = f"{path}.damaged"
    remedy = (
        f"restore it from a copy, or move it away to start with an empty one "
        f"(mv {path} {moved}, with its -wal and -shm files if they exist)"
    )
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:  # opened for writing, nothing written: a read-only or immutable file fails here, even for root
            with open(file, "r+b"):
                pass
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StoreReadOnly(
                f"{what} {file} cannot be written ({exc.strerror or type(exc).__name__}): make it and its folder "
                "writable, or choose another --home"
            ) from exc
    try:
        conn = open_connection(path)
    except StoreCorrupt as exc:
        raise StoreCorrupt(f"{what} {path} is not a readable SQLite database ({_cause(exc)}): {remedy}") from exc
    except StoreReadOnly as exc:
        raise StoreReadOnly(
            f"{what} {path} cannot be opened for writing ({_cause(exc)}): make it and its folder writable, "
            "or choose another --home"
        ) from exc
    try:
        with storage_errors(path):
            found = [str(row[0]) for row in conn.execute("PRAGMA quick_check").fetchall()]
    except StoreCorrupt as exc:
        raise StoreCorrupt(f"{what} {path} is damaged (quick_check: {_cause(exc)}): {remedy}") from exc
    finally:
        conn.close()
    if found != ["ok"]:
        first = " ".join(found[0].replace("*** in database main ***", "").split()) if found else "no answer"
        more = f" and {len(found) - 1} more problems" if len(found) > 1 else ""
        failure = StoreCorrupt(f"{what} {path} is damaged (quick_check: {first}{more}): {remedy}")
        note_failure(path, failure)
        raise failure
    forget_problems(path)


def _cause(error: BaseException) -> str:
    """The SQLite (or OS) words under a translated error, on one line."""
    cause = error.__cause__ or error
    return " ".join(str(cause).split()) or type(cause).__name__


class ConnectionPool:
    """At most ``size`` connections to one file, each leased to one thread at a time.

    Threads of the HTTP server come and go; a connection per thread would leak file handles,
    so connections live here and are leased for one transaction.
    """

    def __init__(self, path: Path, size: int = POOL_SIZE, lease_timeout: float = 30.0) -> None:
        self.path = path
        self._idle: list[sqlite3.Connection] = []
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._lease_timeout = lease_timeout
        self._closed = False

    @contextmanager
    def lease(self) -> Iterator[sqlite3.Connection]:
        if not self._slots.acquire(timeout=self._lease_timeout):
            raise TimeoutError(f"no free connection to {self.path} after {self._lease_timeout} s")
        try:
            with self._lock:
                if self._closed:
                    raise RuntimeError(f"the store at {self.path} is closed")
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = open_connection(self.path)
            healthy = False
            try:
                yield conn
                healthy = not conn.in_transaction
            finally:
                self._give_back(conn, healthy)
        finally:
            self._slots.release()

    def _give_back(self, conn: sqlite3.Connection, healthy: bool) -> None:
        if not healthy:
            try:  # a transaction left open by an error must not leak into the next lease
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                healthy = True
            except sqlite3.Error:
                healthy = False
        with self._lock:
            if healthy and not self._closed:
                self._idle.append(conn)
                return
        conn.close()

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; BEGIN IMMEDIATE takes the write lock before the first read."""
        with self.lease() as conn, write_transaction(conn, self.path):
            yield conn

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every SELECT in it sees the same snapshot."""
        with self.lease() as conn, read_transaction(conn, self.path):
            yield conn

    def close(self) -> None:
        """Close idle connections now; leased ones close when they come back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


# ---- the store --------------------------------------------------------------------------------


class SQLiteMemoryStore:
    """MemoryStore on one SQLite file, with a transactional outbox for the indexer."""

    def __init__(self, path: Path, pool_size: int = POOL_SIZE) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._pool = ConnectionPool(path, pool_size)
        self._migrate()

    def _migrate(self) -> None:
        with self._pool.writing() as conn:  # under the write lock: two processes never both create
            (found,) = conn.execute("PRAGMA user_version").fetchone()
            if found > SCHEMA_VERSION:
                raise RuntimeError(f"{self.path} has schema {found}; this memtool knows up to {SCHEMA_VERSION}")
            if found < 1:
                for statement in SCHEMA:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> SQLiteMemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- rows and records ------------------------------------------------------------------

    @staticmethod
    def _decode(row_tenant: str, row_owner: str, memory_id: str, text: str) -> MemoryRecord:
        try:
            record = decode_record(text)
        except (ValueError, TypeError, RecursionError) as exc:
            raise UndecodableRecord(memory_id, f"{type(exc).__name__}: {str(exc)[:200]}") from exc
        if (record.tenant, record.owner, record.id) != (row_tenant, row_owner, memory_id):
            # Never hand out a record under another partition's key, whatever the file says.
            raise UndecodableRecord(memory_id, "the stored record names another memory")
        return record

    @staticmethod
    def _head_row(conn: sqlite3.Connection, where: Partition, memory_id: str) -> HeadRow | None:
        row = conn.execute(
            f"SELECT {HEAD_COLUMNS} FROM heads WHERE tenant = ? AND owner = ? AND id = ?",
            (where.tenant, where.owner, memory_id),
        ).fetchone()
        return None if row is None else HeadRow(*row)

    def _live_head(self, conn: sqlite3.Connection, where: Partition, memory_id: str, now: datetime) -> HeadRow:
        row = self._head_row(conn, where, memory_id)
        if row is None or has_expired(row.expires_at, now):
            raise NotFound(f"memory {memory_id} not found", field="id")
        return row

    @staticmethod
    def _enqueue(
        conn: sqlite3.Connection,
        event_name: str,
        new_image: str | None,
        old_image: str | None,
        at: datetime,
        by_ttl: bool = False,
    ) -> None:
        conn.execute(
            "INSERT INTO outbox (event_name, new_image, old_image, by_ttl, created_at) VALUES (?, ?, ?, ?, ?)",
            (event_name, new_image, old_image, int(by_ttl), to_micros(at)),
        )

    def record_from_image(self, image: dict) -> MemoryRecord | None:
        """The record in an outbox image; None for anything else or anything undecodable."""
        if not isinstance(image, dict) or image.get("item_type") != HEAD:
            return None
        try:
            return MemoryRecord.model_validate(image.get("record"))
        except (ValueError, TypeError, RecursionError):
            return None

    # ---- writes ----------------------------------------------------------------------------

    def create(self, where: Partition, draft: MemoryDraft, now: datetime) -> WriteOutcome:
        record = first_version(where, draft, now)
        text = storable_json(record)  # refused before anything is written
        with self._pool.writing() as conn:
            if draft.key is not None:
                slot = conn.execute(
                    "SELECT id FROM slots WHERE tenant = ? AND owner = ? AND kind = ? AND key = ?",
                    (where.tenant, where.owner, draft.kind.value, draft.key),
                ).fetchone()
                if slot is not None:
                    outcome = self._supersede_slot(conn, where, slot[0], draft, now)
                    if outcome is not None:
                        return outcome
            conn.execute(
                f"INSERT INTO heads ({HEAD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.tenant,
                    record.owner,
                    record.id,
                    record.kind.value,
                    record.key,
                    record.status.value,
                    record.version,
                    to_micros(record.created_at),
                    to_micros(record.updated_at),
                    None if record.expires_at is None else to_micros(record.expires_at),
                    text,
                ),
            )
            self._insert_snapshot(conn, record, text)
            if record.key is not None:
                conn.execute(
                    "INSERT INTO slots (tenant, owner, kind, key, id) VALUES (?, ?, ?, ?, ?)",
                    (record.tenant, record.owner, record.kind.value, record.key, record.id),
                )
            self._enqueue(conn, "INSERT", head_image(text), None, now)
        return WriteOutcome(record=record, created=True)

    def _supersede_slot(
        self, conn: sqlite3.Connection, where: Partition, memory_id: str, draft: MemoryDraft, now: datetime
    ) -> WriteOutcome | None:
        """A same-key create as a new version of the slot's holder; None when the holder is gone
        (or was undecodable and has been removed): the caller then creates a fresh record."""
        row = self._head_row(conn, where, memory_id)
        if row is None:  # a slot without its head cannot come from this store; repair it anyway
            conn.execute(
                "DELETE FROM slots WHERE tenant = ? AND owner = ? AND kind = ? AND key = ?",
                (where.tenant, where.owner, draft.kind.value, draft.key),
            )
            return None
        try:
            current = self._decode(row.tenant, row.owner, row.id, row.record)
        except UndecodableRecord as exc:
            # A damaged holder must not block its slot (the request names no id to blame): it is
            # removed, every version and the slot as ``delete_by_id`` does, with its REMOVE for
            # the indexer, and the caller creates the new record, all in this one transaction.
            logger.warning(
                "slot %s/%s of %s/%s was held by undecodable memory %s (%s); removing it and creating afresh",
                draft.kind.value, draft.key, where.tenant, where.owner, row.id, exc.reason,
            )
            self._delete_memory(conn, where, row.id)
            self._enqueue(conn, "REMOVE", None, removal_image(row), now)
            return None
        patch = supersede_patch(draft)
        if not current.is_expired(now) and same_content(current, patch):
            return WriteOutcome(record=current, created=False, unchanged=True)
        new = self._put_version(conn, current, row.record, patch, now)
        return WriteOutcome(record=new, created=False, superseded=current)

    def update(
        self, where: Partition, memory_id: str, patch: MemoryPatch, expected_version: int, now: datetime
    ) -> WriteOutcome:
        with self._pool.writing() as conn:
            row = self._live_head(conn, where, memory_id, now)
            current = self._decode(row.tenant, row.owner, row.id, row.record)
            if current.version != expected_version:
                raise VersionConflict(
                    f"memory {memory_id} is at version {current.version}, not {expected_version}",
                    current_version=current.version,
                )
            new = self._put_version(conn, current, row.record, patch, now)
        return WriteOutcome(record=new, created=False)

    def _write_version(self, current: MemoryRecord, patch: MemoryPatch, now: datetime) -> WriteOutcome:
        """Write a new version on top of ``current`` as read earlier; stale → VersionConflict.

        A credit update since the read is not a conflict (credit is not content): the version is
        made on the head as it is now, so the new version keeps that credit.
        """
        with self._pool.writing() as conn:
            row = self._head_row(conn, Partition(current.tenant, current.owner), current.id)
            old_text = row.record if row is not None else storable_json(current)
            if row is not None and row.version == current.version:
                current = self._decode(row.tenant, row.owner, row.id, row.record)
            new = self._put_version(conn, current, old_text, patch, now)
        return WriteOutcome(record=new, created=False)

    def update_credit(
        self,
        where: Partition,
        memory_id: str,
        compute: Callable[[MemoryRecord], Credit],
        used_at: datetime,
        now: datetime,
    ) -> MemoryRecord:
        """Credit the head in place, read and written under one write lock (no retry needed).

        The head row's record changes and nothing else: no snapshot, no outbox entry.
        """
        with self._pool.writing() as conn:
            row = self._live_head(conn, where, memory_id, now)
            current = self._decode(row.tenant, row.owner, row.id, row.record)
            written = credited(current, compute(current), used_at)
            if written is None:
                return current
            conn.execute(
                "UPDATE heads SET record = ? WHERE tenant = ? AND owner = ? AND id = ?",
                (storable_json(written), row.tenant, row.owner, row.id),
            )
        return written

    def _put_version(
        self, conn: sqlite3.Connection, current: MemoryRecord, old_text: str, patch: MemoryPatch, now: datetime
    ) -> MemoryRecord:
        new = next_version(current, patch, now)
        text = storable_json(new)
        # The version check and the write are one conditional update (optimistic locking).
        changed = conn.execute(
            "UPDATE heads SET kind = ?, key = ?, status = ?, version = ?, updated_at = ?, expires_at = ?, record = ?"
            " WHERE tenant = ? AND owner = ? AND id = ? AND version = ?",
            (
                new.kind.value,
                new.key,
                new.status.value,
                new.version,
                to_micros(new.updated_at),
                None if new.expires_at is None else to_micros(new.expires_at),
                text,
                current.tenant,
                current.owner,
                current.id,
                current.version,
            ),
        ).rowcount
        if changed != 1:
            latest = conn.execute(
                "SELECT version FROM heads WHERE tenant = ? AND owner = ? AND id = ?",
                (current.tenant, current.owner, current.id),
            ).fetchone()
            raise VersionConflict(
                f"memory {current.id} changed while writing version {new.version}",
                current_version=None if latest is None else int(latest[0]),
            )
        self._insert_snapshot(conn, new, text)
        conn.execute(
            "UPDATE versions SET status = ? WHERE tenant = ? AND owner = ? AND id = ? AND version = ?",
            (MemoryStatus.SUPERSEDED.value, current.tenant, current.owner, current.id, current.version),
        )
        self._enqueue(conn, "MODIFY", head_image(text), head_image(old_text), now)
        return new

    @staticmethod
    def _insert_snapshot(conn: sqlite3.Connection, record: MemoryRecord, text: str) -> None:
        conn.execute(
            "INSERT INTO versions (tenant, owner, id, version, status, record) VALUES (?, ?, ?, ?, ?, ?)",
            (record.tenant, record.owner, record.id, record.version, record.status.value, text),
        )

    def forget(self, where: Partition, memory_id: str) -> ForgetOutcome:
        """Remove every version, the slot and the head; never decodes the record."""
        with self._pool.writing() as conn:
            head = self._head_row(conn, where, memory_id)
            versions = [
                int(v)
                for (v,) in conn.execute(
                    "SELECT version FROM versions WHERE tenant = ? AND owner = ? AND id = ? ORDER BY version",
                    (where.tenant, where.owner, memory_id),
                )
            ]
            if head is None and not versions:
                raise NotFound(f"memory {memory_id} not found", field="id")
            self._delete_memory(conn, where, memory_id)
            if head is not None:
                self._enqueue(conn, "REMOVE", None, removal_image(head), datetime.now(UTC))
        last_version = head.version if head is not None else versions[-1]
        return forgotten(where, memory_id, versions, last_version)

    def delete_by_id(self, where: Partition, memory_id: str) -> ForgetOutcome:
        """Admin delete; ``forget`` never decodes a record, so it is the same operation."""
        return self.forget(where, memory_id)

    @staticmethod
    def _delete_memory(conn: sqlite3.Connection, where: Partition, memory_id: str) -> int:
        key = (where.tenant, where.owner, memory_id)
        removed = conn.execute("DELETE FROM versions WHERE tenant = ? AND owner = ? AND id = ?", key).rowcount
        removed += conn.execute("DELETE FROM slots WHERE tenant = ? AND owner = ? AND id = ?", key).rowcount
        conn.execute("DELETE FROM heads WHERE tenant = ? AND owner = ? AND id = ?", key)
        return removed

    def purge_expired(self, now: datetime, limit: int = 500) -> int:
        """Delete up to ``limit`` expired memories (head, snapshots, slot); returns how many.

        DynamoDB's TTL does this in AWS; each removal is a REMOVE change marked ``by_ttl``.
        """
        with self._pool.writing() as conn:
            rows = [
                HeadRow(*row)
                for row in conn.execute(
                    f"SELECT {HEAD_COLUMNS} FROM heads WHERE expires_at IS NOT NULL AND expires_at <= ?"
                    " ORDER BY expires_at LIMIT ?",
                    (to_micros(now), limit),
                )
            ]
            for row in rows:
                self._delete_memory(conn, Partition(row.tenant, row.owner), row.id)
                self._enqueue(conn, "REMOVE", None, removal_image(row), now, by_ttl=True)
        return len(rows)

    def unindexed(self, before: datetime, now: datetime, limit: int = 500) -> list[MemoryRecord]:
        """Heads whose current version is not indexed and was written before ``before`` (what
        maintenance's ReconcileIndex re-indexes); expired and undecodable heads are left out."""
        found: list[MemoryRecord] = []
        with self._pool.reading() as conn:
            rows = conn.execute(
                f"SELECT {HEAD_COLUMNS} FROM heads WHERE updated_at < ? AND (expires_at IS NULL OR expires_at > ?)"
                " AND COALESCE(json_extract(record, '$.index_state'), 'pending') != 'indexed' ORDER BY updated_at LIMIT ?",
                (to_micros(before), to_micros(now), limit),
            ).fetchall()
        for row in (HeadRow(*columns) for columns in rows):
            try:
                found.append(self._decode(row.tenant, row.owner, row.id, row.record))
            except UndecodableRecord:
                continue
        return found

    def mark_indexed(self, where: Partition, memory_id: str, version: int, state: IndexState) -> bool:
        """Record the index state of a version; a head that moved on is left alone.

        Not a new version and not a change for the outbox: the indexer would only ignore it.
        """
        with self._pool.writing() as conn:
            row = conn.execute(
                "SELECT record FROM heads WHERE tenant = ? AND owner = ? AND id = ? AND version = ?",
                (where.tenant, where.owner, memory_id, version),
            ).fetchone()
            if row is None:
                return False
            try:
                data = json.loads(row[0])
            except (ValueError, RecursionError):
                return False
            if not isinstance(data, dict):
                return False
            data["index_state"] = state.value
            conn.execute(
                "UPDATE heads SET record = ? WHERE tenant = ? AND owner = ? AND id = ? AND version = ?",
                (json.dumps(data, ensure_ascii=False, separators=(",", ":")), where.tenant, where.owner, memory_id, version),
            )
        return True

    def purge_snapshots(self, where: Partition, memory_id: str) -> int:
        """Delete the snapshots and slot of a memory whose head expired; returns rows removed.

        ``purge_expired`` already removes them in the same transaction as the head, so this
        finds nothing then; it exists for the indexer, which calls it on every TTL removal.
        """
        with self._pool.writing() as conn:
            key = (where.tenant, where.owner, memory_id)
            removed = conn.execute("DELETE FROM versions WHERE tenant = ? AND owner = ? AND id = ?", key).rowcount
            removed += conn.execute("DELETE FROM slots WHERE tenant = ? AND owner = ? AND id = ?", key).rowcount
        return removed

    # ---- reads -----------------------------------------------------------------------------

    def get(self, where: Partition, memory_id: str, now: datetime, version: int | None = None) -> MemoryRecord:
        with self._pool.reading() as conn:
            return self._get(conn, where, memory_id, now, version)

    def _get(
        self, conn: sqlite3.Connection, where: Partition, memory_id: str, now: datetime, version: int | None
    ) -> MemoryRecord:
        head = self._live_head(conn, where, memory_id, now)
        if version is None or version == head.version:
            return self._decode(head.tenant, head.owner, head.id, head.record)
        if version < 1 or version > head.version:
            raise NotFound(f"memory {memory_id} has no version {version}", field="version")
        snapshot = conn.execute(
            "SELECT status, record FROM versions WHERE tenant = ? AND owner = ? AND id = ? AND version = ?",
            (where.tenant, where.owner, memory_id, version),
        ).fetchone()
        if snapshot is None:
            raise NotFound(f"memory {memory_id} has no version {version}", field="version")
        return self._snapshot(head, *snapshot)

    def _snapshot(self, head: HeadRow, status: str, text: str) -> MemoryRecord:
        # A snapshot lives as long as its head: its status is its own, its expiry the head's.
        record = self._decode(head.tenant, head.owner, head.id, text)
        try:
            return record.model_copy(update={"status": MemoryStatus(status), "expires_at": from_micros(head.expires_at)})
        except ValueError as exc:
            raise UndecodableRecord(head.id, f"status {status!r}") from exc

    def history(self, where: Partition, memory_id: str, now: datetime) -> list[MemoryRecord]:
        with self._pool.reading() as conn:
            head = self._live_head(conn, where, memory_id, now)
            snapshots = conn.execute(
                "SELECT status, record FROM versions WHERE tenant = ? AND owner = ? AND id = ? ORDER BY version",
                (where.tenant, where.owner, memory_id),
            ).fetchall()
        return [self._snapshot(head, status, text) for status, text in snapshots]

    def get_slot(self, where: Partition, kind: MemoryKind, key: str, now: datetime) -> MemoryRecord | None:
        """The live record holding a slot key, or None."""
        with self._pool.reading() as conn:
            slot = conn.execute(
                "SELECT id FROM slots WHERE tenant = ? AND owner = ? AND kind = ? AND key = ?",
                (where.tenant, where.owner, kind.value, key),
            ).fetchone()
            if slot is None:
                return None
            try:
                return self._get(conn, where, slot[0], now, None)
            except NotFound:
                return None

    def get_many(
        self, tenant: str, refs: Sequence[tuple[str, str]], skipped: list[str] | None = None
    ) -> dict[str, MemoryRecord]:
        """Heads by (owner, memory id) within one tenant; missing ones are absent.

        Expired heads are included (recall filters them); undecodable ones go to ``skipped``.
        """
        found: dict[str, MemoryRecord] = {}
        with self._pool.reading() as conn:
            for owner, memory_id in dict.fromkeys(refs):
                row = conn.execute(
                    "SELECT record FROM heads WHERE tenant = ? AND owner = ? AND id = ?", (tenant, owner, memory_id)
                ).fetchone()
                if row is None:
                    continue
                try:
                    found[memory_id] = self._decode(tenant, owner, memory_id, row[0])
                except UndecodableRecord as exc:
                    report_skipped(memory_id, exc.reason, skipped)
        return found

    def heads(
        self,
        where: Partition,
        kinds: Sequence[MemoryKind] | None = None,
        limit: int = 2000,
        skipped: list[str] | None = None,
    ) -> list[MemoryRecord]:
        """Up to ``limit`` heads of a partition, newest id first (the recall fallback scans these).

        Expired heads are included (recall filters them); undecodable ones go to ``skipped``.
        """
        sql = "SELECT id, record FROM heads WHERE tenant = ? AND owner = ?"
        params: list[Any] = [where.tenant, where.owner]
        if kinds:
            sql += f" AND kind IN ({', '.join('?' for _ in kinds)})"
            params.extend(k.value for k in kinds)
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(limit)
        with self._pool.reading() as conn:
            rows = conn.execute(sql, params).fetchall()
        return self._decodable(where, rows, skipped)

    def partitions(self, tenant: str | None = None, after: Partition | None = None, limit: int = 500) -> list[Partition]:
        """Distinct (tenant, owner) of the heads, in order, after ``after`` (the primary key's prefix)."""
        sql, params = "SELECT DISTINCT tenant, owner FROM heads WHERE 1 = 1", []
        if tenant is not None:
            sql += " AND tenant = ?"
            params.append(tenant)
        if after is not None:
            sql += " AND (tenant > ? OR (tenant = ? AND owner > ?))"
            params.extend([after.tenant, after.tenant, after.owner])
        sql += " ORDER BY tenant, owner LIMIT ?"
        with self._pool.reading() as conn:
            rows = conn.execute(sql, [*params, limit]).fetchall()
        return [Partition(row[0], row[1]) for row in rows]

    def _decodable(self, where: Partition, rows: Sequence[tuple[str, str]], skipped: list[str] | None) -> list[MemoryRecord]:
        records = []
        for memory_id, text in rows:
            try:
                records.append(self._decode(where.tenant, where.owner, memory_id, text))
            except UndecodableRecord as exc:
                report_skipped(memory_id, exc.reason, skipped)
        return records

    def list(
        self,
        where: Partition,
        now: datetime,
        kind: MemoryKind | None = None,
        status: MemoryStatus | None = None,
        cursor: str | None = None,
        limit: int = 20,
    ) -> MemoryPage:
        listing = listing_of(where, kind)
        start = decode_cursor(cursor, listing, by_kind=kind is not None)
        sql, params = listing_query(where, now, kind, status, start, limit + 1)  # one more says whether there is a next page
        with self._pool.reading() as conn:
            rows = conn.execute(sql, params).fetchall()
        page, more = rows[:limit], len(rows) > limit
        skipped: list[str] = []
        items = self._decodable(where, [(memory_id, text) for memory_id, text, _ in page], skipped)
        next_cursor = None
        if more and page:
            last_id, _, last_updated = page[-1]
            next_cursor = encode_cursor(listing, last_updated if kind is not None else None, last_id)
        return MemoryPage(items=items, next_cursor=next_cursor, skipped=skipped)

    # ---- the outbox ------------------------------------------------------------------------

    def outbox_batch(self, limit: int = 100) -> builtins.list[OutboxEntry]:
        """Undelivered changes, oldest first; dead letters are left out."""
        with self._pool.reading() as conn:
            rows = conn.execute(
                "SELECT seq, event_name, new_image, old_image, by_ttl, attempts, created_at FROM outbox"
                " WHERE dead = 0 ORDER BY seq LIMIT ?",
                (limit,),
            ).fetchall()
        return [
            OutboxEntry(
                seq=seq,
                event_name=event_name,
                new_image=load_image(new_image, seq),
                old_image=load_image(old_image, seq),
                by_ttl=bool(by_ttl),
                attempts=attempts,
                created_at=from_micros(created_at) or EPOCH,
            )
            for seq, event_name, new_image, old_image, by_ttl, attempts, created_at in rows
        ]

    def outbox_done(self, seqs: Sequence[int]) -> None:
        """Delete delivered entries."""
        if not seqs:
            return
        with self._pool.writing() as conn:
            for start in range(0, len(seqs), 500):  # stay under SQLite's bound-parameter limit
                chunk = list(seqs[start : start + 500])
                conn.execute(f"DELETE FROM outbox WHERE seq IN ({', '.join('?' for _ in chunk)})", chunk)

    def outbox_failed(self, seq: int, error: str, max_attempts: int) -> bool:
        """Count a failed delivery; after ``max_attempts`` the entry is a dead letter (True)."""
        with self._pool.writing() as conn:
            row = conn.execute(
                "UPDATE outbox SET attempts = attempts + 1, last_error = ?,"
                " dead = CASE WHEN attempts + 1 >= ? THEN 1 ELSE 0 END WHERE seq = ? RETURNING dead",
                (error[:2000], max_attempts, seq),
            ).fetchone()
        return bool(row and row[0])

    def revive_dead_letters(self) -> int:
        """Give every dead letter a fresh set of attempts (the runtime does it at start: a restart
        after fixing what failed retries them); returns how many."""
        with self._pool.writing() as conn:
            return conn.execute("UPDATE outbox SET dead = 0, attempts = 0 WHERE dead = 1").rowcount

    def outbox_stats(self, now: datetime) -> OutboxStats:
        with self._pool.reading() as conn:
            pending, dead, oldest = conn.execute(
                "SELECT COALESCE(SUM(dead = 0), 0), COALESCE(SUM(dead = 1), 0),"
                " MIN(CASE WHEN dead = 0 THEN created_at END) FROM outbox"
            ).fetchone()
        age = None if oldest is None else max(0.0, (to_micros(now) - oldest) / 1_000_000)
        return OutboxStats(pending=int(pending), dead=int(dead), oldest_pending_seconds=age)
