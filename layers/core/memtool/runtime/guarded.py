"""Outside dependencies behind their circuit breakers: a boto3 client, the vector index, a warehouse.

Each wrapper decides which failures count against the breaker (outages, never a caller's bad
request) and what an open circuit raises (the error the client's callers already handle). The
container hands each its dependency's breaker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memtool.tools.breakers import CircuitBreaker, GuardedClient

if TYPE_CHECKING:
    from memtool.retrieval.index import VectorIndex
    from memtool.sql.warehouse import Warehouse


def aws_client_behind(breaker: CircuitBreaker, aws_client: Any) -> GuardedClient:
    """A boto3 client whose calls go through the breaker: 5xx answers, throttling and the
    service's own outage codes count; a client error (a bad request) does not."""

    def counts(exc: BaseException) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code") or "")
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            return status >= 500 or code in _DEPENDENCY_ERROR_CODES
        return isinstance(exc, BotoCoreError)

    def open_error(exc, operation: str):
        from botocore.exceptions import ClientError

        return ClientError({"Error": {"Code": "CircuitOpen", "Message": str(exc)}}, operation)

    return GuardedClient(
        aws_client,
        breaker,
        counts=counts,
        open_error=open_error,
        unguarded=frozenset({"can_paginate", "get_paginator", "get_waiter"}),
    )


_DEPENDENCY_ERROR_CODES = frozenset(
    {
        "ThrottlingException",
        "ServiceUnavailableException",
        "InternalServerException",
        "ModelNotReadyException",
        "ModelTimeoutException",
        "ServiceQuotaExceededException",
    }
)


def index_behind(breaker: CircuitBreaker, index: VectorIndex) -> VectorIndex:
    """The vector index behind the breaker (an open circuit reads as IndexUnavailable)."""
    from memtool.retrieval.index import IndexUnavailable

    return GuardedClient(
        index,
        breaker,
        counts=lambda exc: isinstance(exc, IndexUnavailable),
        open_error=lambda exc, _name: IndexUnavailable(str(exc)),
    )


def warehouse_behind(breaker: CircuitBreaker, built: Warehouse) -> Warehouse:
    """A warehouse behind the breaker: only outages count, never a bad SQL."""
    from memtool.sql.warehouse import WarehouseError

    return GuardedClient(
        built,
        breaker,
        counts=lambda exc: isinstance(exc, WarehouseError) and exc.code in ("unavailable", "timeout"),
        open_error=lambda exc, _name: WarehouseError(f"{exc}; try again later", code="unavailable"),
    )
