"""Fair use: each tenant's request budget, spent by the API routes that start work.

``POST /ask`` and ``POST /feedback`` each spend one request of the caller's tenant budget
(``tenant_requests``) before they do anything else; a replay of an Idempotency-Key spends nothing
(it answers the first answer). The bucket lives in the record store the settings choose (the
memory table in AWS, and with ``memtool serve --store dynamodb`` on moto; the SQLite file
otherwise): :mod:`memtool.memory.budget`. ``MEMTOOL_TENANT_REQUESTS_PER_MINUTE=0`` (the default
outside AWS) spends nothing.

A store that cannot be reached does not fail the tenant's own request: the request goes ahead
unmetered and the failure is logged (the budget protects the other tenants; failing every
request would make an outage of a throttling hiccup).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from memtool.api.identity import Identity
from memtool.errors import MemtoolError, RateLimited
from memtool.memory.budget import BudgetPolicy, BudgetStore, DynamoBudgetStore, Spend
from memtool.runtime import container
from memtool.settings import Settings, get_settings, on_settings_change

if TYPE_CHECKING:
    from memtool.memory.sqlite_budget import SQLiteBudgetStore

logger = logging.getLogger("memtool.budget")

TENANT_REQUESTS = "tenant_requests"

_held: list[tuple[Settings, BudgetStore]] = []
_lock = threading.Lock()


def request_policy(settings: Settings) -> BudgetPolicy | None:
    """The tenant request budget these settings give, or None when it is off."""
    if settings.tenant_requests_per_minute == 0:
        return None
    return BudgetPolicy(per_minute=settings.tenant_requests_per_minute, burst=settings.tenant_request_burst)


def budget_store() -> BudgetStore:
    """The budget store on the settings' record store, built once per settings."""
    settings = get_settings()
    with _lock:
        if _held and _held[0][0] is settings:
            return _held[0][1]
        _forget_locked()
        store = _build(settings)
        _held.append((settings, store))
        return store


def _build(settings: Settings) -> BudgetStore:
    if settings.record_store == "sqlite":
        return sqlite_budget_store(settings.sqlite_path)
    from memtool.runtime.aws import client

    # One attempt per call, a short wait: the spend is on every request's path, and a store that
    # does not answer lets the request go ahead (see the module's docstring).
    return DynamoBudgetStore(client("dynamodb", settings, max_attempts=2, connect_timeout=1, read_timeout=2), settings.memory_table)


def sqlite_budget_store(path: Path) -> SQLiteBudgetStore:
    """Budgets in the local runtime's SQLite file, on a small pool of its own."""
    from memtool.memory.sqlite_budget import SQLiteBudgetStore
    from memtool.memory.sqlite_store import ConnectionPool

    path.parent.mkdir(parents=True, exist_ok=True)
    return SQLiteBudgetStore(ConnectionPool(path, 4))


def forget() -> None:
    """Close and forget the store (new settings build a new one)."""
    with _lock:
        _forget_locked()


def _forget_locked() -> None:
    for _, store in _held:
        try:
            store.close()
        except Exception:  # a store that fails to close holds nothing we can free
            logger.warning("the request budget store did not close", exc_info=True)
    _held.clear()


def spend_request(who: Identity) -> Spend | None:
    """One request of the caller's tenant budget; raises RateLimited when it is spent. None when
    the budget is off (or its store could not be reached)."""
    from botocore.exceptions import BotoCoreError, ClientError

    settings = get_settings()
    policy = request_policy(settings)
    if policy is None:
        return None
    try:
        spent = budget_store().spend(who.tenant, TENANT_REQUESTS, policy, container.clock().now())
    except (BotoCoreError, ClientError, sqlite3.Error, OSError, MemtoolError) as exc:  # the store's failures, not ours
        logger.error("request budget unavailable: the request goes ahead unmetered", extra={"tenant": who.tenant, "error": str(exc)})
        return None
    if not spent.accepted:
        raise RateLimited(
            f"tenant {who.tenant} has spent its request budget ({policy.per_minute} requests a minute, "
            f"{policy.burst} at once): retry after {spent.retry_after_seconds} s",
            retry_after_seconds=spent.retry_after_seconds,
            budget={"name": TENANT_REQUESTS, **policy.describe()},
        )
    return spent


on_settings_change(forget)
