"""Builds the adapters the settings choose, once per process (per Lambda container).

Handlers ask the container for services; tests install settings (or fakes) and reset it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from memtool.runtime.clock import Clock, SystemClock
from memtool.runtime.settings import get_settings

if TYPE_CHECKING:
    from memtool.flows.memory_write import MemoryService
    from memtool.memory.dynamodb_store import DynamoMemoryStore

_clock: Clock | None = None


def use_clock(clock: Clock | None) -> None:
    global _clock
    _clock = clock


def clock() -> Clock:
    return _clock or SystemClock()


@lru_cache(maxsize=1)
def memory_store() -> DynamoMemoryStore:
    from pynamodb.connection import Connection

    from memtool.memory.dynamodb_store import DynamoMemoryStore, memory_item_for

    settings = get_settings()
    model = memory_item_for(
        settings.memory_table,
        settings.region,
        host=settings.aws_endpoint_url,
        aws_access_key_id=settings.aws_access_key_id,
        aws_secret_access_key=settings.aws_secret_access_key,
    )
    connection = Connection(
        region=settings.region,
        host=settings.aws_endpoint_url,
        aws_access_key_id=settings.aws_access_key_id,
        aws_secret_access_key=settings.aws_secret_access_key,
        max_retry_attempts=3,
    )
    return DynamoMemoryStore(model, connection)


def memory_service() -> MemoryService:
    from memtool.flows.memory_write import MemoryService

    return MemoryService(memory_store(), clock(), get_settings())


@lru_cache(maxsize=1)
def idempotency_store():  # -> DynamoDBPersistenceLayer
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

    from memtool.runtime.aws import client

    settings = get_settings()
    return DynamoDBPersistenceLayer(
        table_name=settings.idempotency_table, boto3_client=client("dynamodb", settings)
    )


def reset() -> None:
    memory_store.cache_clear()
    idempotency_store.cache_clear()
