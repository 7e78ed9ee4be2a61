"""A tenant's request budget: a token bucket in the record store, spent atomically.

The bucket is kept as GCRA (the generic cell rate algorithm): one number per tenant and budget,
``tat``, the time at which the bucket is full again. With a sustained rate of ``per_minute``
requests (one every ``interval = 60 s / per_minute``) and room for ``burst`` at once, a request at
``now`` is accepted when

    max(tat, now) <= now + (burst - 1) * interval

and moves ``tat`` to ``max(tat, now) + interval``; refused, it may be retried after
``max(tat, now) - (now + (burst - 1) * interval)``. A bucket never used, or idle since its ``tat``,
is full. Times are whole microseconds since the epoch, so every store computes the same numbers.

DynamoDB (``DynamoBudgetStore``): one item per tenant and budget, ``pk = B#<tenant>``,
``sk = budget#<name>``, beside (never inside) the memory partitions ``T#<tenant>#O#<owner>``. It
has no ``item_type``, so the indexer, the maintenance scan and every listing pass it by, and its
``expires_at`` (the table's TTL) is when the bucket is full again: DynamoDB may then remove it.
It is spent with conditional UpdateItems, each atomic on the item, so Lambdas spending one bucket
at once never accept more than it holds: an idle bucket is restarted
(``attribute_not_exists(tat) OR tat <= :now``), a busy one with room advanced
(``tat > :now AND tat <= :limit``); the old item a failed condition returns says which, or, over
the limit, how long to wait. ``spent`` counts the requests the bucket accepted.

The SQLite twin (``memtool.memory.sqlite_budget``, the local runtime's file) reads and writes the
same numbers in one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

MICROS = 1_000_000
# An item may go once its bucket is full again; DynamoDB's TTL removes it some time after that.
EXPIRY_MARGIN_SECONDS = 60
# Each attempt is one or two conditional updates; another attempt is needed only when the bucket
# changed between them (restarted by another request, or removed by TTL).
ATTEMPTS = 3


@dataclass(frozen=True)
class BudgetPolicy:
    """``per_minute`` requests a minute, sustained, and up to ``burst`` at once."""

    per_minute: int
    burst: int

    def __post_init__(self) -> None:
        if self.per_minute < 1 or self.burst < 1:
            raise ValueError("a budget needs at least 1 request per minute and a burst of at least 1")

    @property
    def interval_us(self) -> int:
        """Microseconds between two requests at the sustained rate (rounded up: never more than the rate)."""
        return -(-60 * MICROS // self.per_minute)

    def describe(self) -> dict[str, object]:
        return {"per_minute": self.per_minute, "burst": self.burst}


@dataclass(frozen=True)
class Spend:
    """One request's outcome: accepted (and what is left), or refused (and how long to wait)."""

    accepted: bool
    remaining: int  # requests the bucket still holds after this one (0 when refused)
    retry_after_seconds: int  # 0 when accepted; else whole seconds, at least 1


class BudgetStore(Protocol):
    def spend(self, tenant: str, name: str, policy: BudgetPolicy, now: datetime) -> Spend:
        """Take one request from the tenant's bucket ``name``, or refuse it when the bucket is empty."""

    def close(self) -> None: ...


def micros(moment: datetime) -> int:
    return int(moment.timestamp() * MICROS)


def take(tat: int | None, now: int, policy: BudgetPolicy) -> tuple[int | None, Spend]:
    """The bucket's new ``tat`` and the outcome of one request at ``now`` (``None``: refused, unchanged)."""
    interval = policy.interval_us
    start = now if tat is None else max(tat, now)
    limit = now + (policy.burst - 1) * interval
    if start > limit:
        return None, Spend(False, 0, wait_seconds(start - limit))
    new = start + interval
    return new, Spend(True, remaining_after(new, now, policy), 0)


def remaining_after(tat: int, now: int, policy: BudgetPolicy) -> int:
    return max(0, (now + policy.burst * policy.interval_us - tat) // policy.interval_us)


def wait_seconds(micro_seconds: int) -> int:
    return max(1, math.ceil(micro_seconds / MICROS))


def expiry(now: int, policy: BudgetPolicy) -> int:
    """Epoch seconds by which the bucket is full again whatever this request does (its TTL)."""
    return math.ceil((now + policy.burst * policy.interval_us) / MICROS) + EXPIRY_MARGIN_SECONDS


def budget_key(tenant: str, name: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": f"B#{tenant}"}, "sk": {"S": f"budget#{name}"}}


class DynamoBudgetStore:
    """Buckets as items of the memory table, spent with conditional UpdateItems (one per request
    when the bucket is idle or empty, two when it is busy with room)."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self._dynamodb = dynamodb  # a boto3 DynamoDB client
        self._table = table

    def close(self) -> None:
        pass

    def spend(self, tenant: str, name: str, policy: BudgetPolicy, now: datetime) -> Spend:
        at = micros(now)
        interval = policy.interval_us
        limit = at + (policy.burst - 1) * interval
        names = {"#tat": "tat", "#spent": "spent", "#expires": "expires_at", "#tenant": "tenant"}
        common = {":now": _n(at), ":one": _n(1), ":expires": _n(expiry(at, policy))}
        for _ in range(ATTEMPTS):
            # An idle bucket (or none yet) is full: this request restarts it.
            applied, item = self._update(
                tenant,
                name,
                "SET #tat = :fresh, #expires = :expires, #tenant = :tenant ADD #spent :one",
                "attribute_not_exists(#tat) OR #tat <= :now",
                names,
                {**common, ":fresh": _n(at + interval), ":tenant": {"S": tenant}},
            )
            if applied:
                return Spend(True, policy.burst - 1, 0)
            tat = _number(item.get("tat"))
            if tat is not None and tat > limit:  # empty: refused without another write
                return Spend(False, 0, wait_seconds(tat - limit))
            # Busy, with room: one more request.
            applied, item = self._update(
                tenant,
                name,
                "SET #tat = #tat + :interval, #expires = :expires ADD #spent :one",
                "#tat > :now AND #tat <= :limit",
                names,
                {**common, ":interval": _n(interval), ":limit": _n(limit)},
            )
            tat = _number(item.get("tat"))
            if applied:
                return Spend(True, 0 if tat is None else remaining_after(tat, at, policy), 0)
            if tat is not None and tat > limit:  # another request took the last room first
                return Spend(False, 0, wait_seconds(tat - limit))
        return Spend(False, 0, wait_seconds(interval))  # the bucket kept changing under us: try again soon

    def _update(
        self, tenant: str, name: str, update: str, condition: str, names: dict[str, str], values: dict[str, Any]
    ) -> tuple[bool, dict[str, Any]]:
        """(True, the updated attributes) when the condition held; (False, the item as it was) when not."""
        from botocore.exceptions import ClientError

        used = update + " " + condition
        try:
            answer = self._dynamodb.update_item(
                TableName=self._table,
                Key=budget_key(tenant, name),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames={k: v for k, v in names.items() if k in used},
                ExpressionAttributeValues={k: v for k, v in values.items() if k in used},
                ReturnValues="UPDATED_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return False, exc.response.get("Item") or {}
        return True, answer.get("Attributes") or {}


def _n(value: int) -> dict[str, str]:
    return {"N": str(value)}


def _number(attribute: Any) -> int | None:
    if not isinstance(attribute, dict) or "N" not in attribute:
        return None
    return int(attribute["N"])
