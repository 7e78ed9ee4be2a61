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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from memtool.diagnosis.queue import QueuedMessage, SQLiteDiagnosisQueue
from memtool.runtime.diagnose_batch import sqs_event
from memtool.runtime.lambda_context import LocalLambdaContext, discard_unpublished_metrics
from memtool.runtime.polling import BackgroundDrain

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
        except Exception as exc:  # noqa: BLE001 - the whole batch failed, as an uncaught error in Lambda would
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
    named = {i for i in ids if isinstance(i, str) and i in batch}
    return named if len(named) == len(ids) else set(batch)


@dataclass
class BackgroundDiagnoseDrain(BackgroundDrain):
    """The diagnose drain in a background thread (see ``BackgroundDrain``)."""

    drainer: DiagnoseDrainer

    thread_name: ClassVar[str] = "memtool-diagnose"
    what: ClassVar[str] = "diagnose drain"
    join_seconds: ClassVar[float] = 30.0
