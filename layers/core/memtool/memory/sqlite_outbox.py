"""What the SQLite store's outbox carries (``memory.sqlite_store``): its entries and the images of
head changes, shaped like the records of a DynamoDB stream so the indexer reads both alike.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime

from memtool.memory.policy import policy_for
from memtool.memory.records import MemoryKind, MemoryRecord, MemoryStatus
from memtool.memory.sqlite_rows import HeadRow, from_micros

logger = logging.getLogger("memtool.memory")

HEAD = "head"


@dataclass(frozen=True)
class OutboxEntry:
    """One change to deliver to the indexer, shaped like a DynamoDB stream record."""

    seq: int
    event_name: str  # INSERT | MODIFY | REMOVE
    new_image: dict | None
    old_image: dict | None
    by_ttl: bool
    attempts: int
    created_at: datetime


@dataclass(frozen=True)
class OutboxStats:
    pending: int
    dead: int
    oldest_pending_seconds: float | None  # age of the oldest undelivered entry, vs now


# ---- images of head changes --------------------------------------------------------------------


def head_image(record_text: str) -> str:
    # The stored JSON goes into the image as is: no second serialisation to disagree with it.
    return '{"item_type":"head","record":' + record_text + "}"


def removal_image(row: HeadRow) -> str:
    """The old image of a removed head; a record that no longer decodes is described by its columns.

    The indexer needs the id, tenant, owner and version to purge a removed memory, and it
    ignores an image it cannot decode, so a damaged record must not leave its index entry behind.
    """
    try:
        MemoryRecord.model_validate(json.loads(row.record))
        return head_image(row.record)
    except (ValueError, TypeError, RecursionError):
        pass
    try:
        kind = MemoryKind(row.kind)
        status = MemoryStatus(row.status)
        tombstone = MemoryRecord(
            id=row.id,
            tenant=row.tenant,
            owner=row.owner,
            kind=kind,
            key=row.key,
            content="",
            scope=policy_for(kind).default_scope,
            status=status,
            version=row.version,
            created_at=from_micros(row.created_at),
            updated_at=from_micros(row.updated_at),
            expires_at=from_micros(row.expires_at),
        ).model_dump(mode="json")
    except (ValueError, TypeError):
        tombstone = {"id": row.id, "tenant": row.tenant, "owner": row.owner, "version": row.version}
    return json.dumps({"item_type": HEAD, "record": tombstone}, ensure_ascii=False, separators=(",", ":"))


def load_image(text: str | None, seq: int) -> dict | None:
    if text is None:
        return None
    try:
        image = json.loads(text)
    except (ValueError, RecursionError):
        logger.warning("outbox entry %s has an image that is not JSON", seq)
        return {}
    return image if isinstance(image, dict) else {}
