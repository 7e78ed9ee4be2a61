"""Honest failure states where the store's own translation (memory.sqlite_tx) does not reach
(issue 21, item 7): what the API and the ask flow answer for a full, read-only or damaged store
met elsewhere, and what the request's validation and `memtool model push` refuse up front.

- The resolver's catch-all: an OSError ENOSPC (constructed: filling a disk is not something a test
  does) or a bare sqlite3 error raised in a handler is its domain error (507), not a 500.
- ``run_once``: Powertools wraps what the idempotency store raised in
  IdempotencyPersistenceLayerError; a domain or storage failure under it is answered as itself,
  and one after the write was carried out says so.
- ``classify_failure``: a step that met the store's failure answers insufficient_storage,
  store_read_only or store_corrupt, never step_failed.
- POST /ask's body: a question naming a date outside 1900-2200 is a 400 on ``question``; the
  validator loads the time words only when it runs.
- `memtool model push` and `diff`: YAML nested past 32 levels is one line and exit 2, before any
  request (the URL is one nothing listens on).
"""

from __future__ import annotations

import copy
import errno
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.idempotency import BasePersistenceLayer
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyItemNotFoundError, IdempotencyPersistenceLayerError
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import DataRecord
from pydantic import ValidationError

from memtool.api.ask import AskBody
from memtool.api.http import status_for
from memtool.api.idempotency import run_once
from memtool.api.openapi import WRITE_ERRORS, operation
from memtool.api.resolver import make_resolver
from memtool.cli import main
from memtool.errors import InsufficientStorage, NotFound, StoreCorrupt, StoreReadOnly, ValidationFailed
from memtool.flows.ask.state import classify_failure
from memtool.identity import Identity

from tests.support import load_event

# run_once without a Lambda context (as the local runtime's CLI paths call it): Powertools warns
pytestmark = pytest.mark.filterwarnings("ignore:Couldn't determine the remaining time left:UserWarning")

ROOT = Path(__file__).resolve().parents[2]
LI = Identity("acme", "li", frozenset())
FULL = "the disk holding memtool's state is full; nothing of this request was stored. Free some space and retry"


# ---- the resolver's catch-all ----------------------------------------------------------------------


def resolve(raised: BaseException) -> tuple[int, dict[str, Any]]:
    """A route on the shared resolver that raises ``raised``, called with a real API Gateway event."""
    app = make_resolver()

    @app.get("/boom")
    def boom() -> None:
        raise raised

    event = copy.deepcopy(load_event("memory_get.json"))
    event.update(resource="/boom", path="/boom", httpMethod="GET", pathParameters=None, queryStringParameters=None)
    event["multiValueQueryStringParameters"] = None
    event["requestContext"].update(resourcePath="/boom", httpMethod="GET")
    response = app.resolve(event, None)
    return response["statusCode"], json.loads(response["body"])


def test_enospc_raised_in_a_handler_is_507_insufficient_storage_not_500() -> None:
    assert resolve(OSError(errno.ENOSPC, "No space left on device")) == (507, {"error": "insufficient_storage", "message": FULL})
    assert resolve(OSError(errno.EDQUOT, "Disk quota exceeded"))[1]["error"] == "insufficient_storage"


def test_other_storage_failures_outside_a_transaction_are_their_domain_errors() -> None:
    status, body = resolve(OSError(errno.EROFS, "Read-only file system"))
    assert (status, body["error"]) == (507, "store_read_only") and "Read-only file system" in body["message"]
    assert resolve(sqlite3.OperationalError("database or disk is full")) == (507, {"error": "insufficient_storage", "message": FULL})
    status, body = resolve(sqlite3.DatabaseError("database disk image is malformed"))
    assert (status, body["error"]) == (500, "store_corrupt")


def test_any_other_error_in_a_handler_stays_a_500_internal_error() -> None:
    internal = (500, {"error": "internal_error", "message": "the request could not be completed"})
    assert resolve(RuntimeError("boom")) == internal
    assert resolve(OSError(errno.ENOENT, "No such file or directory")) == internal
    assert resolve(sqlite3.OperationalError("no such table: t")) == internal


# ---- idempotent writes ------------------------------------------------------------------------------


