"""POST /ask: answer a data question through AskFlow."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit

from memtool.api.ask import AskBody
from memtool.api.http import parse_json_body, parse_model
from memtool.api.resolver import caller, json_response, make_resolver
from memtool.runtime import container

logger = Logger(service="memtool")
tracer = Tracer(service="memtool")
metrics = Metrics(namespace="memtool", service="memtool")
app = make_resolver()


@app.post("/ask")
@tracer.capture_method
def ask():
    who = caller(app)
    body = parse_model(AskBody, parse_json_body(app.current_event.body))
    answer = container.ask_service().ask(who, body)
    metrics.add_metric(name=f"Ask_{answer.status}", unit=MetricUnit.Count, value=1)
    return json_response(200, answer.model_dump(mode="json"))


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict, context) -> dict:
    return app.resolve(event, context)
