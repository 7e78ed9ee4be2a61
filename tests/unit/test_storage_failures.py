"""What a failing SQLite file means (memory.sqlite_tx): each failure from a real SQLite call where
one can be made here, as the domain error the API maps to its status, and what /health remembers.

A full disk is SQLite's own SQLITE_FULL, made with ``PRAGMA max_page_count`` on a real file. An
``OSError`` with ENOSPC cannot be made without filling a disk, so that one is a constructed
``OSError`` (the mapping reads only its errno).
"""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest

from memtool.api.http import status_for
from memtool.errors import InsufficientStorage, StoreCorrupt, StoreReadOnly
from memtool.memory.sqlite_store import SQLiteMemoryStore, check_database
from memtool.memory.sqlite_tx import (
    forget_problems,
    storage_failure,
    storage_problems,
    write_transaction,
)


def capped(path: Path) -> sqlite3.Connection:
    """A connection to a one-table file that may not grow past its size: SQLite answers SQLITE_FULL."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS t (x TEXT)")
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {pages}")
    return conn


def sqlite_error(run) -> sqlite3.Error:
    with pytest.raises(sqlite3.Error) as raised:
        run()
    return raised.value


def test_sqlite_full_is_insufficient_storage_507(tmp_path: Path) -> None:
    conn = capped(tmp_path / "full.sqlite3")
    error = sqlite_error(lambda: conn.execute("INSERT INTO t VALUES (?)", ("x" * 100_000,)))
    assert "database or disk is full" in str(error)
    failure = storage_failure(error)
    assert isinstance(failure, InsufficientStorage) and status_for(failure) == 507
    assert failure.to_body() == {
        "error": "insufficient_storage",
        "message": "the disk holding memtool's state is full; nothing of this request was stored. Free some space and retry",
    }


def test_enospc_and_a_read_only_file_system_are_507s() -> None:
    full = storage_failure(OSError(errno.ENOSPC, "No space left on device"))
    assert isinstance(full, InsufficientStorage) and status_for(full) == 507
    read_only = storage_failure(OSError(errno.EROFS, "Read-only file system"))
    assert isinstance(read_only, StoreReadOnly) and status_for(read_only) == 507
    assert "Read-only file system" in read_only.message
    assert storage_failure(OSError(errno.ECONNRESET, "reset")) is None


def test_a_read_only_database_a_garbage_file_and_other_errors(tmp_path: Path) -> None:
    path = tmp_path / "ro.sqlite3"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    read_only = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    failure = storage_failure(sqlite_error(lambda: read_only.execute("INSERT INTO t VALUES (1)")))
    assert isinstance(failure, StoreReadOnly) and failure.code == "store_read_only"

    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"\xde\xad\xbe\xef" * 1024)
    failure = storage_failure(sqlite_error(lambda: sqlite3.connect(garbage).execute("SELECT * FROM sqlite_schema").fetchall()))
    assert isinstance(failure, StoreCorrupt) and status_for(failure) == 500
    assert "file is not a database" in failure.message and str(tmp_path) not in failure.message

    assert storage_failure(sqlite_error(lambda: read_only.execute("SELEC 1"))) is None  # a bug stays a bug


def test_a_full_disk_rolls_the_whole_transaction_back_and_health_remembers_it_until_the_file_grows(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    conn = capped(path)
    conn.execute("INSERT INTO t VALUES ('kept')")  # fits in the first page
    with pytest.raises(InsufficientStorage), write_transaction(conn, path):
        conn.execute("INSERT INTO t VALUES ('small, fits')")
        conn.execute("INSERT INTO t VALUES (?)", ("x" * 100_000,))
    assert not conn.in_transaction
    assert [x for (x,) in conn.execute("SELECT x FROM t")] == ["kept"]  # nothing of it stayed
    assert storage_problems([path])[str(path)].state == "full"

    with write_transaction(conn, path):  # a write that needs no new page proves no space
        conn.execute("UPDATE t SET x = 'kept, updated'")
    assert storage_problems([path])[str(path)].state == "full"

    conn.execute("PRAGMA max_page_count = 1073741823")  # space freed
    with write_transaction(conn, path):
        conn.execute("INSERT INTO t VALUES (?)", ("x" * 100_000,))
    assert storage_problems([path]) == {}
    conn.close()


def test_the_start_up_check_names_the_file_and_forgets_it_once_it_passes(tmp_path: Path) -> None:
    path = tmp_path / "state" / "memtool.sqlite3"
    SQLiteMemoryStore(path).close()
    check_database(path, "the memory store")  # a sound file passes
    check_database(tmp_path / "absent.sqlite3", "the memory store")  # so does a missing one
    healthy = path.read_bytes()
    path.write_bytes(b"\xde\xad\xbe\xef" * (len(healthy) // 4))
    with pytest.raises(StoreCorrupt, match=f"^the memory store {path} is not a readable SQLite database"):
        check_database(path, "the memory store")
    path.write_bytes(healthy)
    check_database(path, "the memory store")
    assert storage_problems([path]) == {}
    forget_problems(path)
