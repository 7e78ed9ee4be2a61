"""POST/GET/PATCH/DELETE /memories: explicit memory writes, reads, edits and forgetting;
GET /memories/search: recall as the ask flow sees it, for debugging; GET/PUT /model and
GET /model/history: the tenant's semantic model, stored as versioned knowledge (curators write it);
GET /knowledge/stale: shared memories whose dependencies moved on (curators);
POST/GET/DELETE /sources and GET /sources/{id}/read: versioned sources and their paged reads;
POST/GET /proposals and POST /proposals/{id}/accept|reject|rebase: changes to shared definitions;
POST/GET /prefill, GET /suggestions, POST /suggestions/{id}/override|review: pre-fill suggestions;
POST /maintenance/run (admins) and GET /conflicts, POST /conflicts/{id}/resolve: the lifecycle."""

# No `from __future__ import annotations`: Powertools reads the routes' parameter types at run
# time, through decorators whose globals are not this module's.
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Body, Query
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit

from memtool.api.http import ErrorBody
from memtool.api.maintenance import (
    ConflictListing,
    ConflictResolved,
    MaintenanceRunAnswer,
    MaintenanceRunBody,
    ResolveConflictBody,
    conflict_listing,
)
from memtool.api.memories import (
    ID_PATTERN,
    CreateMemoryBody,
    CursorParam,
    DependencyView,
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
    StaleDefinition,
    StaleItem,
    StaleListing,
    StatusParam,
    SupersededView,
    ToolsParam,
    VersionParam,
    recall_view,
    tool_names,
)
from memtool.api.model import (
    ModelHistory,
    ModelInvalidBody,
    ModelRead,
    ModelRejected,
    ModelVersionParam,
    ModelWritten,
    PutModelBody,
    model_history,
    model_invalid,
    model_read,
    model_written,
)
from memtool.api.openapi import operation
from memtool.api.prefill import (
    CreatePrefillBody,
    OverrideBody,
    PrefillIdParam,
    PrefillTaskView,
    ReviewBody,
    ReviewStateParam,
    SuggestionCursorParam,
    SuggestionIdParam,
    SuggestionLimitParam,
    SuggestionsListing,
    SuggestionView,
    prefill_task_view,
    suggestion_view,
    suggestions_listing,
)
from memtool.api.proposals import (
    AcceptProposalBody,
    CreateProposalBody,
    ProposalCursorParam,
    ProposalDecided,
    ProposalIdParam,
    ProposalLimitParam,
    ProposalsListing,
    ProposalStatusParam,
    ProposalView,
    RebaseProposalBody,
    RejectProposalBody,
    proposal_decided,
    proposal_view,
    proposals_listing,
)
from memtool.api.resolver import caller, json_response, make_resolver
from memtool.api.sources import (
    CreateSourceBody,
    OffsetParam,
    ReadLimitParam,
    SourceCursorParam,
    SourceHistoryParam,
    SourceIdParam,
    SourceLimitParam,
    SourcePageView,
    SourceRead,
    SourcesListing,
    SourceVersionParam,
    SourceWritten,
    source_page,
    source_view,
    source_written,
    sources_listing,
)
from memtool.errors import MemtoolError
from memtool.knowledge.sources import source_digest
from memtool.memory.records import MemoryScope
from memtool.observability import instrumented, metrics, tracer
from memtool.retrieval.recall import RecallRequest
from memtool.runtime import container, knowledge, maintenance
from memtool.runtime.api_writes import idempotent_write

app = make_resolver()


@app.exception_handler(ModelRejected)
def model_refused(error: ModelRejected):
    return json_response(422, model_invalid(error).model_dump(mode="json"))


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
    **operation("List the caller's (or the tenant's) memories", tag="memories", ok={200: MemoryListing}, errors=(403,)),
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
    **operation("Read a memory, a past version, or its history", tag="memories", ok={200: MemoryRead}, errors=(403, 404)),
)
@tracer.capture_method
def get_memory(
    id: MemoryIdParam,  # noqa: A002 - the template's name for it
    version: VersionParam = None,
    history: HistoryParam = False,
):
    service = container.memory_service()
    who = caller(app)
    record = service.recall_one(who, id, version=version)
    dependencies = service.dependencies(record)
    read = MemoryRead(
        memory=record,
        stale=any(d.stale for d in dependencies),
        dependencies=[DependencyView.model_validate(d.as_dict()) for d in dependencies],
    )
    if not history:
        return json_response(200, read.model_dump(mode="json", exclude={"history"}))
    read.history = service.history(who, id)
    return json_response(200, read.model_dump(mode="json"))


