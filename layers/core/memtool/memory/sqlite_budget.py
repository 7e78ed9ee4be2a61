"""Request budgets in the local runtime's SQLite file (beside the memory store): the twin of
``DynamoBudgetStore`` (memtool.memory.budget), with the same numbers.

One row per tenant and budget; a spend reads and writes it in one ``BEGIN IMMEDIATE``
transaction, so threads and processes spending one bucket at once never accept more than it
holds. Rows whose bucket is full again are swept a few at a time (DynamoDB's TTL does it in AWS).

The connections come from the store's pool (``memtool.memory.sqlite_store.ConnectionPool``, which
the composition root passes in: this module imports nothing the Lambda layer leaves out).
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol

from memtool.memory.budget import BudgetPolicy, Spend, expiry, micros, take


class Pool(Protocol):
    """What SQLiteBudgetStore needs of ``ConnectionPool``: write and read transactions, and close."""

    def writing(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def reading(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def close(self) -> None: ...

_TABLE = """CREATE TABLE IF NOT EXISTS request_budgets (
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    tat INTEGER NOT NULL,         -- microseconds since the epoch: when the bucket is full again
    spent INTEGER NOT NULL,       -- requests the bucket accepted
    expires_at INTEGER NOT NULL,  -- epoch seconds after which the row may go
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID"""
_BY_EXPIRY = "CREATE INDEX IF NOT EXISTS request_budgets_by_expiry ON request_budgets (expires_at)"
_SWEEP = 20


class SQLiteBudgetStore:
    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        with self._pool.writing() as conn:
            conn.execute(_TABLE)
            conn.execute(_BY_EXPIRY)

    def close(self) -> None:
        self._pool.close()

    def spend(self, tenant: str, name: str, policy: BudgetPolicy, now: datetime) -> Spend:
        at = micros(now)
        with self._pool.writing() as conn:
            row = conn.execute("SELECT tat FROM request_budgets WHERE tenant = ? AND name = ?", (tenant, name)).fetchone()
            tat, outcome = take(None if row is None else int(row[0]), at, policy)
            if tat is not None:
                conn.execute(
                    """INSERT INTO request_budgets (tenant, name, tat, spent, expires_at) VALUES (?, ?, ?, 1, ?)
                       ON CONFLICT (tenant, name) DO UPDATE SET
                           tat = excluded.tat, spent = spent + 1, expires_at = excluded.expires_at""",
                    (tenant, name, tat, expiry(at, policy)),
                )
            conn.execute(
                """DELETE FROM request_budgets WHERE (tenant, name) IN (
                       SELECT tenant, name FROM request_budgets WHERE expires_at < ? LIMIT ?)""",
                (at // 1_000_000, _SWEEP),
            )
        return outcome

    def stored(self, tenant: str, name: str) -> tuple[int, int] | None:
        """(tat, spent) of a bucket as stored, for inspection."""
        with self._pool.reading() as conn:
            row = conn.execute(
                "SELECT tat, spent FROM request_budgets WHERE tenant = ? AND name = ?", (tenant, name)
            ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))