class Records(BasePersistenceLayer):
    """Idempotency records in a dict; ``fail`` names the one call (put, update, delete) that raises ``error``."""

    def __init__(self, fail: str | None = None, error: BaseException | None = None) -> None:
        super().__init__()
        self.records: dict[str, DataRecord] = {}
        self.fail, self.error = fail, error

    def _raise(self, call: str) -> None:
        if call == self.fail and self.error is not None:
            raise self.error

    def _get_record(self, idempotency_key: str) -> DataRecord:
        if idempotency_key not in self.records:
            raise IdempotencyItemNotFoundError
        return self.records[idempotency_key]

    def _put_record(self, data_record: DataRecord) -> None:
        self._raise("put")
        self.records[data_record.idempotency_key] = data_record

    def _update_record(self, data_record: DataRecord) -> None:
        self._raise("update")
        self.records[data_record.idempotency_key] = data_record

    def _delete_record(self, data_record: DataRecord) -> None:
        self._raise("delete")
        self.records.pop(data_record.idempotency_key, None)


def write(persistence: Records, performed: list[int], outcome: Any = None) -> Any:
    def perform() -> dict[str, Any]:
        performed.append(1)
        if isinstance(outcome, BaseException):
            raise outcome
        return {"status_code": 201, "body": {"id": "mem_1"}}

    return run_once("key-00000001", LI, "create", {"content": "x"}, perform, persistence=persistence, ttl_seconds=60)


def test_a_full_disk_under_the_in_progress_record_is_the_stores_error_and_nothing_runs() -> None:
    full = InsufficientStorage(FULL)
    performed: list[int] = []
    with pytest.raises(InsufficientStorage) as raised:
        write(Records("put", full), performed)
    assert raised.value is full and status_for(raised.value) == 507
    assert performed == []  # the write never started


def test_a_raw_storage_error_under_the_record_is_its_domain_error() -> None:
    performed: list[int] = []
    with pytest.raises(InsufficientStorage) as raised:
        write(Records("put", sqlite3.OperationalError("database or disk is full")), performed)
    assert raised.value.message == FULL
    with pytest.raises(StoreReadOnly):
        write(Records("put", OSError(errno.EROFS, "Read-only file system")), performed)
    with pytest.raises(NotFound):  # any domain error answers as itself
        write(Records("put", NotFound("gone")), performed)
    assert performed == []


def test_a_full_disk_after_the_write_says_the_write_was_carried_out() -> None:
    performed: list[int] = []
    with pytest.raises(InsufficientStorage) as raised:
        write(Records("update", InsufficientStorage(FULL)), performed)
    assert performed == [1]
    assert raised.value.message.startswith(
        "the disk holding memtool's state is full: the request was carried out, but its answer could not be recorded "
        "under its Idempotency-Key, so a retry with that key may carry it out again"
    )
    assert "nothing of this request was stored" not in raised.value.message
    with pytest.raises(StoreCorrupt) as corrupt:
        write(Records("update", sqlite3.DatabaseError("database disk image is malformed")), [])
    assert "the request was carried out" in corrupt.value.message


def test_a_failed_write_and_a_full_disk_clearing_its_record_answer_the_stores_error() -> None:
    # perform fails, then deleting the in-progress record meets the full disk: still a 507
    with pytest.raises(InsufficientStorage) as raised:
        write(Records("delete", InsufficientStorage(FULL)), [], outcome=InsufficientStorage(FULL))
    assert raised.value.message == FULL
    # perform fails and the record is cleared: perform's own error, as before
    with pytest.raises(NotFound):
        write(Records(), [], outcome=NotFound("gone"))


def test_any_other_persistence_failure_stays_powertools_error() -> None:
    with pytest.raises(IdempotencyPersistenceLayerError):
        write(Records("put", RuntimeError("the table is gone")), [])
    with pytest.raises(IdempotencyPersistenceLayerError):
        write(Records("put", OSError(errno.ENOENT, "No such file or directory")), [])


# ---- the ask flow ----------------------------------------------------------------------------------


def lambda_error(error: BaseException) -> str:
    """A step's exception as the Lambda error JSON a Catch hands on (runtime.local_flows)."""
    return json.dumps({"errorType": type(error).__name__, "errorMessage": str(error), "stackTrace": ["..."]})


