"""Drains moto's DynamoDB stream into the real indexer handler, as Lambda's event source would.

Records are delivered in shard order in batches shaped like Lambda's DynamoDB stream events;
records the handler reports as failed (partial batch response) are delivered again on the next
drain, up to ``max_attempts``, then set aside as dead letters (the local stand-in for the DLQ).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memtool.runtime.lambda_context import LocalLambdaContext


@dataclass
class StreamDrainer:
    dynamodb: Any
    streams: Any
    table_name: str
    handler: Any  # the indexer's lambda_handler
    batch_size: int = 100
    max_attempts: int = 3
    delivered: int = 0
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    _iterators: dict[str, str] = field(default_factory=dict)
    _retry: list[tuple[dict[str, Any], int]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _arn: str | None = None

    def _stream_arn(self) -> str:
        if self._arn is None:
            self._arn = self.dynamodb.describe_table(TableName=self.table_name)["Table"]["LatestStreamArn"]
        return self._arn

    def _poll(self) -> list[dict[str, Any]]:
        arn = self._stream_arn()
        records: list[dict[str, Any]] = []
        for shard in self.streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
            shard_id = shard["ShardId"]
            iterator = self._iterators.get(shard_id) or self.streams.get_shard_iterator(
                StreamArn=arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            while iterator:
                page = self.streams.get_records(ShardIterator=iterator, Limit=1000)
                records.extend(self._lambda_record(r, arn) for r in page["Records"])
                next_iterator = page.get("NextShardIterator")
                if not page["Records"] or next_iterator is None:
                    iterator = next_iterator
                    break
                iterator = next_iterator
            if iterator:
                self._iterators[shard_id] = iterator
        return records

    @staticmethod
    def _lambda_record(record: dict[str, Any], arn: str) -> dict[str, Any]:
        event = dict(record)
        dynamodb = dict(event["dynamodb"])
        created = dynamodb.get("ApproximateCreationDateTime")
        if isinstance(created, datetime):
            dynamodb["ApproximateCreationDateTime"] = int(created.timestamp())
        event["dynamodb"] = dynamodb
        event["eventSourceARN"] = arn
        return event

    def drain(self) -> int:
        """Deliver everything new (and retries) to the handler; returns how many records it took."""
        with self._lock:
            pending = [(r, n) for r, n in self._retry] + [(r, 0) for r in self._poll()]
            self._retry = []
            taken = 0
            for start in range(0, len(pending), self.batch_size):
                batch = pending[start : start + self.batch_size]
                response = self.handler({"Records": [r for r, _ in batch]}, LocalLambdaContext(function_name="IndexerFunction"))
                failed = {f["itemIdentifier"] for f in (response or {}).get("batchItemFailures", [])}
                for record, attempts in batch:
                    if record["dynamodb"]["SequenceNumber"] in failed:
                        if attempts + 1 >= self.max_attempts:
                            self.dead_letters.append(record)
                        else:
                            self._retry.append((record, attempts + 1))
                    else:
                        taken += 1
            self.delivered += taken
            return taken


@dataclass
class BackgroundDrain:
    """Runs a drainer every ``interval`` seconds until stopped (the local runtime's event source)."""

    drainer: StreamDrainer
    interval: float = 0.25
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> BackgroundDrain:
        self._thread = threading.Thread(target=self._run, name="memtool-stream", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.drainer.drain()
            except Exception as exc:  # noqa: BLE001 - keep draining; /health shows the last errors
                self.errors = [*self.errors[-9:], f"{type(exc).__name__}: {exc}"]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.drainer.drain()
