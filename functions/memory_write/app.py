"""POST/GET/PATCH/DELETE /memories: explicit memory writes, reads, edits and forgetting;
GET /memories/search: recall as the ask flow sees it, for debugging."""

# No `from __future__ import annotations`: Powertools reads the routes' parameter types at run
# time, through decorators whose globals are not this module's.
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit

from memtool.api.memories import (
    CreateMemoryBody,
    CursorParam,
    HistoryParam,
    KindParam,
    LimitParam,
    ListMemoriesQuery,
    MemoryIdParam,
    MemoryListing,
    MemoryRead,
    MemoryRevised,
    MemoryWritten,
    PatchMemoryBody,
    RecallView,
    RouteParam,
    ScopeParam,
    SearchTextParam,
    SessionIdParam,
    StatusParam,
    SupersededView,
    ToolsParam,
    VersionParam,
    recall_view,
    tool_names,
)
from memtool.api.openapi import operation
from memtool.api.resolver import caller, json_response, make_resolver
from memtool.memory.records import MemoryScope
from memtool.observability import instrumented, metrics, tracer
from memtool.retrieval.recall import RecallRequest
from memtool.runtime import container
from memtool.runtime.api_writes import idempotent_write

app = make_resolver()


def _write(operation_name: str, request: Any, perform) -> Any:
    return idempotent_write(app, caller(app), operation_name, request, perform)


@app.post(
    "/memories",
    **operation(
        "Remember: a new memory, or a new version of the caller's slot named by key",
        tag="memories",
        ok={201: MemoryWritten, 200: MemoryWritten},
        errors=(403, 409, 422),
        idempotent=True,
    ),
)
@tracer.capture_method
def create_memory(body: Annotated[CreateMemoryBody, Body()]):
    def perform(who):
        result = container.memory_service().remember(who, body.command())
        metrics.add_metric(name="MemoriesWritten", unit=MetricUnit.Count, value=1)
        old = result.superseded
        written = MemoryWritten(
            memory=result.record,
            created=result.created,
            unchanged=result.unchanged,
            superseded=None if old is None else SupersededView(version=old.version, content=old.content),
            redactions=result.redactions,
        )
        return {"status_code": 201 if result.created else 200, "body": written.model_dump(mode="json")}

    return _write("create", body.model_dump(mode="json", exclude_unset=True), perform)


@app.get(
    "/memories",
    **operation("List the caller's (or the tenant's) memories", tag="memories", ok={200: MemoryListing}),
)
@tracer.capture_method
def list_memories(
    kind: KindParam = None,
    status: StatusParam = None,
    scope: ScopeParam = MemoryScope.USER,
    cursor: CursorParam = None,
    limit: LimitParam = 20,
):
    query = ListMemoriesQuery(kind=kind, status=status, scope=scope, cursor=cursor, limit=limit)
    page = container.memory_service().browse(caller(app), query.command())
    listing = MemoryListing(items=page.items, next_cursor=page.next_cursor, skipped=page.skipped)
    return json_response(200, listing.model_dump(mode="json"))


@app.get(
    "/memories/search",
    **operation("Recall for a text, as the ask flow would, with scores and coverage", tag="memories", ok={200: RecallView}),
)
@tracer.capture_method
def search_memories(q: SearchTextParam, route: RouteParam = "nl2sql_query", tools: ToolsParam = None):
    who = caller(app)
    result = container.recall().recall(
        RecallRequest(tenant=who.tenant, user=who.user, text=q, route=route, tools=tool_names(tools))
    )
    metrics.add_metric(name="RecallFallback", unit=MetricUnit.Count, value=int(not result.coverage.index_available))
    return json_response(200, recall_view(result))


@app.get(
    "/memories/<id>",
    **operation("Read a memory, a past version, or its history", tag="memories", ok={200: MemoryRead}, errors=(404,)),
)
@tracer.capture_method
def get_memory(
    id: MemoryIdParam,  # noqa: A002 - the template's name for it
    version: VersionParam = None,
    history: HistoryParam = False,
):
    service = container.memory_service()
    who = caller(app)
    read = MemoryRead(memory=service.recall_one(who, id, version=version))
    if not history:
        return json_response(200, read.model_dump(mode="json", exclude={"history"}))
    read.history = service.history(who, id)
    return json_response(200, read.model_dump(mode="json"))


@app.patch(
    "/memories/<id>",
    **operation(
        "Revise a memory: a new version, given the version the change was based on",
        tag="memories",
        ok={200: MemoryRevised},
        errors=(403, 404, 409, 422),
        idempotent=True,
    ),
)
@tracer.capture_method
def patch_memory(id: MemoryIdParam, body: Annotated[PatchMemoryBody, Body()]):  # noqa: A002
    def perform(who):
        result = container.memory_service().revise(who, id, body.command())
        revised = MemoryRevised(
            memory=result.record,
            previous_version=result.superseded.version if result.superseded else None,
            redactions=result.redactions,
        )
        return {"status_code": 200, "body": revised.model_dump(mode="json")}

    return _write("patch", {"id": id, "body": body.model_dump(mode="json", exclude_unset=True)}, perform)


@app.delete(
    "/memories/<id>",
    **operation(
        "Forget a memory and every version of it",
        tag="memories",
        ok={204: None},
        errors=(403, 404, 409, 422),
        idempotent=True,
    ),
)
@tracer.capture_method
def forget_memory(id: MemoryIdParam):  # noqa: A002
    def perform(who):
        container.memory_service().forget(who, id)
        metrics.add_metric(name="MemoriesForgotten", unit=MetricUnit.Count, value=1)
        return {"status_code": 204, "body": None}

    return _write("forget", {"id": id}, perform)


@app.delete(
    "/sessions/<id>",
    **operation(
        "End a session: its working memory (recent turns, this-time conditions) is cleared",
        tag="memories",
        ok={204: None},
        errors=(404, 422),
        idempotent=True,
    ),
)
@tracer.capture_method
def end_session(id: SessionIdParam):  # noqa: A002
    def perform(who):
        container.memory_service().end_session(who, id)
        return {"status_code": 204, "body": None}

    return _write("end_session", {"id": id}, perform)


@instrumented(correlation_id_path=correlation_paths.API_GATEWAY_REST)
def lambda_handler(event: dict, context) -> dict:
    return app.resolve(event, context)
