"""SQLite transactions as every SQLite adapter here takes them (the store, the diagnose queue), and
what a failing file means.

A full disk, a read-only file and a damaged page reach the adapters as ``sqlite3`` errors (or an
``OSError``), which would answer ``500 internal_error`` and leave ``/health`` saying ok. Here they
become the domain's errors (``InsufficientStorage``, ``StoreReadOnly``, ``StoreCorrupt``) at the
one place every transaction passes, and each is noted against its file, so the local runtime's
``/health`` reports the store degraded: a full or read-only file until a write to it succeeds
again, a damaged one until the runtime is restarted on a file that passes ``PRAGMA quick_check``.
"Succeeds again" means, for a full disk, a write that grew the file past its size at the failure:
small writes (a delete, an update in place) go on succeeding on a full disk and prove nothing.
"""

from __future__ import annotations

import errno
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from memtool.errors import InsufficientStorage, MemtoolError, StoreCorrupt, StoreReadOnly

# SQLite's primary result codes (the low byte of an extended code), as sqlite3.h numbers them.
_SQLITE_READONLY, _SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_CANTOPEN, _SQLITE_NOTADB = 8, 11, 13, 14, 26
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}
_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS}


# ---- what a failure means ------------------------------------------------------------------------


def storage_failure(error: BaseException) -> MemtoolError | None:
    """The domain error a failed SQLite call (or file write) stands for; None for any other error.

    The messages carry no file path: they may go to an API caller. The start-up check, which
    speaks to the operator, names the file itself (``memtool.memory.sqlite_store.check_database``).
    """
    if isinstance(error, MemtoolError):
        return error
    if isinstance(error, sqlite3.Error):
        code = getattr(error, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        text = str(error)
        lowered = text.lower()
        if primary == _SQLITE_FULL or "database or disk is full" in lowered:
            return InsufficientStorage(
                "the disk holding memtool's state is full; nothing of this request was stored. Free some space and retry"
            )
        if primary in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or "malformed" in lowered or "not a database" in lowered:
            return StoreCorrupt(
                f"memtool's state database is damaged ({text}); this request could not be completed. The operator "
                "should stop memtool and restore the file from a copy, or move it away to start with an empty store"
            )
        if primary in (_SQLITE_READONLY, _SQLITE_CANTOPEN) or "readonly database" in lowered:
            return StoreReadOnly(
                f"memtool's state database cannot be written ({text}); nothing of this request was stored. The operator "
                "should make the state folder and its files writable"
            )
        return None
    if isinstance(error, OSError) and error.errno in _NO_SPACE:
        return InsufficientStorage(
            "the disk holding memtool's state is full; nothing of this request was stored. Free some space and retry"
        )
    if isinstance(error, OSError) and error.errno in _NOT_WRITABLE:
        return StoreReadOnly(
            f"memtool's state cannot be written ({error.strerror}); nothing of this request was stored. The operator "
            "should make the state folder and its files writable"
        )
    return None


# ---- what /health says about each file -------------------------------------------------------------


@dataclass(frozen=True)
class StorageProblem:
    """The last failure of one database file: ``full``, ``read_only`` or ``corrupt``, since when;
    for ``full``, the file's size in pages then (None when it could not be read)."""

    state: str
    detail: str
    since: float
    pages: int | None = None


_STATES = {InsufficientStorage: "full", StoreReadOnly: "read_only", StoreCorrupt: "corrupt"}
_problems: dict[str, StorageProblem] = {}
_problems_lock = threading.Lock()


def _key(path: Path | str) -> str:
    return str(Path(path).resolve())


def note_failure(path: Path | str | None, failure: MemtoolError, pages: int | None = None) -> None:
    """Remember that ``path`` failed this way; a damaged file stays damaged whatever comes after."""
    state = _STATES.get(type(failure))
    if path is None or state is None:
        return
    key = _key(path)
    with _problems_lock:
        known = _problems.get(key)
        if known is not None and known.state == "corrupt" and state != "corrupt":
            return
        if known is None or known.state != state or (pages is not None and (known.pages or 0) < pages):
            _problems[key] = StorageProblem(state, failure.message, time.time(), pages)


def note_write_ok(path: Path | str | None, pages: int | None = None) -> None:
    """A write to ``path`` committed: the file is writable; and when it now has more than the
    ``pages`` it had when the disk was full, there is space again."""
    if path is None or not _problems:
        return
    key = _key(path)
    with _problems_lock:
        known = _problems.get(key)
        if known is None or known.state == "corrupt":
            return
        if known.state == "full" and (pages is None or known.pages is None or pages <= known.pages):
            return
        del _problems[key]


def _pages(conn: sqlite3.Connection) -> int | None:
    """The database's size in pages (the header's count, as the last commit left it)."""
    try:
        row = conn.execute("PRAGMA page_count").fetchone()
    except sqlite3.Error:
        return None
    return int(row[0]) if row else None


def forget_problems(path: Path | str) -> None:
    """The file passed the start-up check (restored, moved away, or never damaged)."""
    with _problems_lock:
        _problems.pop(_key(path), None)


def storage_problems(paths: Iterable[Path | str]) -> dict[str, StorageProblem]:
    """The known problems of these files, by the path as given."""
    with _problems_lock:
        return {str(path): _problems[_key(path)] for path in paths if _key(path) in _problems}


def _file_of(conn: sqlite3.Connection) -> str | None:
    """The main database's file (PRAGMA database_list reads no page, so it answers on a damaged file)."""
    try:
        for _, name, file in conn.execute("PRAGMA database_list").fetchall():
            if name == "main":
                return file or None
    except sqlite3.Error:
        return None
    return None


@contextmanager
def storage_errors(path: Path | str | None = None, conn: sqlite3.Connection | None = None) -> Iterator[None]:
    """Inside: a failure that means a full, read-only or damaged file is raised as its domain error
    (the original as its cause) and noted against the file for /health."""
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        failure = storage_failure(exc)
        if failure is None:
            raise
        if path is None and conn is not None:
            path = _file_of(conn)
        pages = _pages(conn) if conn is not None and isinstance(failure, InsufficientStorage) else None
        note_failure(path, failure, pages)
        raise failure from exc


# ---- transactions --------------------------------------------------------------------------------


def _rollback(conn: sqlite3.Connection) -> None:
    # A failed ROLLBACK (a damaged file) must not replace the error that caused it; the pool then
    # finds the connection still in a transaction and closes it instead of reusing it.
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


@contextmanager
def write_transaction(conn: sqlite3.Connection, path: Path | str | None = None) -> Iterator[sqlite3.Connection]:
    """One write transaction; BEGIN IMMEDIATE takes the write lock before the first read, so a
    read-then-write never races another writer (thread or process).

    All or nothing: a statement or the COMMIT that fails (a full disk included) rolls the whole
    transaction back, so a half-written change never stays. ``path`` names the file for /health
    (else the connection is asked).
    """
    with storage_errors(path, conn):
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
    if _problems:  # only while some file is in trouble: two PRAGMAs on the header, no table read
        note_write_ok(path if path is not None else _file_of(conn), _pages(conn))


@contextmanager
def read_transaction(conn: sqlite3.Connection, path: Path | str | None = None) -> Iterator[sqlite3.Connection]:
    """One read transaction: every SELECT in it sees the same snapshot."""
    with storage_errors(path, conn):
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            _rollback(conn)
