"""The tenant request budget's stores (memtool.memory.budget): a token bucket that concurrent
spenders can never overspend, with the same numbers on DynamoDB and on SQLite.

DynamoDB is raced by threads against the locked-down moto server (``LocalMotoServer``), which
applies each call atomically as DynamoDB does for one item (moto in-process is not atomic under
threads, so a pass there would prove nothing); SQLite by threads, and by processes sharing one
file. Each race asserts on the stored state: the bucket's ``spent`` counter and ``tat``.
"""

from __future__ import annotations

import multiprocessing
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memtool.memory.budget import MICROS, BudgetPolicy, DynamoBudgetStore, Spend, budget_key, micros, take
from memtool.runtime.aws import client
from memtool.runtime.budget import sqlite_budget_store
from memtool.runtime.moto_server import LocalMotoServer
from memtool.runtime.tables import create_tables
from memtool.settings import Settings

NOW = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
BUDGET = "tenant_requests"


@pytest.fixture(scope="module")
def moto_server() -> Iterator[LocalMotoServer]:
    server = LocalMotoServer("127.0.0.1", 0).start()
    yield server
    server.stop()


class Stored:
    """A store under test and its raw stored state: (tat, spent) of a bucket, or None."""

    def __init__(self, store: Any, read: Callable[[str], tuple[int, int] | None]) -> None:
        self.store = store
        self.read = read


@pytest.fixture(params=["dynamodb", "sqlite"])
def stored(request: pytest.FixtureRequest, tmp_path: Path, template: dict[str, Any]) -> Iterator[Stored]:
    if request.param == "sqlite":
        sqlite = sqlite_budget_store(tmp_path / "memtool.sqlite3")
        yield Stored(sqlite, lambda tenant: sqlite.stored(tenant, BUDGET))
        sqlite.close()
        return
    server: LocalMotoServer = request.getfixturevalue("moto_server")
    suffix = uuid.uuid4().hex[:8]
    settings = Settings(
        runtime="local",
        region="us-east-1",
        aws_endpoint_url=server.endpoint,
        store="dynamodb",
        memory_table=f"memory-{suffix}",
        idempotency_table=f"idempotency-{suffix}",
        aws_access_key_id="memtool-local",
        aws_secret_access_key="memtool-local",
    )
    dynamodb = client("dynamodb", settings)
    create_tables(dynamodb, settings, template)

    def read(tenant: str) -> tuple[int, int] | None:
        item = dynamodb.get_item(TableName=settings.memory_table, Key=budget_key(tenant, BUDGET), ConsistentRead=True).get("Item")
        return None if item is None else (int(item["tat"]["N"]), int(item["spent"]["N"]))

    yield Stored(DynamoBudgetStore(dynamodb, settings.memory_table), read)


def spend_together(store: Any, tenants: list[str], policy: BudgetPolicy, now: datetime) -> list[tuple[str, Spend]]:
    """One spend per entry of ``tenants``, each on its own thread, all released at once."""
    barrier = threading.Barrier(len(tenants))
    results: list[tuple[str, Spend]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(tenant: str) -> None:
        barrier.wait()
        try:
            outcome = store.spend(tenant, BUDGET, policy, now)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)
            return
        with lock:
            results.append((tenant, outcome))

    threads = [threading.Thread(target=run, args=(tenant,)) for tenant in tenants]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    if errors:
        raise errors[0]
    assert len(results) == len(tenants)
    return results


# ---- the arithmetic ----------------------------------------------------------------------------


def test_a_full_bucket_takes_its_burst_then_one_request_per_interval() -> None:
    policy = BudgetPolicy(per_minute=30, burst=4)  # one every 2 s
    now, tat = micros(NOW), None
    outcomes = []
    for _ in range(5):
        new, outcome = take(tat, now, policy)
        tat = new if new is not None else tat
        outcomes.append(outcome)
    assert [o.accepted for o in outcomes] == [True, True, True, True, False]
    assert [o.remaining for o in outcomes[:4]] == [3, 2, 1, 0]
    assert outcomes[4].retry_after_seconds == 2
    assert take(tat, now + 2 * MICROS - 1, policy)[1].accepted is False  # a microsecond early
    assert take(tat, now + 2 * MICROS, policy)[1].accepted is True
    assert take(tat, now + 10 * MICROS, policy)[1].remaining == 3  # idle long enough: full again