@pytest.mark.parametrize(
    ("error", "code", "words"),
    [
        (InsufficientStorage(FULL), "insufficient_storage", "the disk holding memtool's state is full, so the Record step"),
        (StoreReadOnly("cannot be written"), "store_read_only", "memtool's state cannot be written, so the Record step"),
        (StoreCorrupt("damaged"), "store_corrupt", "memtool's state database is damaged, so the Record step"),
        (sqlite3.OperationalError("database or disk is full"), "insufficient_storage", "is full"),
        (OSError(errno.ENOSPC, "No space left on device"), "insufficient_storage", "is full"),
        (sqlite3.OperationalError("attempt to write a readonly database"), "store_read_only", "cannot be written"),
        (sqlite3.DatabaseError("database disk image is malformed"), "store_corrupt", "is damaged"),
    ],
)
def test_a_step_that_met_the_stores_failure_says_what_is_wrong_with_the_store(error: Exception, code: str, words: str) -> None:
    failed = classify_failure(type(error).__name__, lambda_error(error), step="Record")
    assert (failed.error, failed.step) == (code, "Record")
    assert words in failed.message
    # As the execution's own failure (no step: the recording steps failed too)
    whole = classify_failure(type(error).__name__, lambda_error(error), step=None)
    assert whole.error == code and "the flow" in whole.message and whole.step is None


def test_the_flows_other_failures_are_classified_as_before() -> None:
    missing = sqlite3.OperationalError("no such table: t")
    assert classify_failure("OperationalError", lambda_error(missing), step="Plan").error == "step_failed"
    assert classify_failure("OSError", lambda_error(OSError(errno.ENOENT, "gone")), step="Plan").error == "step_failed"
    refused = ValidationFailed("the question is not valid", field="question")
    assert classify_failure("ValidationFailed", lambda_error(refused), step="Prepare").error == "validation_error"


# ---- questions naming dates memtool cannot read -------------------------------------------------------


def test_a_question_naming_a_date_outside_1900_2200_is_refused_on_question() -> None:
    with pytest.raises(ValidationError) as refused:
        AskBody.model_validate({"question": "  net revenue between 1900-01-01 and 9999-12-31 "})
    [error] = refused.value.errors()
    assert error["loc"] == ("question",)
    assert str(error["ctx"]["error"]) == (
        '"9999-12-31" is outside the dates memtool can read (1900-01-01 to 2200-12-31): ask about a period inside them'
    )


@pytest.mark.parametrize(
    "question", ["net revenue last month", "SKU 3000-12 sales last month", "2026-02-30 orders", "净收入 2200-12-31", "最近3个月的净收入"]
)
def test_a_normal_question_is_unaffected(question: str) -> None:
    assert AskBody.model_validate({"question": question}).question == question


def test_the_limits_load_no_time_words_until_a_question_is_validated() -> None:
    probe = (
        "import sys, memtool.api.limits as limits\n"
        "before = 'memtool.semantic.time_expressions' in sys.modules\n"
        "limits._question('net revenue last month')\n"
        "print(before, 'memtool.semantic.time_expressions' in sys.modules)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "layers" / "core"), "MEMTOOL_RUNTIME": "aws", "AWS_REGION": "us-east-1"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


# ---- OpenAPI: what a write can answer ---------------------------------------------------------------


def test_a_write_lists_413_and_507_and_a_read_neither() -> None:
    assert WRITE_ERRORS == (413, 507)
    idempotent = operation("w", tag="t", ok={201: None}, errors=(422,), idempotent=True)["responses"]
    assert {413, 507} <= set(idempotent)
    conflicting = operation("w", tag="t", ok={200: None}, errors=(403, 409))["responses"]  # PUT /model: no key, a 409
    assert {413, 507} <= set(conflicting)
    read = operation("r", tag="t", ok={200: None}, errors=(404,))["responses"]
    assert 413 not in read and 507 not in read
    told = operation("w", tag="t", ok={200: None}, writes=True)["responses"]
    assert 507 in told and 507 not in operation("r", tag="t", ok={200: None}, errors=(409,), writes=False)["responses"]


# ---- memtool model push / diff ---------------------------------------------------------------------


@pytest.mark.parametrize("command", ["push", "diff"])
def test_model_push_and_diff_refuse_deep_yaml_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: deep\nmetrics: " + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    code = main(["model", command, str(deep), "--tenant", "acme", "--user", "li", "--url", "http://127.0.0.1:9"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.splitlines() == [f"memtool model: {deep}:2: the YAML is nested deeper than 32 levels; a semantic model is a few levels deep"]