DependencySourceParam = Annotated[str | None, Query(pattern=ID_PATTERN, description="which source, when it depends on several")]


@app.get(
    "/memories/<id>/read",
    **operation(
        "Read, a page at a time, the source a knowledge memory depends on, at the version it depends on",
        tag="memories",
        ok={200: SourcePageView},
        errors=(404,),
        description="The memory's dependency on a source (depends_on), or the one named by source_id: its text at the pinned "
        "version, as GET /sources/{id}/read answers it (stale: a newer version exists). 404 naming source_id when the "
        "memory depends on no such source.",
    ),
)
@tracer.capture_method
def read_memory_source(
    id: MemoryIdParam,  # noqa: A002
    source_id: DependencySourceParam = None,
    offset: OffsetParam = 0,
    limit: ReadLimitParam = 16_000,
):
    who = caller(app)
    record = container.memory_service().recall_one(who, id)  # the caller may read the memory
    page = knowledge.source_library().read_dependency(who, record, source_id, offset=offset, limit=limit)
    return json_response(200, source_page(page).model_dump(mode="json"))


@app.get(
    "/knowledge/stale",
    **operation(
        "Shared memories whose dependencies moved on or are gone (curators)",
        tag="memories",
        ok={200: StaleListing},
        errors=(403,),
        description="Each memory with every dependency it declared (depends_on) and that dependency's state now: "
        "newer when a later version exists, gone when it was deleted (docs/knowledge.md).",
    ),
)
@tracer.capture_method
def list_stale_knowledge():
    who, service = caller(app), container.memory_service()
    found = service.stale_knowledge(who)
    try:
        catalog = container.tenant_model(who.tenant).catalog
    except MemtoolError:  # no model for the tenant (yet): no definitions to check
        catalog = None
    definitions = service.stale_definitions(who, catalog) if catalog is not None else []
    listing = StaleListing(
        items=[
            StaleItem(memory=record, dependencies=[DependencyView.model_validate(d.as_dict()) for d in states])
            for record, states in found
        ],
        definitions=[
            StaleDefinition(kind=kind, name=name, dependencies=[DependencyView.model_validate(d.as_dict()) for d in states])
            for kind, name, states in definitions
        ],
    )
    return json_response(200, listing.model_dump(mode="json"))


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


# ---- sources: the documents definitions come from (docs/knowledge.md) --------------------------


@app.post(
    "/sources",
    **operation(
        "Store a source (DDL, ETL SQL or a document): its next version when the text differs (curators)",
        tag="sources",
        ok={201: SourceWritten, 200: SourceWritten},
        errors=(403, 409, 422),
        idempotent=True,
        description="201 for a new source (version 1), 200 for a new version or, with unchanged: true, for the same text "
        "as the version in force (nothing is stored). The text is up to 2 MiB of UTF-8; the body may be up to 4 MiB "
        "and 64 KiB, room for JSON escapes.",
    ),
)
@tracer.capture_method
def create_source(body: Annotated[CreateSourceBody, Body()]):
    def perform(who):
        written = knowledge.source_library().put(who, body.name, body.kind, body.text)
        if not written.unchanged:
            metrics.add_metric(name="SourceVersionsStored", unit=MetricUnit.Count, value=1)
        return {"status_code": 201 if written.created else 200, "body": source_written(written).model_dump(mode="json")}

    # The key's request is the text's digest, not the text: the idempotency record stays small.
    request = {"name": body.name, "kind": body.kind.value, "sha256": source_digest(body.text)}
    return _write("create_source", request, perform)


@app.get(
    "/sources",
    **operation("The tenant's sources, each at its newest version", tag="sources", ok={200: SourcesListing}),
)
@tracer.capture_method
def list_sources(cursor: SourceCursorParam = None, limit: SourceLimitParam = 20):
    listing = knowledge.source_library().list(caller(app), cursor=cursor, limit=limit)
    return json_response(200, sources_listing(listing).model_dump(mode="json"))


