"""DynamoDB stream → vector index: one record at a time, failures reported per record."""

from __future__ import annotations

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord

from memtool.flows.indexing import StreamChange
from memtool.observability import instrumented, metrics, tracer
from memtool.runtime import container

processor = BatchProcessor(event_type=EventType.DynamoDBStreams)


@tracer.capture_method
def record_handler(record: DynamoDBRecord) -> str:
    outcome = container.memory_indexer().apply(StreamChange.from_record(record.raw_event))
    metrics.add_metric(name=f"Index_{outcome}", unit=MetricUnit.Count, value=1)
    return outcome


@instrumented()
def lambda_handler(event: dict, context) -> PartialItemFailureResponse:
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
