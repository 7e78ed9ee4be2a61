"""Idempotent API writes on the SQLite persistence layer, through ``run_once`` as the API uses it."""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyItemAlreadyExistsError

from memtool.api.idempotency import run_once
from memtool.errors import IdempotencyInProgress, IdempotencyMismatch
from memtool.identity import Identity
from memtool.memory.records import MemoryDraft, MemoryKind
from memtool.memory.sqlite_store import SQLiteMemoryStore
from memtool.memory.store import Partition
from memtool.runtime.lambda_context import LocalLambdaContext
from memtool.runtime.sqlite_idempotency import SQLiteIdempotencyLayer

LI = Identity(tenant="acme", user="li")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "memtool.sqlite3"


@pytest.fixture
def layer(path: Path):
    opened = SQLiteIdempotencyLayer(path)
    yield opened
    opened.close()


class Counter:
    """A ``perform`` that counts its runs and answers with the run number."""

    def __init__(self, pause: float = 0.0) -> None:
        self.runs = 0
        self.pause = pause
        self._lock = threading.Lock()

    def __call__(self) -> dict:
        with self._lock:
            self.runs += 1
            run = self.runs
        time.sleep(self.pause)
        return {"status_code": 201, "body": {"run": run}}


def call(layer, key: str | None, request: dict, perform, who: Identity = LI) -> dict:
    # A fresh context each call, as the API passes one: run_once's config is cached per process
    # and would otherwise keep an earlier test's context, whose deadline has long passed.
    return run_once(
        key, who, "create_memory", request, perform, persistence=layer, ttl_seconds=3600, lambda_context=LocalLambdaContext()
    )


def test_a_replayed_key_returns_the_first_answer_without_running_again(layer):
    perform = Counter()
    first = call(layer, "key-00000001", {"content": "元"}, perform)
    again = call(layer, "key-00000001", {"content": "元"}, perform)
    assert first == again == {"status_code": 201, "body": {"run": 1}}
    assert perform.runs == 1
    # Another key, or another caller with the same key, is another request
    assert call(layer, "key-00000002", {"content": "元"}, perform)["body"] == {"run": 2}
    assert call(layer, "key-00000001", {"content": "元"}, perform, who=Identity("acme", "wang"))["body"] == {"run": 3}
    # Without a key nothing is remembered
    assert call(layer, None, {"content": "元"}, perform)["body"] == {"run": 4}


def test_a_key_reused_for_a_different_request_is_refused(layer):
    perform = Counter()
    call(layer, "key-00000001", {"content": "元"}, perform)
    with pytest.raises(IdempotencyMismatch) as mismatch:
        call(layer, "key-00000001", {"content": "分"}, perform)
    assert mismatch.value.field == "Idempotency-Key"
    assert perform.runs == 1


def test_concurrent_calls_with_one_key_run_perform_exactly_once(layer):
    perform = Counter(pause=0.3)
    answers: list[object] = []
    barrier = threading.Barrier(12)

    def caller() -> None:
        barrier.wait()
        try:
            answers.append(call(layer, "key-concurrent", {"content": "元"}, perform))
        except IdempotencyInProgress as in_progress:  # "still in progress": the client retries later
            answers.append(in_progress)

    threads = [threading.Thread(target=caller) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    # Then perform ran once; every other caller was told to retry, or (arriving late) got its answer
    assert perform.runs == 1
    assert len(answers) == 12
    answered = [a for a in answers if not isinstance(a, IdempotencyInProgress)]
    assert answered and all(a == {"status_code": 201, "body": {"run": 1}} for a in answered)
    told_to_retry = [a for a in answers if isinstance(a, IdempotencyInProgress)]
    assert {(a.code, a.field) for a in told_to_retry} <= {("idempotency_in_progress", "Idempotency-Key")}
    assert call(layer, "key-concurrent", {"content": "元"}, perform) == {"status_code": 201, "body": {"run": 1}}


def test_a_failed_request_releases_its_key(layer):
    def fail() -> dict:
        raise RuntimeError("warehouse down")

    with pytest.raises(RuntimeError):
        call(layer, "key-00000001", {"content": "元"}, fail)
    perform = Counter()
    assert call(layer, "key-00000001", {"content": "元"}, perform)["body"] == {"run": 1}


def configured(layer: SQLiteIdempotencyLayer, expires_after_seconds: int = 3600) -> SQLiteIdempotencyLayer:
    layer.configure(
        IdempotencyConfig(
            event_key_jmespath="key", payload_validation_jmespath="body", expires_after_seconds=expires_after_seconds
        ),
        function_name="test",
    )
    return layer


def test_an_in_progress_record_blocks_until_its_deadline_passes(layer):
    configured(layer)
    payload = {"key": "k1", "body": 1}
    # A caller whose deadline already passed (it crashed or timed out mid-request)
    layer.save_inprogress(payload, remaining_time_in_millis=-1_000)
    # So the key can be taken over, and now it is held until the new caller's deadline
    layer.save_inprogress(payload, remaining_time_in_millis=60_000)
    with pytest.raises(IdempotencyItemAlreadyExistsError) as held:
        layer.save_inprogress(payload, remaining_time_in_millis=60_000)
    assert held.value.old_data_record.status == "INPROGRESS"


def test_an_expired_record_is_replaced_and_old_ones_are_swept(layer, path):
    configured(layer)
    layer.save_inprogress({"key": "k1", "body": 1}, remaining_time_in_millis=60_000)
    layer.save_success({"key": "k1", "body": 1}, result={"ok": True})
    with pytest.raises(IdempotencyItemAlreadyExistsError):  # completed and not expired: held
        layer.save_inprogress({"key": "k1", "body": 1}, remaining_time_in_millis=60_000)

    # When its expiry passes, the key can be used again, and a later write sweeps what expired
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE idempotency SET expiration = expiration - 7200")
    layer.save_inprogress({"key": "k1", "body": 1}, remaining_time_in_millis=60_000)
    assert idempotency_rows(path) == [("INPROGRESS",)]
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE idempotency SET expiration = expiration - 7200")
    layer.save_inprogress({"key": "k2", "body": 1}, remaining_time_in_millis=60_000)
    assert idempotency_rows(path) == [("INPROGRESS",)]  # k2 only


def idempotency_rows(path: Path) -> list[tuple]:
    with closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT status FROM idempotency").fetchall()


def test_idempotency_records_share_the_file_with_the_memory_store(path):
    store = SQLiteMemoryStore(path)
    layer = SQLiteIdempotencyLayer(path)
    try:
        perform_calls: list[str] = []

        def perform() -> dict:
            record = store.create(
                Partition("acme", "li"), MemoryDraft(kind=MemoryKind.PROFILE, content="元"), datetime.now(UTC)
            ).record
            perform_calls.append(record.id)
            return {"status_code": 201, "body": {"id": record.id}}

        first = call(layer, "key-00000001", {"content": "元"}, perform)
        second = call(layer, "key-00000001", {"content": "元"}, perform)
        assert first == second and perform_calls == [first["body"]["id"]]
        assert len(store.list(Partition("acme", "li"), datetime.now(UTC)).items) == 1
    finally:
        layer.close()
        store.close()