@app.get(
    "/sources/<id>",
    **operation("A source version's metadata (default: the newest), or its history", tag="sources", ok={200: SourceRead}, errors=(404,)),
)
@tracer.capture_method
def get_source(id: SourceIdParam, version: SourceVersionParam = None, history: SourceHistoryParam = False):  # noqa: A002
    library, who = knowledge.source_library(), caller(app)
    read = SourceRead(source=source_view(library.get(who, id, version)))
    if not history:
        return json_response(200, read.model_dump(mode="json", exclude={"history"}))
    read.history = [source_view(v) for v in library.history(who, id)]
    return json_response(200, read.model_dump(mode="json"))


@app.get(
    "/sources/<id>/read",
    **operation(
        "Read a source version's text, a page at a time",
        tag="sources",
        ok={200: SourcePageView},
        errors=(404,),
        description="limit characters (code points, at most 16,000) from offset; next_offset is the next page's, null on "
        "the last, and the pages of one version concatenate to its text. Naming an old version answers it with "
        "stale: true and the newest version in latest_version.",
    ),
)
@tracer.capture_method
def read_source(
    id: SourceIdParam,  # noqa: A002
    version: SourceVersionParam = None,
    offset: OffsetParam = 0,
    limit: ReadLimitParam = 16_000,
):
    page = knowledge.source_library().read(caller(app), id, version=version, offset=offset, limit=limit)
    return json_response(200, source_page(page).model_dump(mode="json"))


@app.delete(
    "/sources/<id>",
    **operation(
        "Delete a source, every version of it and its texts (curators); what depends on it becomes stale",
        tag="sources",
        ok={204: None},
        errors=(403, 404, 409, 422),
        idempotent=True,
    ),
)
@tracer.capture_method
def delete_source(id: SourceIdParam):  # noqa: A002
    def perform(who):
        knowledge.source_library().delete(who, id)
        metrics.add_metric(name="SourcesDeleted", unit=MetricUnit.Count, value=1)
        return {"status_code": 204, "body": None}

    return _write("delete_source", {"id": id}, perform)


# ---- proposals: changes to shared definitions that curators review (docs/knowledge.md) ----------


@app.post(
    "/proposals",
    **operation(
        "Propose a change to a shared memory (a knowledge memory or a tenant correction), or propose your own correction",
        tag="proposals",
        ok={201: ProposalView},
        errors=(404, 409, 422),
        idempotent=True,
        description="Anyone of the tenant proposes; curators accept or reject. With from_memory_id (one of your own "
        "memories) and no target_id, the target is the shared memory of the same kind and key, and the change that "
        "memory's content (and value).",
    ),
)
@tracer.capture_method
def create_proposal(body: Annotated[CreateProposalBody, Body()]):
    def perform(who):
        proposal = knowledge.proposal_service().propose(
            who,
            reason=body.reason,
            target_id=body.target_id,
            change=body.change.fields() if body.change is not None else None,
            from_memory_id=body.from_memory_id,
        )
        metrics.add_metric(name="ProposalsMade", unit=MetricUnit.Count, value=1)
        return {"status_code": 201, "body": proposal_view(proposal).model_dump(mode="json")}

    return _write("create_proposal", body.model_dump(mode="json", exclude_unset=True), perform)


@app.get(
    "/proposals",
    **operation("Proposals: a curator's view is the tenant's, a user's their own", tag="proposals", ok={200: ProposalsListing}),
)
@tracer.capture_method
def list_proposals(status: ProposalStatusParam = None, cursor: ProposalCursorParam = None, limit: ProposalLimitParam = 20):
    listing = knowledge.proposal_service().list(caller(app), status=status, cursor=cursor, limit=limit)
    return json_response(200, proposals_listing(listing).model_dump(mode="json"))


@app.get(
    "/proposals/<id>",
    **operation("A proposal (its proposer's or a curator's)", tag="proposals", ok={200: ProposalView}, errors=(404,)),
)
@tracer.capture_method
def get_proposal(id: ProposalIdParam):  # noqa: A002
    return json_response(200, proposal_view(knowledge.proposal_service().get(caller(app), id)).model_dump(mode="json"))


