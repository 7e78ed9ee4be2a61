"""POST /ask: answer a data question through AskFlow."""

# No `from __future__ import annotations`: Powertools reads the routes' parameter types at run
# time, through decorators whose globals are not this module's.
from typing import Annotated

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit

from memtool.api.ask import AskAnswer, AskBody
from memtool.api.openapi import operation
from memtool.api.resolver import caller, json_response, make_resolver
from memtool.runtime import container

logger = Logger(service="memtool")
tracer = Tracer(service="memtool")
metrics = Metrics(namespace="memtool", service="memtool")
app = make_resolver()


@app.post(
    "/ask",
    **operation(
        "Ask a data question; a failed flow is a 200 with status failed and an error",
        tag="ask",
        ok={200: AskAnswer},
    ),
)
@tracer.capture_method
def ask(body: Annotated[AskBody, Body()]):
    who = caller(app)
    answer = container.ask_service().ask(who, body)
    metrics.add_metric(name=f"Ask_{answer.status}", unit=MetricUnit.Count, value=1)
    if answer.cache is not None:  # hits by kind, misses by reason (refusals are counted by the cache itself)
        outcome = "Hit" if answer.cache.get("hit") else "Miss"
        metrics.add_metric(name=f"Cache{outcome}_{answer.cache.get('reason')}", unit=MetricUnit.Count, value=1)
    return json_response(200, answer.model_dump(mode="json"))


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict, context) -> dict:
    return app.resolve(event, context)