def test_over_a_minute_of_steady_pressure_a_tenant_gets_its_rate_plus_its_burst() -> None:
    policy = BudgetPolicy(per_minute=60, burst=10)
    start, tat, accepted = micros(NOW), None, 0
    for tenth in range(600):  # ten requests a second for a minute
        new, outcome = take(tat, start + tenth * MICROS // 10, policy)
        if outcome.accepted:
            tat, accepted = new, accepted + 1
    assert accepted == 10 + 59  # the burst, then one a second (the sixtieth second is still to come)


@pytest.mark.parametrize(("per_minute", "burst"), [(0, 1), (1, 0)])
def test_a_budget_needs_a_rate_and_a_burst(per_minute: int, burst: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        BudgetPolicy(per_minute=per_minute, burst=burst)


# ---- both stores -------------------------------------------------------------------------------


def test_the_stores_spend_and_refill_with_the_same_numbers(stored: Stored) -> None:
    policy = BudgetPolicy(per_minute=60, burst=2)
    store = stored.store
    assert [store.spend("acme", BUDGET, policy, NOW).accepted for _ in range(3)] == [True, True, False]
    refused = store.spend("acme", BUDGET, policy, NOW + timedelta(milliseconds=200))
    assert (refused.accepted, refused.retry_after_seconds) == (False, 1)  # 0.8 s, in whole seconds
    assert store.spend("acme", BUDGET, policy, NOW + timedelta(seconds=1)).accepted
    assert stored.read("acme") == (micros(NOW) + 3 * MICROS, 3)  # refused requests leave no trace
    idle = store.spend("acme", BUDGET, policy, NOW + timedelta(minutes=5))
    assert (idle.accepted, idle.remaining) == (True, 1)  # an idle bucket is full again
    assert stored.read("acme") == (micros(NOW + timedelta(minutes=5)) + MICROS, 4)


def test_concurrent_spenders_never_get_more_than_the_bucket_holds(stored: Stored) -> None:
    # Given a bucket of 5 and 24 requests of one tenant at the same instant (no refill between them)
    policy = BudgetPolicy(per_minute=60, burst=5)

    outcomes = spend_together(stored.store, ["acme"] * 24, policy, NOW)

    # Then exactly the bucket's size is accepted, and the stored state says so
    accepted = [o for _, o in outcomes if o.accepted]
    assert len(accepted) == 5
    assert sorted(o.remaining for o in accepted) == [0, 1, 2, 3, 4]
    assert all(o.retry_after_seconds >= 1 for _, o in outcomes if not o.accepted)
    assert stored.read("acme") == (micros(NOW) + 5 * policy.interval_us, 5)


def test_one_tenants_exhaustion_leaves_the_others_buckets_alone(stored: Stored) -> None:
    policy = BudgetPolicy(per_minute=60, burst=3)

    outcomes = spend_together(stored.store, ["acme"] * 12 + ["initech"] * 2, policy, NOW)

    by_tenant: dict[str, list[bool]] = {}
    for tenant, outcome in outcomes:
        by_tenant.setdefault(tenant, []).append(outcome.accepted)
    assert sorted(by_tenant["acme"]) == [False] * 9 + [True] * 3
    assert by_tenant["initech"] == [True, True]
    assert stored.read("acme")[1] == 3 and stored.read("initech")[1] == 2  # type: ignore[index]
    assert stored.store.spend("initech", BUDGET, policy, NOW).accepted  # its last request
    assert not stored.store.spend("acme", BUDGET, policy, NOW).accepted


# ---- SQLite: several processes on one file ----------------------------------------------------


def spend_in_another_process(path: str, spends: int, start: Any, accepted: Any) -> None:
    store = sqlite_budget_store(Path(path))
    policy = BudgetPolicy(per_minute=60, burst=7)
    try:
        start.wait(timeout=60)
        took = sum(store.spend("acme", BUDGET, policy, NOW).accepted for _ in range(spends))
        with accepted.get_lock():
            accepted.value += took
    finally:
        store.close()


def test_processes_spending_one_sqlite_bucket_never_get_more_than_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "memtool.sqlite3"
    sqlite_budget_store(path).close()
    processes = multiprocessing.get_context("forkserver")
    processes.set_forkserver_preload([__name__])
    start = processes.Barrier(3)
    accepted = processes.Value("i", 0)
    workers = [processes.Process(target=spend_in_another_process, args=(str(path), 6, start, accepted)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)

    assert [w.exitcode for w in workers] == [0, 0, 0]
    assert accepted.value == 7
    store = sqlite_budget_store(path)
    try:
        assert store.stored("acme", BUDGET) == (micros(NOW) + 7 * MICROS, 7)
    finally:
        store.close()