def _decision_operation(summary: str, description: str) -> dict[str, Any]:
    kwargs = operation(summary, tag="proposals", ok={200: ProposalDecided}, errors=(403, 404, 409, 422), idempotent=True,
                       description=description)  # fmt: skip
    kwargs["responses"][403] = {**kwargs["responses"][403], "description": "proposals are decided by curators (role curator or admin)"}
    kwargs["responses"][409] = {
        **kwargs["responses"][409],
        "description": "proposal_outdated: the target moved past the proposal's base_version (rebase it); version_conflict: "
        "the proposal was already decided; or the same Idempotency-Key still in flight",
    }
    return kwargs


@app.post(
    "/proposals/<id>/accept",
    **_decision_operation(
        "Accept a proposal: the target's next version, with the proposal in its provenance (curators)",
        "The change as proposed, or the curator's edit of it (change), is written through the memory rules (sizes, PII, a "
        "correction's term and meaning) as the target's next version; its provenance.proposal is {proposal_id, proposer, "
        "reviewer}.",
    ),
)
@tracer.capture_method
def accept_proposal(id: ProposalIdParam, body: Annotated[AcceptProposalBody | None, Body(description="optional")] = None):  # noqa: A002
    edit = body.change.fields() if body is not None and body.change is not None else None
    reason = body.reason if body is not None else None

    def perform(who):
        decision = knowledge.proposal_service().accept(who, id, change=edit, reason=reason)
        metrics.add_metric(name="ProposalsAccepted", unit=MetricUnit.Count, value=1)
        return {"status_code": 200, "body": proposal_decided(decision).model_dump(mode="json")}

    sent = None if body is None else body.model_dump(mode="json", exclude_unset=True)
    return _write("accept_proposal", {"id": id, "body": sent}, perform)


@app.post(
    "/proposals/<id>/reject",
    **_decision_operation("Reject a proposal with a reason (curators): nothing else changes", "The target stays as it is."),
)
@tracer.capture_method
def reject_proposal(id: ProposalIdParam, body: Annotated[RejectProposalBody, Body()]):  # noqa: A002
    def perform(who):
        decision = knowledge.proposal_service().reject(who, id, reason=body.reason)
        metrics.add_metric(name="ProposalsRejected", unit=MetricUnit.Count, value=1)
        return {"status_code": 200, "body": proposal_decided(decision).model_dump(mode="json")}

    return _write("reject_proposal", {"id": id, "body": body.model_dump(mode="json")}, perform)


@app.post(
    "/proposals/<id>/rebase",
    **operation(
        "Re-base an outdated proposal onto its target's version now, optionally with a new change (its proposer or a curator)",
        tag="proposals",
        ok={200: ProposalView},
        errors=(403, 404, 409, 422),
        idempotent=True,
    ),
)
@tracer.capture_method
def rebase_proposal(id: ProposalIdParam, body: Annotated[RebaseProposalBody | None, Body(description="optional")] = None):  # noqa: A002
    change = body.change.fields() if body is not None and body.change is not None else None

    def perform(who):
        proposal = knowledge.proposal_service().rebase(who, id, change=change)
        return {"status_code": 200, "body": proposal_view(proposal).model_dump(mode="json")}

    sent = None if body is None else body.model_dump(mode="json", exclude_unset=True)
    return _write("rebase_proposal", {"id": id, "body": sent}, perform)


# ---- pre-fill: suggestions from DDL and ETL SQL, kept apart from human values ---------------------


@app.post(
    "/prefill",
    **operation(
        "Pre-fill definitions from sources (DDL, ETL SQL): freeze the input, and run it (curators)",
        tag="prefill",
        ok={201: PrefillTaskView},
        errors=(403, 404, 409, 422),
        idempotent=True,
        description="The task freezes its input: the sources at their versions now, an input_fingerprint, and the version "
        "of every suggestion it will write (expected_version). Run, it writes a suggestion only where that is still the "
        "version; a suggestion whose target moved on (a human override) is superseded and nothing is overwritten.",
    ),
)
@tracer.capture_method
def create_prefill(body: Annotated[CreatePrefillBody, Body()]):
    def perform(who):
        service = knowledge.prefill_service()
        task = service.plan(who, list(body.source_ids))
        if body.run:
            task = service.run(who, task.id)
        metrics.add_metric(name="PrefillTasks", unit=MetricUnit.Count, value=1)
        return {"status_code": 201, "body": prefill_task_view(task).model_dump(mode="json")}

    return _write("create_prefill", body.model_dump(mode="json"), perform)


