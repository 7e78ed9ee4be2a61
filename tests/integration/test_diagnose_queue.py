"""The diagnose queue: SQLite semantics (visibility, retries, dead letters, kill -9), the SQS adapter
on moto, the partial batch response, and the local drain into a DiagnoseFunction stand-in.

Time is a fake clock handed to the queue: a visibility timeout "expires" by moving the clock, so
no test waits or depends on how fast anything runs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from memtool.diagnosis.queue import (
    NullDiagnosisQueue,
    QueueUnavailable,
    SQLiteDiagnosisQueue,
    SqsDiagnosisQueue,
    build_diagnosis_queue,
)
from memtool.diagnosis.requests import DiagnoseRequest, Expected
from memtool.runtime.diagnose_batch import process_diagnose_batch, sqs_event
from memtool.runtime.diagnose_drain import BackgroundDiagnoseDrain, DiagnoseDrainer
from memtool.runtime.lambda_context import LocalLambdaContext
from memtool.settings import Settings

REGION = "us-east-1"
T0 = 1_900_000_000.0


class FakeClock:
    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def request(episode: str | None = None, **fields: Any) -> DiagnoseRequest:
    episode = episode or f"ep-{uuid.uuid4().hex[:10]}"
    values: dict[str, Any] = {
        "tenant": "acme",
        "user": "li",
        "episode_id": episode,
        "reason": "negative_feedback",
        "request_id": f"req-{episode}",
        "expected": Expected(value=1250.5, unit="万元"),
        "comment": "华东 should be higher",
    }
    values.update(fields)
    return DiagnoseRequest(**values)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(tmp_path: Path, clock: FakeClock):
    q = SQLiteDiagnosisQueue(tmp_path / "diagnose-queue.sqlite3", max_attempts=3, clock=clock)
    yield q
    q.close()


# ---- SQLite queue semantics ---------------------------------------------------------------------


def test_send_receive_delete_round_trip(queue: SQLiteDiagnosisQueue, clock: FakeClock):
    sent = [request() for _ in range(3)]
    for r in sent:
        queue.send(r)
    assert queue.stats() == {"pending": 3, "in_flight": 0, "dead_letters": 0, "delivered": 0}

    received = queue.receive(max_messages=10, visibility_seconds=30)

    assert [DiagnoseRequest.model_validate_json(m.body) for m in received] == sent  # send order
    assert all(m.attempts == 1 for m in received)
    assert all(m.first_sent_at.timestamp() == T0 for m in received)
    assert queue.stats() == {"pending": 0, "in_flight": 3, "dead_letters": 0, "delivered": 0}
    assert queue.receive(10, 30) == []  # invisible while in flight

    assert all(queue.delete(m.message_id, m.receipt_handle) for m in received)
    assert queue.stats() == {"pending": 0, "in_flight": 0, "dead_letters": 0, "delivered": 3}
    clock.advance(3600)
    assert queue.receive(10, 30) == []  # deleted for good


def test_receive_takes_at_most_max_messages_oldest_first(queue: SQLiteDiagnosisQueue):
    ids = [queue.send_body(json.dumps({"n": n})) for n in range(7)]

    first = queue.receive(max_messages=5, visibility_seconds=30)
    second = queue.receive(max_messages=5, visibility_seconds=30)

    assert [m.message_id for m in first] == ids[:5]
    assert [m.message_id for m in second] == ids[5:]


def test_an_undeleted_message_is_visible_again_after_its_visibility_timeout(queue: SQLiteDiagnosisQueue, clock: FakeClock):
    queue.send(request())
    (first,) = queue.receive(1, visibility_seconds=30)

    clock.advance(29)
    assert queue.receive(1, 30) == []
    clock.advance(2)
    (again,) = queue.receive(1, 30)

    assert again.message_id == first.message_id and again.body == first.body
    assert again.attempts == 2
    assert again.receipt_handle != first.receipt_handle


def test_a_stale_receipt_does_not_delete_the_next_delivery(queue: SQLiteDiagnosisQueue, clock: FakeClock):
    queue.send(request())
    (first,) = queue.receive(1, 30)
    clock.advance(31)
    (second,) = queue.receive(1, 30)

    assert queue.delete(first.message_id, first.receipt_handle) is False
    assert queue.stats()["in_flight"] == 1
    assert queue.delete(second.message_id, second.receipt_handle) is True
    assert queue.stats() == {"pending": 0, "in_flight": 0, "dead_letters": 0, "delivered": 1}


def test_release_makes_a_message_visible_after_its_delay(queue: SQLiteDiagnosisQueue, clock: FakeClock):
    queue.send(request())
    (message,) = queue.receive(1, visibility_seconds=300)

    dead = queue.release(message.message_id, 10, receipt_handle=message.receipt_handle, error="boom")

    assert dead is False
    clock.advance(9)
    assert queue.receive(1, 300) == []
    clock.advance(2)
    (again,) = queue.receive(1, 300)
    assert again.message_id == message.message_id and again.attempts == 2


def test_a_message_released_on_its_last_attempt_is_a_dead_letter_and_never_delivered(queue: SQLiteDiagnosisQueue, clock: FakeClock):
    sent = request()
    queue.send(sent)
    outcomes = []
    for _ in range(3):
        (message,) = queue.receive(1, 30)
        outcomes.append(queue.release(message.message_id, 0, receipt_handle=message.receipt_handle, error="ValueError: bad"))

    assert outcomes == [False, False, True]
    assert queue.stats() == {"pending": 0, "in_flight": 0, "dead_letters": 1, "delivered": 0}
    clock.advance(3600)
    assert queue.receive(10, 30) == []
    (dead,) = queue.dead_letters()
    assert DiagnoseRequest.model_validate_json(dead.body) == sent and dead.attempts == 3


def test_a_message_whose_last_delivery_times_out_becomes_a_dead_letter(queue: SQLiteDiagnosisQueue, clock: FakeClock):
    queue.send(request())
    for attempt in (1, 2, 3):
        (message,) = queue.receive(1, 30)
        assert message.attempts == attempt
        clock.advance(31)  # never deleted nor released: the consumer died each time

    assert queue.receive(1, 30) == []
    assert queue.stats() == {"pending": 0, "in_flight": 0, "dead_letters": 1, "delivered": 0}


def test_revive_puts_dead_letters_back_with_fresh_attempts(queue: SQLiteDiagnosisQueue):
    sent = request()
    queue.send(sent)
    for _ in range(3):
        (message,) = queue.receive(1, 30)
        queue.release(message.message_id, 0, receipt_handle=message.receipt_handle)
    assert queue.stats()["dead_letters"] == 1

    assert queue.revive_dead_letters() == 1

    assert queue.stats() == {"pending": 1, "in_flight": 0, "dead_letters": 0, "delivered": 0}
    (revived,) = queue.receive(1, 30)
    assert DiagnoseRequest.model_validate_json(revived.body) == sent and revived.attempts == 1
    assert queue.revive_dead_letters() == 0


def test_the_queue_survives_reopening(tmp_path: Path, clock: FakeClock):
    path = tmp_path / "q.sqlite3"
    first = SQLiteDiagnosisQueue(path, clock=clock)
    sent = request()
    first.send(sent)
    first.close()

    second = SQLiteDiagnosisQueue(path, clock=clock)
    (message,) = second.receive(1, 30)
    second.close()

    assert DiagnoseRequest.model_validate_json(message.body) == sent
    with pytest.raises(RuntimeError, match="closed"):
        second.send(sent)


def test_four_threads_sending_fifty_each_lose_nothing(queue: SQLiteDiagnosisQueue, tmp_path: Path, clock: FakeClock):
    def send_fifty(thread: int) -> None:
        for n in range(50):
            queue.send(request(f"t{thread}-n{n}"))

    threads = [threading.Thread(target=send_fifty, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert queue.stats()["pending"] == 200
    reader = SQLiteDiagnosisQueue(queue.path, clock=clock)  # another connection sees it all
    episodes = [DiagnoseRequest.model_validate_json(m.body).episode_id for m in reader.receive(500, 30)]
    reader.close()
    assert sorted(episodes) == sorted(f"t{t}-n{n}" for t in range(4) for n in range(50))


def test_concurrent_receivers_never_take_the_same_message(queue: SQLiteDiagnosisQueue, clock: FakeClock):
    for n in range(120):
        queue.send_body(json.dumps({"n": n}))
    receivers = [SQLiteDiagnosisQueue(queue.path, clock=clock) for _ in range(2)]
    taken: list[list[str]] = [[] for _ in range(4)]

    def receive_all(slot: int) -> None:
        q = receivers[slot % 2]
        while batch := q.receive(5, visibility_seconds=600):
            taken[slot].extend(m.message_id for m in batch)

    threads = [threading.Thread(target=receive_all, args=(slot,)) for slot in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for q in receivers:
        q.close()

    everything = [m for slot in taken for m in slot]
    assert len(everything) == 120 and len(set(everything)) == 120
    assert queue.stats() == {"pending": 0, "in_flight": 120, "dead_letters": 0, "delivered": 0}


_RECEIVE_THEN_HANG = """
import sys, time
from memtool.diagnosis.queue import SQLiteDiagnosisQueue
queue = SQLiteDiagnosisQueue(sys.argv[1])
(message,) = queue.receive(1, visibility_seconds=float(sys.argv[2]))
print(message.message_id, flush=True)
time.sleep(600)
"""


def test_a_consumer_killed_before_deleting_loses_nothing(tmp_path: Path):
    # Given a message on a real-clock queue
    path = tmp_path / "q.sqlite3"
    producer = SQLiteDiagnosisQueue(path)
    sent = request()
    producer.send(sent)
    producer.close()

    # When a consumer process receives it (visibility 600 s) and is killed with SIGKILL
    consumer = subprocess.Popen(
        [sys.executable, "-c", _RECEIVE_THEN_HANG, str(path), "600"], stdout=subprocess.PIPE, text=True
    )
    try:
        taken_id = consumer.stdout.readline().strip()  # type: ignore[union-attr]
    finally:
        consumer.send_signal(signal.SIGKILL)
        consumer.wait(timeout=30)
    assert consumer.returncode == -signal.SIGKILL and taken_id

    # Then it is in flight now, and delivered again once its visibility timeout has passed
    now_queue = SQLiteDiagnosisQueue(path)
    assert now_queue.receive(1, 30) == []
    assert now_queue.stats()["in_flight"] == 1
    now_queue.close()
    later = SQLiteDiagnosisQueue(path, clock=lambda: time.time() + 601)
    (again,) = later.receive(1, 30)
    later.close()
    assert again.message_id == taken_id and again.attempts == 2
    assert DiagnoseRequest.model_validate_json(again.body) == sent


# ---- the SQS adapter on moto --------------------------------------------------------------------


@mock_aws
def test_the_sqs_adapter_sends_the_request_as_json():
    sqs = boto3.client("sqs", region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
    url = sqs.create_queue(QueueName=f"diagnose-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    sent = request()

    SqsDiagnosisQueue(sqs, url).send(sent)

    (message,) = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert message["Body"] == sent.model_dump_json()
    assert DiagnoseRequest.model_validate_json(message["Body"]) == sent


@mock_aws
def test_the_sqs_adapter_reports_a_missing_queue_as_queue_unavailable():
    sqs = boto3.client("sqs", region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
    missing = f"https://sqs.{REGION}.amazonaws.com/123456789012/no-such-queue"
    sent = request()

    with pytest.raises(QueueUnavailable) as raised:
        SqsDiagnosisQueue(sqs, missing).send(sent)

    assert sent.request_id in raised.value.message
    assert "NonExistentQueue" in raised.value.message or "QueueDoesNotExist" in raised.value.message
    assert raised.value.to_body()["error"] == "diagnosis_queue_unavailable"


def test_the_sqs_adapter_reports_an_unreachable_endpoint_as_queue_unavailable():
    from botocore.config import Config

    sqs = boto3.client(
        "sqs",
        region_name=REGION,
        endpoint_url="http://127.0.0.1:9",  # discard port: nothing listens
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=1),
    )

    with pytest.raises(QueueUnavailable, match="was not queued"):
        SqsDiagnosisQueue(sqs, "http://127.0.0.1:9/123456789012/q").send(request())


# ---- choosing the adapter -----------------------------------------------------------------------


def test_build_picks_the_adapter_the_settings_name(tmp_path: Path):
    made: list[str] = []

    def sqs_factory() -> Any:
        made.append("sqs")
        return object()

    none = build_diagnosis_queue(Settings(home=tmp_path), sqs_factory)
    sqlite = build_diagnosis_queue(Settings(home=tmp_path, diagnose_queue="sqlite", diagnose_max_attempts=7), sqs_factory)
    assert made == []  # no SQS client unless SQS is the queue
    sqs = build_diagnosis_queue(Settings(home=tmp_path, diagnose_queue_url="https://sqs.example/q"), sqs_factory)

    assert isinstance(none, NullDiagnosisQueue)
    assert isinstance(sqlite, SQLiteDiagnosisQueue)
    assert sqlite.path == tmp_path / "state" / "diagnose-queue.sqlite3" and sqlite.max_attempts == 7
    sqlite.close()
    assert isinstance(sqs, SqsDiagnosisQueue) and sqs.queue_url == "https://sqs.example/q"
    assert made == ["sqs"]
    with pytest.raises(ValueError, match="MEMTOOL_DIAGNOSE_QUEUE_URL"):
        build_diagnosis_queue(Settings(home=tmp_path, diagnose_queue="sqs"), sqs_factory)


def test_the_null_queue_drops_the_event_and_says_so_at_debug(caplog: pytest.LogCaptureFixture):
    sent = request()
    with caplog.at_level(logging.DEBUG, logger="memtool.diagnosis"):
        NullDiagnosisQueue().send(sent)

    (record,) = [r for r in caplog.records if r.name == "memtool.diagnosis"]
    assert record.levelno == logging.DEBUG and sent.request_id in record.getMessage()


# ---- the partial batch response -----------------------------------------------------------------


def queued(queue: SQLiteDiagnosisQueue, *bodies: str) -> list:
    for body in bodies:
        queue.send_body(body)
    return queue.receive(len(bodies), 30)


def test_sqs_event_is_the_shape_lambda_sends(queue: SQLiteDiagnosisQueue):
    from aws_lambda_powertools.utilities.parser.models import SqsModel

    messages = queued(queue, request().model_dump_json(), "not json at all")

    event = sqs_event(messages)

    parsed = SqsModel.model_validate(event)  # Powertools' model of Lambda's SQS event
    assert [r.messageId for r in parsed.Records] == [m.message_id for m in messages]
    for record, message in zip(event["Records"], messages, strict=True):
        assert record["eventSource"] == "aws:sqs"
        assert record["body"] == message.body
        assert record["receiptHandle"] == message.receipt_handle
        assert record["attributes"]["ApproximateReceiveCount"] == "1"
        assert record["attributes"]["SentTimestamp"] == str(int(T0 * 1000))
        assert record["md5OfBody"] == hashlib.md5(message.body.encode()).hexdigest()


def test_a_failing_run_fails_exactly_its_record(queue: SQLiteDiagnosisQueue):
    sent = [request(f"ep-{n}") for n in range(3)]
    messages = queued(queue, *(r.model_dump_json() for r in sent))
    ran: list[DiagnoseRequest] = []

    def run(r: DiagnoseRequest) -> None:
        ran.append(r)
        if r.episode_id == "ep-1":
            raise RuntimeError("warehouse down")

    response = process_diagnose_batch(sqs_event(messages), LocalLambdaContext(), run)

    assert response == {"batchItemFailures": [{"itemIdentifier": messages[1].message_id}]}
    assert ran == sent


def test_a_malformed_body_fails_alone(queue: SQLiteDiagnosisQueue, caplog: pytest.LogCaptureFixture):
    good = request()
    extra_field = json.dumps({**json.loads(request().model_dump_json()), "surprise": 1})
    messages = queued(queue, "{not json", good.model_dump_json(), extra_field, json.dumps({"tenant": "acme"}))
    ran: list[DiagnoseRequest] = []

    with caplog.at_level(logging.WARNING, logger="memtool.diagnosis"):
        response = process_diagnose_batch(sqs_event(messages), LocalLambdaContext(), ran.append)

    failed = [f["itemIdentifier"] for f in response["batchItemFailures"]]
    assert sorted(failed) == sorted([messages[0].message_id, messages[2].message_id, messages[3].message_id])
    assert ran == [good]
    assert sum("malformed" in r.getMessage() for r in caplog.records) == 3


def test_a_batch_that_fails_entirely_is_answered_not_raised(queue: SQLiteDiagnosisQueue):
    messages = queued(queue, "x", "y")

    response = process_diagnose_batch(sqs_event(messages), LocalLambdaContext(), lambda r: None)

    assert {f["itemIdentifier"] for f in response["batchItemFailures"]} == {m.message_id for m in messages}


def test_an_empty_failure_list_when_everything_ran(queue: SQLiteDiagnosisQueue):
    messages = queued(queue, request().model_dump_json())

    assert process_diagnose_batch(sqs_event(messages), None, lambda r: None) == {"batchItemFailures": []}


# ---- the local drain ----------------------------------------------------------------------------


class FakeDiagnoseFunction:
    """Stands in for functions/diagnose/app.lambda_handler: the real batch processing, with a
    run that fails for the episodes in ``failing`` (for ``times`` deliveries, or always)."""

    def __init__(self, failing: set[str] | None = None, times: int | None = None, raises: bool = False) -> None:
        self.failing = failing or set()
        self.times = times
        self.raises = raises
        self.runs: list[tuple[str, int]] = []  # (episode, receive count)
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.events.append(event)
        if self.raises:
            raise RuntimeError("handler crashed")
        counts = {r["messageId"]: int(r["attributes"]["ApproximateReceiveCount"]) for r in event["Records"]}
        by_request: dict[str, int] = {}
        for r in event["Records"]:
            by_request[json.loads(r["body"])["request_id"]] = counts[r["messageId"]]

        def run(req: DiagnoseRequest) -> None:
            self.runs.append((req.episode_id, by_request[req.request_id]))
            if req.episode_id in self.failing and (self.times is None or self.times > 0):
                if self.times is not None:
                    self.times -= 1
                raise RuntimeError(f"cannot diagnose {req.episode_id}")

        return process_diagnose_batch(event, context, run)


def test_the_drain_deletes_what_the_handler_took(queue: SQLiteDiagnosisQueue):
    for n in range(7):
        queue.send(request(f"ep-{n}"))
    function = FakeDiagnoseFunction()
    drainer = DiagnoseDrainer(queue, function, batch_size=5)

    assert drainer.drain() == 7
    assert drainer.drain() == 0

    assert [len(e["Records"]) for e in function.events] == [5, 2]
    assert sorted(e for e, _ in function.runs) == [f"ep-{n}" for n in range(7)]
    assert queue.stats() == {"pending": 0, "in_flight": 0, "dead_letters": 0, "delivered": 7}
    assert drainer.stats()["failed_attempts"] == 0


def test_the_drain_retries_a_failure_with_a_growing_delay(queue: SQLiteDiagnosisQueue, clock: FakeClock):
    for episode in ("ep-ok", "ep-flaky"):
        queue.send(request(episode))
    function = FakeDiagnoseFunction({"ep-flaky"}, times=2)
    drainer = DiagnoseDrainer(queue, function, retry_delay_seconds=1.0)

    assert drainer.drain() == 1  # ep-ok; ep-flaky released for 1 s
    assert queue.stats() == {"pending": 0, "in_flight": 1, "dead_letters": 0, "delivered": 1}
    clock.advance(1.5)
    assert drainer.drain() == 0  # second delivery fails too; released for 2 s
    clock.advance(1.5)
    assert drainer.drain() == 0  # not visible yet: the delay grew
    clock.advance(1.0)
    assert drainer.drain() == 1  # third delivery succeeds

    assert function.runs == [("ep-ok", 1), ("ep-flaky", 1), ("ep-flaky", 2), ("ep-flaky", 3)]
    assert queue.stats() == {"pending": 0, "in_flight": 0, "dead_letters": 0, "delivered": 2}
    assert drainer.stats()["failed_attempts"] == 2


def test_the_drain_dead_letters_after_max_attempts(queue: SQLiteDiagnosisQueue, clock: FakeClock):
    queue.send(request("ep-broken"))
    queue.send(request("ep-fine"))
    function = FakeDiagnoseFunction({"ep-broken"})
    drainer = DiagnoseDrainer(queue, function)

    for _ in range(5):
        drainer.drain()
        clock.advance(3600)

    assert [n for e, n in function.runs if e == "ep-broken"] == [1, 2, 3]  # max_attempts deliveries, no more
    assert queue.stats() == {"pending": 0, "in_flight": 0, "dead_letters": 1, "delivered": 1}
    (dead,) = queue.dead_letters()
    assert DiagnoseRequest.model_validate_json(dead.body).episode_id == "ep-broken"
    assert drainer.stats()["last_error"] == "listed in batchItemFailures"


def test_a_handler_that_raises_returns_the_whole_batch(queue: SQLiteDiagnosisQueue, clock: FakeClock):
    for n in range(3):
        queue.send(request(f"ep-{n}"))
    drainer = DiagnoseDrainer(queue, FakeDiagnoseFunction(raises=True))

    assert drainer.drain() == 0

    assert queue.stats() == {"pending": 0, "in_flight": 3, "dead_letters": 0, "delivered": 0}
    assert drainer.stats()["last_error"] == "RuntimeError: handler crashed"
    clock.advance(2)
    healthy = FakeDiagnoseFunction()
    assert DiagnoseDrainer(queue, healthy).drain() == 3
    assert sorted(n for _, n in healthy.runs) == [2, 2, 2]


def test_a_response_naming_a_stranger_fails_the_whole_batch(queue: SQLiteDiagnosisQueue):
    queue.send(request())
    queue.send(request())

    def confused(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"batchItemFailures": [{"itemIdentifier": "not-in-this-batch"}]}

    assert DiagnoseDrainer(queue, confused).drain() == 0
    assert queue.stats()["in_flight"] == 2 and queue.stats()["delivered"] == 0


def test_a_killed_drain_deletes_nothing(queue: SQLiteDiagnosisQueue, clock: FakeClock):
    queue.send(request("ep-1"))

    def killed(event: dict[str, Any], context: Any) -> Any:
        raise SystemExit  # the process dies mid-batch: no delete, no release

    with pytest.raises(SystemExit):
        DiagnoseDrainer(queue, killed, visibility_seconds=60).drain()

    assert queue.stats() == {"pending": 0, "in_flight": 1, "dead_letters": 0, "delivered": 0}
    clock.advance(61)
    function = FakeDiagnoseFunction()
    assert DiagnoseDrainer(queue, function).drain() == 1
    assert function.runs == [("ep-1", 2)]


def test_stopping_the_background_drain_delivers_what_is_queued(queue: SQLiteDiagnosisQueue):
    function = FakeDiagnoseFunction()
    background = BackgroundDiagnoseDrain(DiagnoseDrainer(queue, function), interval=60).start()
    for n in range(6):
        queue.send(request(f"ep-{n}"))

    background.stop()

    assert sorted(e for e, _ in function.runs) == [f"ep-{n}" for n in range(6)]
    assert queue.stats() == {"pending": 0, "in_flight": 0, "dead_letters": 0, "delivered": 6}
    assert background.errors == []


# ---- the local runtime's wiring -----------------------------------------------------------------


@pytest.mark.slow
def test_the_local_runtime_queues_diagnoses_in_sqlite_and_reports_dead_letters(tmp_path: Path):
    import sqlite3

    from memtool.runtime.local import LocalRuntime
    from memtool.settings import get_settings

    from tests.support import ROOT

    home = tmp_path / "home"
    with LocalRuntime(home=home, port=0, root=ROOT) as runtime:
        # Given the default runtime: diagnose events go to the SQLite queue under the state folder
        assert get_settings().diagnose_queue_kind == "sqlite"
        path = get_settings().diagnose_queue_file
        assert path == home / "state" / "diagnose-queue.sqlite3" and path.is_file()
        health = runtime.health()
        assert health["diagnosis_queue"] == {"pending": 0, "in_flight": 0, "dead_letters": 0, "delivered": 0, "drain_errors": 0}
        assert health["status"] == "ok"
        assert runtime.drain_diagnoses() == 0

        # When an event has become a dead letter
        with sqlite3.connect(path) as conn:
            conn.execute(
                "INSERT INTO dead_letters (message_id, body, attempts, first_sent_at, dead_at) VALUES (?, ?, 3, ?, ?)",
                ("m-dead", request("ep-gone").model_dump_json(), T0, T0),
            )

        # Then /health says so
        health = runtime.health()
        assert health["diagnosis_queue"]["dead_letters"] == 1
        assert "diagnosis queue has dead letters" in health["problems"] and health["status"] == "degraded"

    # And the next start gives it another chance
    with LocalRuntime(home=home, port=0, root=ROOT) as again:
        assert again.revived_diagnoses == 1
