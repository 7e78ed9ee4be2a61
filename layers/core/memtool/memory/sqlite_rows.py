"""The memory store's tables on SQLite and the values in their rows (``memory.sqlite_store``).

Tables (schema version in ``PRAGMA user_version``):

    heads     the current version of every memory (tenant, owner, id), with the columns reads
              filter and sort on, and the record as JSON
    versions  a snapshot of every version, for history; ``status`` marks superseded ones
    slots     (tenant, owner, kind, key) -> memory id, for slot-like memories
    outbox    one change per new head, new version or removal, written in the same
              transaction as the change: the local stand-in for the DynamoDB stream

Times are stored as exact microseconds since the epoch (UTC). A listing's cursor is opaque to the
caller: the position of the last item returned, valid only in the listing that issued it.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, overload

from memtool.errors import ValidationFailed
from memtool.memory.records import MemoryKind, MemoryStatus
from memtool.memory.store import Partition

SCHEMA_VERSION = 1

SCHEMA = [
    """CREATE TABLE heads (
        tenant TEXT NOT NULL,
        owner TEXT NOT NULL,
        id TEXT NOT NULL,
        kind TEXT NOT NULL,
        key TEXT,
        status TEXT NOT NULL,
        version INTEGER NOT NULL,
        created_at INTEGER NOT NULL,  -- microseconds since the epoch (UTC), exact and sortable
        updated_at INTEGER NOT NULL,
        expires_at INTEGER,           -- NULL: never expires
        record TEXT NOT NULL,         -- MemoryRecord.model_dump(mode="json") as JSON text
        PRIMARY KEY (tenant, owner, id)
    ) WITHOUT ROWID""",
    "CREATE INDEX heads_by_kind ON heads (tenant, owner, kind, updated_at, id)",
    "CREATE INDEX heads_by_expiry ON heads (expires_at) WHERE expires_at IS NOT NULL",
    """CREATE TABLE versions (
        tenant TEXT NOT NULL,
        owner TEXT NOT NULL,
        id TEXT NOT NULL,
        version INTEGER NOT NULL,
        status TEXT NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (tenant, owner, id, version)
    ) WITHOUT ROWID""",
    """CREATE TABLE slots (
        tenant TEXT NOT NULL,
        owner TEXT NOT NULL,
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        id TEXT NOT NULL,
        PRIMARY KEY (tenant, owner, kind, key)
    ) WITHOUT ROWID""",
    "CREATE INDEX slots_by_memory ON slots (tenant, owner, id)",
    # AUTOINCREMENT: a delivered (deleted) entry's seq is never handed out again.
    """CREATE TABLE outbox (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        event_name TEXT NOT NULL CHECK (event_name IN ('INSERT', 'MODIFY', 'REMOVE')),
        new_image TEXT,
        old_image TEXT,
        by_ttl INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        dead INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        created_at INTEGER NOT NULL
    )""",
    "CREATE INDEX outbox_pending ON outbox (dead, seq)",
]


# ---- the head row -----------------------------------------------------------------------------


@dataclass(frozen=True)
class HeadRow:
    tenant: str
    owner: str
    id: str
    kind: str
    key: str | None
    status: str
    version: int
    created_at: int
    updated_at: int
    expires_at: int | None
    record: str


HEAD_COLUMNS = "tenant, owner, id, kind, key, status, version, created_at, updated_at, expires_at, record"


# ---- time and cursors --------------------------------------------------------------------------

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(at: datetime) -> int:
    """Exact microseconds since the epoch (a float timestamp would round)."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return (at - EPOCH) // _MICROSECOND


@overload
def from_micros(micros: int) -> datetime: ...
@overload
def from_micros(micros: None) -> None: ...
@overload
def from_micros(micros: int | None) -> datetime | None: ...
def from_micros(micros: int | None) -> datetime | None:
    return None if micros is None else EPOCH + timedelta(microseconds=micros)


def has_expired(expires_micros: int | None, now: datetime) -> bool:
    return expires_micros is not None and expires_micros <= to_micros(now)


def listing_of(where: Partition, kind: MemoryKind | None) -> str:
    base = f"T#{where.tenant}#O#{where.owner}"
    return base if kind is None else f"{base}#K#{kind.value}"


def encode_cursor(listing: str, updated_at: int | None, memory_id: str) -> str:
    position: dict[str, Any] = {"l": listing, "i": memory_id}
    if updated_at is not None:
        position["u"] = updated_at
    raw = json.dumps(position, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


_CURSOR_ID = re.compile(r"[A-Za-z0-9_]{1,128}", re.ASCII)
_CURSOR_LIMIT = 2**63 - 1  # SQLite's INTEGER range: anything wider cannot be bound


def decode_cursor(cursor: str | None, listing: str, by_kind: bool) -> tuple[int | None, str] | None:
    """An opaque cursor is only honoured inside the listing that issued it.

    Anything but exactly what ``encode_cursor`` writes for this listing is refused as a
    ValidationFailed on ``cursor``: a crafted one must never reach the query (an integer beyond
    64 bits or a lone surrogate would fail there as a server error).
    """
    if not cursor:
        return None
    refused = ValidationFailed("cursor is not one this API issued", field="cursor")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        position = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, TypeError, UnicodeError, RecursionError, OverflowError) as exc:
        raise refused from exc
    expected = {"l", "i", "u"} if by_kind else {"l", "i"}
    if not isinstance(position, dict) or set(position) != expected:
        raise refused
    issued_for, memory_id, updated_at = position["l"], position["i"], position.get("u")
    if not isinstance(issued_for, str) or not isinstance(memory_id, str) or not _CURSOR_ID.fullmatch(memory_id):
        raise refused
    if by_kind and (
        not isinstance(updated_at, int) or isinstance(updated_at, bool) or not -_CURSOR_LIMIT <= updated_at <= _CURSOR_LIMIT
    ):
        raise refused
    if issued_for != listing:
        raise ValidationFailed("cursor belongs to another listing", field="cursor")
    return updated_at, memory_id


def listing_query(
    where: Partition,
    now: datetime,
    kind: MemoryKind | None,
    status: MemoryStatus | None,
    start: tuple[int | None, str] | None,
    limit: int,
) -> tuple[str, list[Any]]:
    """The SELECT of one page of a listing, after ``start`` (a decoded cursor), at most ``limit`` rows.

    By kind: newest ``updated_at`` first (DynamoDB's by_kind index); otherwise by id descending,
    which is creation order (the head query on ``M#<id>``). Expired heads are left out.
    """
    sql = "SELECT id, record, updated_at FROM heads WHERE tenant = ? AND owner = ?"
    params: list[Any] = [where.tenant, where.owner]
    if kind is not None:
        sql += " AND kind = ?"
        params.append(kind.value)
    sql += " AND (expires_at IS NULL OR expires_at > ?)"
    params.append(to_micros(now))
    if status is not None:
        sql += " AND status = ?"
        params.append(status.value)
    if kind is not None:
        if start is not None:
            sql += " AND (updated_at, id) < (?, ?)"
            params.extend(start)
        sql += " ORDER BY updated_at DESC, id DESC"
    else:
        if start is not None:
            sql += " AND id < ?"
            params.append(start[1])
        sql += " ORDER BY id DESC"
    sql += " LIMIT ?"
    params.append(limit)
    return sql, params