@app.get(
    "/prefill/<id>", **operation("A pre-fill task: its frozen input and outcomes", tag="prefill", ok={200: PrefillTaskView}, errors=(404,))
)
@tracer.capture_method
def get_prefill(id: PrefillIdParam):  # noqa: A002
    return json_response(200, prefill_task_view(knowledge.prefill_service().get(caller(app), id)).model_dump(mode="json"))


@app.post(
    "/prefill/<id>/run",
    **operation(
        "Run a planned pre-fill task on its frozen input (curators; once)",
        tag="prefill",
        ok={200: PrefillTaskView},
        errors=(403, 404, 409, 422),
        idempotent=True,
    ),
)
@tracer.capture_method
def run_prefill(id: PrefillIdParam):  # noqa: A002
    def perform(who):
        task = knowledge.prefill_service().run(who, id)
        return {"status_code": 200, "body": prefill_task_view(task).model_dump(mode="json")}

    return _write("run_prefill", {"id": id}, perform)


@app.get(
    "/suggestions",
    **operation("The tenant's pre-fill suggestions, each with its human override and effective value", tag="prefill",
                ok={200: SuggestionsListing}),  # fmt: skip
)
@tracer.capture_method
def list_suggestions(review_state: ReviewStateParam = None, cursor: SuggestionCursorParam = None, limit: SuggestionLimitParam = 20):
    listing = knowledge.prefill_service().suggestions(caller(app), review_state=review_state, cursor=cursor, limit=limit)
    return json_response(200, suggestions_listing(listing).model_dump(mode="json"))


@app.get("/suggestions/<id>", **operation("A suggestion", tag="prefill", ok={200: SuggestionView}, errors=(404,)))
@tracer.capture_method
def get_suggestion(id: SuggestionIdParam):  # noqa: A002
    return json_response(200, suggestion_view(knowledge.prefill_service().suggestion(caller(app), id)).model_dump(mode="json"))


@app.post(
    "/suggestions/<id>/override",
    **operation(
        "Set the human value of a suggested definition: it stays in effect whatever is suggested later (curators)",
        tag="prefill",
        ok={200: SuggestionView},
        errors=(403, 404, 409, 422),
        idempotent=True,
    ),
)
@tracer.capture_method
def override_suggestion(id: SuggestionIdParam, body: Annotated[OverrideBody, Body()]):  # noqa: A002
    def perform(who):
        item = knowledge.prefill_service().override(who, id, text=body.text, expected_version=body.expected_version, reason=body.reason)
        return {"status_code": 200, "body": suggestion_view(item).model_dump(mode="json")}

    return _write("override_suggestion", {"id": id, "body": body.model_dump(mode="json")}, perform)


@app.post(
    "/suggestions/<id>/review",
    **operation("Mark a suggestion reviewed as it is (curators)", tag="prefill", ok={200: SuggestionView}, errors=(403, 404, 409, 422),
                idempotent=True),  # fmt: skip
)
@tracer.capture_method
def review_suggestion(id: SuggestionIdParam, body: Annotated[ReviewBody, Body()]):  # noqa: A002
    def perform(who):
        item = knowledge.prefill_service().review(who, id, expected_version=body.expected_version)
        return {"status_code": 200, "body": suggestion_view(item).model_dump(mode="json")}

    return _write("review_suggestion", {"id": id, "body": body.model_dump(mode="json")}, perform)


# ---- the semantic model ----------------------------------------------------------------------

_MODEL_MISSING = {
    "description": "model_missing: the tenant has no stored model (or no such version); the message says how to make one",
    "content": {"application/json": {"model": ErrorBody}},
}


def _model_operation(summary: str, *, ok: dict, errors: tuple[int, ...], description: str) -> dict[str, Any]:
    kwargs = operation(summary, tag="model", ok=ok, errors=errors, description=description)
    responses = kwargs["responses"]
    if 404 in responses:
        responses[404] = _MODEL_MISSING
    if 403 in responses:
        responses[403] = {**responses[403], "description": "the semantic model is written by curators (role curator or admin)"}
    if 409 in responses:
        responses[409] = {**responses[409], "description": "stale expected_version: retry with current_version (pull first)"}
    if 422 in responses:
        responses[422] = {
            "description": "model_invalid: the model was not stored (the version in force stays); every problem at its place",
            "content": {"application/json": {"model": ModelInvalidBody}},
        }
    return kwargs


