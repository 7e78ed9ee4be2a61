"""Raw stored state of each record-store adapter, for the contract suite's assertions.

The contract tests speak about behaviour through the ``MemoryStore`` port; what they need to see
or do beneath it (every stored item, an item planted by hand, the change feed the indexer reads)
differs per adapter, so each adapter gets one small class here with the same methods.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol

from memtool.memory.store import Partition
from memtool.runtime.aws import client
from memtool.settings import Settings

from tests.support import table_items

Poison = Literal["json", "kind"]
Change = tuple[str, int | None, int | None]  # (event name, old head version, new head version)


class StoredState(Protocol):
    def everything(self) -> list[Any]:
        """Every stored item or row, in a stable order."""

    def leftovers(self, memory_id: str) -> list[Any]:
        """What is still stored of one memory (heads, snapshots, slots; not the change feed)."""

    def has_head(self, where: Partition, memory_id: str) -> bool: ...

    def plant_expiry(self, where: Partition, memory_id: str, at: datetime) -> None:
        """Set a head's expiry by hand, beneath the store."""

    def poison(self, where: Partition, memory_id: str, how: Poison) -> None:
        """Damage a head so that it cannot be decoded: broken JSON, or a kind that does not exist."""

    def remove_head(self, where: Partition, memory_id: str) -> None:
        """Delete only the head, as DynamoDB's TTL process does."""

    def head_changes(self, memory_id: str) -> list[Change]:
        """The change feed of one memory's head, oldest first."""

    def head_images(self, memory_id: str) -> list[dict[str, Any]]:
        """The new images of one memory's head changes, as the indexer receives them."""

    def other_image(self, memory_id: str) -> dict[str, Any]:
        """An image of something that is not a head (a snapshot), which the indexer ignores."""


# ---- DynamoDB on moto -------------------------------------------------------------------------


def _key(where: Partition, memory_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"T#{where.tenant}#O#{where.owner}"}, "sk": {"S": f"M#{memory_id}"}}


@dataclass
class DynamoState:
    settings: Settings

    def everything(self) -> list[Any]:
        return sorted(table_items(self.settings), key=lambda i: (i["pk"]["S"], i["sk"]["S"]))

    def leftovers(self, memory_id: str) -> list[Any]:
        return [i for i in table_items(self.settings) if i.get("memory_id", {}).get("S") == memory_id]

    def has_head(self, where: Partition, memory_id: str) -> bool:
        item = client("dynamodb", self.settings).get_item(
            TableName=self.settings.memory_table, Key=_key(where, memory_id), ConsistentRead=True
        )
        return "Item" in item

    def plant_expiry(self, where: Partition, memory_id: str, at: datetime) -> None:
        client("dynamodb", self.settings).update_item(
            TableName=self.settings.memory_table,
            Key=_key(where, memory_id),
            UpdateExpression="SET expires_at = :at",
            ExpressionAttributeValues={":at": {"N": str(int(at.timestamp()))}},
        )

    def poison(self, where: Partition, memory_id: str, how: Poison) -> None:
        dynamodb = client("dynamodb", self.settings)
        item = dynamodb.get_item(TableName=self.settings.memory_table, Key=_key(where, memory_id), ConsistentRead=True)[
            "Item"
        ]
        if how == "json":
            item["value"] = {"S": '{"unit": broken'}
        else:
            item["kind"] = {"S": "not-a-kind"}
        dynamodb.put_item(TableName=self.settings.memory_table, Item=item)

    def remove_head(self, where: Partition, memory_id: str) -> None:
        client("dynamodb", self.settings).delete_item(TableName=self.settings.memory_table, Key=_key(where, memory_id))

    def _head_records(self, memory_id: str) -> list[dict[str, Any]]:
        return [r for r in stream_records(self.settings) if r["dynamodb"]["Keys"]["sk"]["S"] == f"M#{memory_id}"]

    def head_changes(self, memory_id: str) -> list[Change]:
        def version(image: dict[str, Any] | None) -> int | None:
            return None if image is None else int(image["version"]["N"])

        return [
            (r["eventName"], version(r["dynamodb"].get("OldImage")), version(r["dynamodb"].get("NewImage")))
            for r in self._head_records(memory_id)
        ]

    def head_images(self, memory_id: str) -> list[dict[str, Any]]:
        return [r["dynamodb"]["NewImage"] for r in self._head_records(memory_id) if "NewImage" in r["dynamodb"]]

    def other_image(self, memory_id: str) -> dict[str, Any]:
        return next(
            r["dynamodb"]["NewImage"]
            for r in stream_records(self.settings)
            if r["dynamodb"]["Keys"]["sk"]["S"].startswith(f"V#{memory_id}#")
        )


