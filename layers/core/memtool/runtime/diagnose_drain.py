"""Drains the local diagnose queue into DiagnoseFunction's handler: the local SQS event source.

Like Lambda's SQS poller with ``ReportBatchItemFailures``: messages are received in batches
(invisible while the handler runs), handed to the real handler as an SQS event, deleted when the
handler did not list them as failures, and released with a growing delay when it did. A handler
that raises fails the whole batch. A message that keeps failing becomes a dead letter after the
queue's ``max_attempts`` deliveries (the queue decides, as SQS's redrive policy does). A drain
killed mid-batch deletes nothing: the messages come back after their visibility timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memtool.diagnosis.queue import QueuedMessage, SQLiteDiagnosisQueue
from memtool.runtime.diagnose_batch import sqs_event
from memtool.runtime.lambda_context import LocalLambdaContext, discard_unpublished_metrics

logger = logging.getLogger("memtool.diagnosis")

LambdaHandler = Callable[[dict[str, Any], Any], Any]


@dataclass
class DiagnoseDrainer:
    queue: SQLiteDiagnosisQueue
    handler: LambdaHandler  # functions/diagnose/app.lambda_handler
    batch_size: int = 5  # the template's BatchSize
    visibility_seconds: float = 180.0  # the template's VisibilityTimeout
    retry_delay_seconds: float = 1.0  # after the first failed delivery; doubles with each
    max_retry_delay_seconds: float = 60.0
    function_name: str = "DiagnoseFunction"
    delivered: int = 0
    failed_attempts: int = 0
    last_error: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def drain(self, max_batches: int | None = None) -> int:
        """Deliver visible messages batch by batch; returns how many the handler took.

        Stops at the first batch with a failure: the failures come back after their delay, and
        the caller decides when to try again.
        """
        taken = 0
        batches = 0
        with self._lock:
            while max_batches is None or batches < max_batches:
                messages = self.queue.receive(self.batch_size, self.visibility_seconds)
                if not messages:
                    break
                batches += 1
                done, failed = self._deliver(messages)
                taken += done
                if failed:
                    break
        return taken

    def _deliver(self, messages: list[QueuedMessage]) -> tuple[int, int]:
        """One batch through the handler; returns (deleted, released)."""
        context = LocalLambdaContext(function_name=self.function_name, timeout_seconds=self.visibility_seconds)
        try:
            response = self.handler(sqs_event(messages), context)
            failed_ids = _failed_ids(response, {m.message_id for m in messages})
            error = "listed in batchItemFailures"
        except Exception as exc:  # the whole batch failed, as an uncaught error in Lambda would
            failed_ids = {m.message_id for m in messages}
            error = f"{type(exc).__name__}: {str(exc)[:200]}"
            logger.warning("diagnose handler failed on a batch of %s: %s", len(messages), error)
        finally:
            discard_unpublished_metrics()
        deleted = released = 0
        for message in messages:
            if message.message_id not in failed_ids:
                if self.queue.delete(message.message_id, message.receipt_handle):
                    deleted += 1
                continue
            released += 1
            self.failed_attempts += 1
            self.last_error = error
            delay = min(self.max_retry_delay_seconds, self.retry_delay_seconds * 2 ** (message.attempts - 1))
            dead = self.queue.release(message.message_id, delay, receipt_handle=message.receipt_handle, error=error)
            logger.warning(
                "diagnose message %s failed (delivery %s)%s",
                message.message_id,
                message.attempts,
                ", now a dead letter" if dead else f", again in {delay:.0f} s",
            )
        self.delivered += deleted
        return deleted, released

    def stats(self) -> dict[str, Any]:
        return {**self.queue.stats(), "failed_attempts": self.failed_attempts, "last_error": self.last_error}


def _failed_ids(response: Any, batch: set[str]) -> set[str]:
    """The messages a partial batch response returns to the queue, read as Lambda reads it: no
    response or no list is a success; a list naming a message not in the batch fails the batch."""
    if not isinstance(response, dict) or response.get("batchItemFailures") is None:
        return set()
    failures = response["batchItemFailures"]
    if not isinstance(failures, list):
        return set(batch)
    ids = {f.get("itemIdentifier") if isinstance(f, dict) else None for f in failures}
    return ids if ids <= batch else set(batch)


@dataclass
class BackgroundDiagnoseDrain:
    """Runs a drainer every ``interval`` seconds until stopped; backs off while deliveries fail."""

    drainer: DiagnoseDrainer
    interval: float = 0.2
    max_pause: float = 5.0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _wake: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> BackgroundDiagnoseDrain:
        self._thread = threading.Thread(target=self._run, name="memtool-diagnose", daemon=True)
        self._thread.start()
        return self

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        pause = self.interval
        while not self._stop.is_set():
            self._wake.wait(pause)
            self._wake.clear()
            if self._stop.is_set():
                break
            failures_before = self.drainer.failed_attempts
            try:
                self.drainer.drain()
            except Exception as exc:  # the queue itself failed: keep going, visibly
                message = f"{type(exc).__name__}: {str(exc)[:200]}"
                self.errors = [*self.errors[-9:], message]
                logger.warning("diagnose drain failed: %s", message)
                pause = min(self.max_pause, pause * 2)
                continue
            self.errors = []  # /health reports the feed failing only while it is
            failing = self.drainer.failed_attempts > failures_before
            pause = min(self.max_pause, pause * 2) if failing else self.interval

    def stop(self, final_drain_seconds: float = 10.0) -> None:
        """Stop the thread, then deliver what is visible (bounded); the rest waits in the file."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            if self._thread.is_alive():
                # A diagnosis still running: its batch stays in flight and comes back after its
                # visibility timeout on the next start. Waiting for the drain lock could hang.
                logger.warning("diagnose drain still busy at stop; its batch is delivered again on the next start")
                return
        deadline = time.monotonic() + final_drain_seconds
        while time.monotonic() < deadline:
            try:
                if self.drainer.drain(max_batches=1) == 0:
                    break
            except Exception as exc:  # what is left stays queued for the next start
                logger.warning("final diagnose drain failed: %s: %s", type(exc).__name__, exc)
                break