@app.get(
    "/model",
    **_model_operation(
        "The tenant's semantic model in force (or a stored version)",
        ok={200: ModelRead},
        errors=(404,),
        description="The model as a curator stored it, with its stored version (expected_version of the next PUT).",
    ),
)
@tracer.capture_method
def get_model(version: ModelVersionParam = None):
    active = container.model_flow().get(caller(app), version)
    return json_response(200, model_read(active).model_dump(mode="json"))


@app.get(
    "/model/history",
    **_model_operation(
        "Every stored version of the tenant's semantic model, oldest first",
        ok={200: ModelHistory},
        errors=(404,),
        description="Who stored each version, when, and its model_version.",
    ),
)
@tracer.capture_method
def get_model_history():
    items = container.model_flow().history(caller(app))
    return json_response(200, model_history(items).model_dump(mode="json"))


@app.put(
    "/model",
    **_model_operation(
        "Store a new version of the tenant's semantic model (curators)",
        ok={200: ModelWritten, 201: ModelWritten},
        errors=(403, 409, 422),
        description="The model is parsed, its references resolved, and every metric compiled and run (LIMIT 0) on the "
        "tenant's warehouse, alone and by each of its dimensions; a model that fails is refused with every problem "
        "and the version in force stays. 201 for the tenant's first model, 200 for a new version.",
    ),
)
@tracer.capture_method
def put_model(body: Annotated[PutModelBody, Body()]):
    put = container.model_flow().put(caller(app), body.model, body.expected_version)
    metrics.add_metric(name="ModelVersionsStored", unit=MetricUnit.Count, value=1)
    return json_response(201 if put.model.version == 1 else 200, model_written(put).model_dump(mode="json"))


# ---- the lifecycle: maintenance runs and conflicts ------------------------------------------------


@app.post(
    "/maintenance/run",
    **operation(
        "Run maintenance over the caller's tenant (admins): decay, consolidate, conflicts, capacity, pii_rescan, reconcile",
        tag="maintenance",
        ok={200: MaintenanceRunAnswer, 202: MaintenanceRunAnswer},
        errors=(403,),
        writes=True,
        description="Locally MaintenanceFlow runs to the end and the answer is its report (200). In AWS the flow is a "
        "Standard execution: the answer is 202 with its ARN and the last run's report.",
    ),
)
@tracer.capture_method
def run_maintenance(body: Annotated[MaintenanceRunBody | None, Body(description="the steps (optional)")] = None):
    steps = [s.value for s in body.steps] if body is not None and body.steps else None
    answer = maintenance.maintenance_runs().run(caller(app), steps)
    metrics.add_metric(name="MaintenanceRuns", unit=MetricUnit.Count, value=1)
    return json_response(202 if answer["status"] == "running" else 200, MaintenanceRunAnswer.model_validate(answer).model_dump(mode="json"))


@app.get(
    "/conflicts",
    **operation(
        "Memories that contradict each other: a curator's view is the tenant's, a user's their own",
        tag="maintenance",
        ok={200: ConflictListing},
    ),
)
@tracer.capture_method
def list_conflicts():
    return json_response(200, conflict_listing(maintenance.conflict_service().list(caller(app))).model_dump(mode="json"))


@app.post(
    "/conflicts/<id>/resolve",
    **operation(
        "Resolve a conflict: keep one memory, archive the others (with history)",
        tag="maintenance",
        ok={200: ConflictResolved},
        errors=(404, 409),
    ),
)
@tracer.capture_method
def resolve_conflict(id: MemoryIdParam, body: Annotated[ResolveConflictBody, Body()]):  # noqa: A002
    resolved = maintenance.conflict_service().resolve(caller(app), id, body.keep)
    return json_response(200, ConflictResolved.model_validate(resolved).model_dump(mode="json"))


@instrumented(correlation_id_path=correlation_paths.API_GATEWAY_REST)
def lambda_handler(event: dict, context) -> dict:
    return app.resolve(event, context)
