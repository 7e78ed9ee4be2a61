"""Powertools idempotency records in the local runtime's SQLite file (beside the memory store).

The same contract as Powertools' ``DynamoDBPersistenceLayer``: putting an in-progress record
succeeds only when no record exists, the existing one has expired, or it is in progress and its
in-progress expiry (the caller's deadline) has passed; otherwise the existing record comes back in
``IdempotencyItemAlreadyExistsError``. DynamoDB does that with one conditional put; here the check
and the write share one ``BEGIN IMMEDIATE`` transaction, so concurrent callers with the same key
(threads or processes) cannot both win.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from aws_lambda_powertools.utilities.idempotency import BasePersistenceLayer
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import STATUS_CONSTANTS, DataRecord

from memtool.memory.sqlite_store import ConnectionPool

_TABLE = """CREATE TABLE IF NOT EXISTS idempotency (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    expiration INTEGER NOT NULL,       -- epoch seconds, as Powertools computes it
    in_progress_expiration INTEGER,    -- epoch milliseconds; NULL when the deadline is unknown
    data TEXT,
    validation TEXT
) WITHOUT ROWID"""
_BY_EXPIRY = "CREATE INDEX IF NOT EXISTS idempotency_by_expiry ON idempotency (expiration)"
_COLUMNS = "id, status, expiration, in_progress_expiration, data, validation"

# Expired records are deleted a few at a time on every put (DynamoDB's TTL does it in AWS),
# so the table stays as large as the traffic of one expiry window.
_SWEEP = 100


class SQLiteIdempotencyLayer(BasePersistenceLayer):
    """Idempotency records in their own table of an SQLite file; thread- and process-safe."""

    def __init__(self, path: Path, pool_size: int = 4) -> None:
        super().__init__()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._pool = ConnectionPool(path, pool_size)
        with self._pool.writing() as conn:
            conn.execute(_TABLE)
            conn.execute(_BY_EXPIRY)

    def close(self) -> None:
        self._pool.close()

    @staticmethod
    def _record(row: tuple) -> DataRecord:
        key, status, expiration, in_progress_expiration, data, validation = row
        return DataRecord(
            idempotency_key=key,
            status=status,
            expiry_timestamp=expiration,
            in_progress_expiry_timestamp=in_progress_expiration,
            response_data=data or "",
            payload_hash=validation or "",
        )

    def _get_record(self, idempotency_key: str) -> DataRecord:
        with self._pool.reading() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM idempotency WHERE id = ?", (idempotency_key,)).fetchone()
        if row is None:
            raise IdempotencyItemNotFoundError
        return self._record(row)

    def _put_record(self, data_record: DataRecord) -> None:
        now = dt.datetime.now()
        now_seconds, now_millis = int(now.timestamp()), int(now.timestamp() * 1000)
        with self._pool.writing() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM idempotency WHERE id = ?", (data_record.idempotency_key,)
            ).fetchone()
            if row is not None and not _replaceable(row, now_seconds, now_millis):
                existing = self._record(row)
                # As DynamoDB's layer does with ReturnValuesOnConditionCheckFailure: a different
                # payload under the same key is a validation error, else hand the record back.
                self._validate_payload(data_payload=data_record, stored_data_record=existing)
                self._save_to_cache(data_record=existing)
                raise IdempotencyItemAlreadyExistsError(old_data_record=existing)
            conn.execute(
                f"INSERT OR REPLACE INTO idempotency ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    data_record.idempotency_key,
                    data_record.status,
                    data_record.expiry_timestamp,
                    data_record.in_progress_expiry_timestamp,
                    None,
                    data_record.payload_hash if self.payload_validation_enabled and data_record.payload_hash else None,
                ),
            )
            conn.execute(
                "DELETE FROM idempotency WHERE id IN"
                " (SELECT id FROM idempotency WHERE expiration < ? AND id != ? LIMIT ?)",
                (now_seconds, data_record.idempotency_key, _SWEEP),
            )

    def _update_record(self, data_record: DataRecord) -> None:
        with self._pool.writing() as conn:
            if self.payload_validation_enabled:
                conn.execute(
                    "UPDATE idempotency SET data = ?, expiration = ?, status = ?, validation = ? WHERE id = ?",
                    (
                        data_record.response_data,
                        data_record.expiry_timestamp,
                        data_record.status,
                        data_record.payload_hash,
                        data_record.idempotency_key,
                    ),
                )
            else:
                conn.execute(
                    "UPDATE idempotency SET data = ?, expiration = ?, status = ? WHERE id = ?",
                    (data_record.response_data, data_record.expiry_timestamp, data_record.status, data_record.idempotency_key),
                )

    def _delete_record(self, data_record: DataRecord) -> None:
        with self._pool.writing() as conn:
            conn.execute("DELETE FROM idempotency WHERE id = ?", (data_record.idempotency_key,))


def _replaceable(row: tuple, now_seconds: int, now_millis: int) -> bool:
    """DynamoDBPersistenceLayer's put condition, for a record that exists."""
    _, status, expiration, in_progress_expiration, _, _ = row
    if expiration is not None and expiration < now_seconds:
        return True
    return (
        status == STATUS_CONSTANTS["INPROGRESS"]
        and in_progress_expiration is not None
        and in_progress_expiration < now_millis
    )