def stream_records(settings: Settings) -> list[dict[str, Any]]:
    """Every record of the memory table's stream so far (moto keeps them all)."""
    dynamodb = client("dynamodb", settings)
    streams = client("dynamodbstreams", settings)
    arn = dynamodb.describe_table(TableName=settings.memory_table)["Table"]["LatestStreamArn"]
    records = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records.extend(streams.get_records(ShardIterator=iterator, Limit=1000)["Records"])
    return records


# ---- SQLite -------------------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class SQLiteState:
    path: Path

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        # A connection of its own, beneath the store: what another process would see.
        with closing(sqlite3.connect(self.path, timeout=10, isolation_level=None)) as conn:
            yield conn

    def everything(self) -> list[Any]:
        with self._db() as db:
            return [
                (table, row)
                for table in ("heads", "versions", "slots", "outbox")
                for row in db.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3")  # noqa: S608 - fixed names
            ]

    def leftovers(self, memory_id: str) -> list[Any]:
        with self._db() as db:
            return [
                (table, row)
                for table in ("heads", "versions", "slots")
                for row in db.execute(f"SELECT * FROM {table} WHERE id = ?", (memory_id,))  # noqa: S608
            ]

    def has_head(self, where: Partition, memory_id: str) -> bool:
        with self._db() as db:
            row = db.execute(
                "SELECT 1 FROM heads WHERE tenant = ? AND owner = ? AND id = ?", (where.tenant, where.owner, memory_id)
            ).fetchone()
        return row is not None

    def plant_expiry(self, where: Partition, memory_id: str, at: datetime) -> None:
        with self._db() as db:
            (text,) = db.execute(
                "SELECT record FROM heads WHERE tenant = ? AND owner = ? AND id = ?",
                (where.tenant, where.owner, memory_id),
            ).fetchone()
            record = json.loads(text)
            record["expires_at"] = at.isoformat()
            db.execute(
                "UPDATE heads SET expires_at = ?, record = ? WHERE tenant = ? AND owner = ? AND id = ?",
                ((at - _EPOCH) // timedelta(microseconds=1), json.dumps(record), where.tenant, where.owner, memory_id),
            )

    def poison(self, where: Partition, memory_id: str, how: Poison) -> None:
        with self._db() as db:
            if how == "json":
                text = '{"id": "' + memory_id + '", "value": broken'
            else:
                (stored,) = db.execute(
                    "SELECT record FROM heads WHERE tenant = ? AND owner = ? AND id = ?",
                    (where.tenant, where.owner, memory_id),
                ).fetchone()
                text = json.dumps({**json.loads(stored), "kind": "not-a-kind"})
            db.execute(
                "UPDATE heads SET record = ? WHERE tenant = ? AND owner = ? AND id = ?",
                (text, where.tenant, where.owner, memory_id),
            )

    def remove_head(self, where: Partition, memory_id: str) -> None:
        with self._db() as db:
            db.execute(
                "DELETE FROM heads WHERE tenant = ? AND owner = ? AND id = ?", (where.tenant, where.owner, memory_id)
            )

    def _outbox(self, memory_id: str) -> list[tuple[str, dict | None, dict | None]]:
        with self._db() as db:
            rows = db.execute("SELECT event_name, new_image, old_image FROM outbox ORDER BY seq").fetchall()
        changes = []
        for event_name, new_text, old_text in rows:
            new, old = (None if t is None else json.loads(t) for t in (new_text, old_text))
            if (new or old or {}).get("record", {}).get("id") == memory_id:
                changes.append((event_name, new, old))
        return changes

    def head_changes(self, memory_id: str) -> list[Change]:
        def version(image: dict | None) -> int | None:
            return None if image is None else int(image["record"]["version"])

        return [(event, version(old), version(new)) for event, new, old in self._outbox(memory_id)]

    def head_images(self, memory_id: str) -> list[dict[str, Any]]:
        return [new for _, new, _ in self._outbox(memory_id) if new is not None]

    def other_image(self, memory_id: str) -> dict[str, Any]:
        with self._db() as db:
            (text,) = db.execute("SELECT record FROM versions WHERE id = ? ORDER BY version", (memory_id,)).fetchone()
        return {"item_type": "version", "record": json.loads(text)}
