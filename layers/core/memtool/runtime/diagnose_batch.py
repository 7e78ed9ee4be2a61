"""One SQS batch of diagnose events into the diagnosis service, with a partial batch response.

DiagnoseFunction's event source is the diagnose queue with ``ReportBatchItemFailures``: each
record is parsed and run on its own, and only the records that failed are returned to the queue
(visible again after the visibility timeout, to the dead-letter queue after the redrive policy's
receives). A body that is not a ``DiagnoseRequest`` fails alone; it will fail the same way on
every receive, so the redrive policy is what takes it off the queue. ``sqs_event`` builds the
event Lambda's SQS poller would, for the local drain and the tests.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from memtool.diagnosis.queue import QueuedMessage
from memtool.diagnosis.requests import DiagnoseRequest

logger = logging.getLogger("memtool.diagnosis")

LOCAL_QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:memtool-diagnose"
LOCAL_REGION = "us-east-1"


class MalformedDiagnoseEvent(ValueError):
    """An SQS record whose body is not a diagnose event (a poison message)."""


def process_diagnose_batch(
    event: dict[str, Any], context: Any, run: Callable[[DiagnoseRequest], object]
) -> dict[str, Any]:
    """Run every record's request; returns ``{"batchItemFailures": [{"itemIdentifier": id}, ...]}``."""
    from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    def handle(record: SQSRecord) -> None:
        try:
            request = DiagnoseRequest.model_validate_json(record.body)
        except ValidationError as exc:
            # The body may hold a user's comment: log where it failed, not what it said.
            problems = "; ".join(
                f"{'.'.join(str(part) for part in error['loc']) or 'body'}: {error['msg']}"
                for error in exc.errors(include_input=False, include_url=False)
            )
            logger.warning("diagnose message %s is malformed (a poison message): %s", record.message_id, problems)
            raise MalformedDiagnoseEvent(problems) from exc
        try:
            run(request)
        except Exception as exc:
            logger.warning(
                "diagnose event %s (message %s, receive %s) failed: %s: %s",
                request.request_id,
                record.message_id,
                record.attributes.approximate_receive_count,
                type(exc).__name__,
                str(exc)[:200],
            )
            raise

    # A new processor per call: it holds the batch's state. When every record failed, still answer
    # with the list (not an exception), so the queue sees exactly which messages to return.
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    return dict(process_partial_response(event=event, record_handler=handle, processor=processor, context=context))


def sqs_event(
    messages: Sequence[QueuedMessage], *, queue_arn: str = LOCAL_QUEUE_ARN, region: str = LOCAL_REGION
) -> dict[str, Any]:
    """The Lambda event the SQS poller would send for these messages."""
    return {"Records": [_record(message, queue_arn, region) for message in messages]}


def _record(message: QueuedMessage, queue_arn: str, region: str) -> dict[str, Any]:
    sent_ms = str(int(message.first_sent_at.timestamp() * 1000))
    return {
        "messageId": message.message_id,
        "receiptHandle": message.receipt_handle,
        "body": message.body,
        "attributes": {
            "ApproximateReceiveCount": str(message.attempts),
            "SentTimestamp": sent_ms,
            "SenderId": "memtool-local",
            "ApproximateFirstReceiveTimestamp": sent_ms,
        },
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(message.body.encode("utf-8"), usedforsecurity=False).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }
