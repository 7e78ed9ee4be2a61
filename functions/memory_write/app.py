"""POST/GET/PATCH/DELETE /memories: explicit memory writes, reads, edits and forgetting;
GET /memories/search: recall as the ask flow sees it, for debugging."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit

from memtool.api.http import parse_json_body, parse_model
from memtool.api.idempotency import idempotency_key, run_once
from memtool.api.memories import (
    CreateMemoryBody,
    GetMemoryQuery,
    ListMemoriesQuery,
    PatchMemoryBody,
    SearchMemoriesQuery,
    memory_view,
    recall_view,
)
from memtool.api.resolver import caller, json_response, make_resolver
from memtool.retrieval.recall import RecallRequest
from memtool.runtime import container
from memtool.runtime.settings import get_settings

logger = Logger(service="memtool")
tracer = Tracer(service="memtool")
metrics = Metrics(namespace="memtool", service="memtool")
app = make_resolver()


def _write(operation: str, request: Any, perform) -> Any:
    who = caller(app)
    settings = get_settings()
    outcome = run_once(
        idempotency_key(app.current_event.headers),
        who,
        operation,
        request,
        lambda: perform(who),
        persistence=container.idempotency_store(),
        ttl_seconds=settings.idempotency_ttl_seconds,
        lambda_context=app.lambda_context,
    )
    return json_response(outcome["status_code"], outcome["body"])


@app.post("/memories")
@tracer.capture_method
def create_memory():
    raw = parse_json_body(app.current_event.body)
    body = parse_model(CreateMemoryBody, raw)

    def perform(who):
        result = container.memory_service().remember(who, body)
        metrics.add_metric(name="MemoriesWritten", unit=MetricUnit.Count, value=1)
        return {
            "status_code": 201 if result.created else 200,
            "body": {
                "memory": memory_view(result.record),
                "created": result.created,
                "unchanged": result.unchanged,
                "superseded": None
                if result.superseded is None
                else {"version": result.superseded.version, "content": result.superseded.content},
                "redactions": result.redactions,
            },
        }

    return _write("create", raw, perform)


@app.get("/memories")
@tracer.capture_method
def list_memories():
    query = parse_model(ListMemoriesQuery, dict(app.current_event.query_string_parameters or {}), prefix=None)
    page = container.memory_service().browse(caller(app), query)
    return json_response(200, {"items": [memory_view(r) for r in page.items], "next_cursor": page.next_cursor})


@app.get("/memories/search")
@tracer.capture_method
def search_memories():
    query = parse_model(SearchMemoriesQuery, dict(app.current_event.query_string_parameters or {}))
    who = caller(app)
    result = container.recall().recall(
        RecallRequest(tenant=who.tenant, user=who.user, text=query.q, route=query.route, tools=query.tool_names)
    )
    metrics.add_metric(name="RecallFallback", unit=MetricUnit.Count, value=int(not result.coverage.index_available))
    return json_response(200, recall_view(result))


@app.get("/memories/<memory_id>")
@tracer.capture_method
def get_memory(memory_id: str):
    query = parse_model(GetMemoryQuery, dict(app.current_event.query_string_parameters or {}))
    service = container.memory_service()
    who = caller(app)
    record = service.recall_one(who, memory_id, version=query.version)
    body: dict[str, Any] = {"memory": memory_view(record)}
    if query.history:
        body["history"] = [memory_view(r) for r in service.history(who, memory_id)]
    return json_response(200, body)


@app.patch("/memories/<memory_id>")
@tracer.capture_method
def patch_memory(memory_id: str):
    raw = parse_json_body(app.current_event.body)
    body = parse_model(PatchMemoryBody, raw)

    def perform(who):
        result = container.memory_service().revise(who, memory_id, body)
        return {
            "status_code": 200,
            "body": {
                "memory": memory_view(result.record),
                "previous_version": result.superseded.version if result.superseded else None,
                "redactions": result.redactions,
            },
        }

    return _write("patch", {"id": memory_id, "body": raw}, perform)


@app.delete("/memories/<memory_id>")
@tracer.capture_method
def forget_memory(memory_id: str):
    def perform(who):
        container.memory_service().forget(who, memory_id)
        metrics.add_metric(name="MemoriesForgotten", unit=MetricUnit.Count, value=1)
        return {"status_code": 204, "body": None}

    return _write("forget", {"id": memory_id}, perform)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict, context) -> dict:
    return app.resolve(event, context)
