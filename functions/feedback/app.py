"""POST /feedback, GET /fewshots, POST /fewshots/{id}/approve|reject: learning from what follows
an answer, and the review of the few-shot candidates it makes; POST /charts/choice: the chart a
user picked for an answer's shape of data."""

# No `from __future__ import annotations`: Powertools reads the routes' parameter types at run time.
from collections.abc import Callable
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.logging import correlation_paths

from memtool.api.budget import answer_rate_limits, budgeted
from memtool.api.charts import ChartChoiceAnswer, ChartChoiceBody
from memtool.api.feedback import FeedbackAnswer, FeedbackBody, feedback_command
from memtool.api.fewshots import (
    FewshotListing,
    FewshotStatus,
    FewshotStatusParam,
    FewshotView,
    ReviewBody,
    fewshot_view,
    memory_status,
    require_reviewer,
)
from memtool.api.identity import Identity
from memtool.api.memories import CursorParam, LimitParam, MemoryIdParam
from memtool.api.openapi import operation
from memtool.api.resolver import caller, json_response, make_resolver
from memtool.errors import ValidationFailed
from memtool.observability import instrumented
from memtool.runtime import container
from memtool.runtime.api_writes import idempotent_write
from memtool.runtime.budget import spend_request

app = make_resolver()
answer_rate_limits(app)  # 429 rate_limited with Retry-After

@app.post(
    "/feedback",
    **budgeted(
        operation(
            "Feedback on an answer: reward, credit to the memories it applied, corrections, few-shot candidates",
            tag="learning",
            ok={200: FeedbackAnswer},
            errors=(403, 404, 409, 422),
            idempotent=True,
        )
    ),
)
def feedback(body: Annotated[FeedbackBody, Body()]):
    if not body.says_something():
        raise ValidationFailed("give a rating (-1, 0 or 1), signals, a comment or a correction", field="rating")

    def perform(who: Identity) -> dict[str, Any]:
        spend_request(who)  # fair use: the tenant's request budget, shared with POST /ask
        outcome = container.feedback_service().give(who, feedback_command(body))
        return {"status_code": 200, "body": FeedbackAnswer.model_validate(outcome.as_dict()).model_dump(mode="json")}

    return _write("feedback", body.model_dump(mode="json"), perform, who=caller(app))


@app.post(
    "/charts/choice",
    **operation(
        "Keep the chart picked among an answer's candidates for that shape of data: the next answer of that shape uses it",
        tag="learning",
        ok={200: ChartChoiceAnswer},
        errors=(404, 409, 422),
        idempotent=True,
        description="Written as the caller's profile memory display.chart_for.<shape> (a new version replaces the last); "
        "the next answer whose data has that shape draws it and cites the memory. 400 on chart_type when that chart cannot "
        "draw the shape.",
    ),
)
def choose_chart(body: Annotated[ChartChoiceBody, Body()]):
    def perform(who: Identity) -> dict[str, Any]:
        chosen = chart_choices().choose(who, body.episode_id, body.chart_type.value)
        answer = ChartChoiceAnswer(memory=chosen.memory, shape=chosen.shape, chart_type=chosen.chart_type, replaced=chosen.replaced)
        return {"status_code": 200, "body": answer.model_dump(mode="json")}

    return _write("chart_choice", body.model_dump(mode="json"), perform, who=caller(app))


def chart_choices():  # -> ChartChoiceService, built per request over the process's adapters
    from memtool.flows.chart_choice import ChartChoiceService

    return ChartChoiceService(container.memory_store(), container.memory_service(), container.clock())


def _reviewer() -> Identity:
    who = caller(app)
    require_reviewer(who)
    return who


def _write(operation_name: str, request: Any, perform: Callable[[Identity], dict[str, Any]], who: Identity | None = None) -> Response:
    """Run a write once per Idempotency-Key (as /memories writes do) and answer its outcome."""
    return idempotent_write(app, who or _reviewer(), operation_name, request, perform)


ReviewBodyParam = Annotated[ReviewBody | None, Body(description="why (optional); the body may be left out")]


@app.get(
    "/fewshots",
    **operation("The few-shot library by status (admins)", tag="learning", ok={200: FewshotListing}, errors=(403,)),
)
def list_fewshots(
    status: FewshotStatusParam = FewshotStatus.PENDING_REVIEW,
    cursor: CursorParam = None,
    limit: LimitParam = 20,
):
    who = _reviewer()
    page = container.fewshot_library().list(who.tenant, memory_status(status), cursor=cursor, limit=limit)
    listing = FewshotListing(items=[fewshot_view(r) for r in page.items], next_cursor=page.next_cursor)
    return json_response(200, listing.model_dump(mode="json"))


@app.post(
    "/fewshots/<id>/approve",
    **operation(
        "Approve a pending few-shot candidate (admins; not its author)",
        tag="learning",
        ok={200: FewshotView},
        errors=(403, 404, 409, 422),
        idempotent=True,
    ),
)
def approve_fewshot(id: MemoryIdParam, body: ReviewBodyParam = None):  # noqa: A002 - the template's name
    reason = body.reason if body else None

    def perform(who: Identity) -> dict[str, Any]:
        record = container.fewshot_library().approve(who.tenant, id, who.user, reason)
        return {"status_code": 200, "body": fewshot_view(record).model_dump(mode="json")}

    return _write("fewshot_approve", {"id": id, "reason": reason}, perform)


@app.post(
    "/fewshots/<id>/reject",
    **operation(
        "Reject a pending few-shot candidate (admins; not its author)",
        tag="learning",
        ok={200: FewshotView},
        errors=(403, 404, 409, 422),
        idempotent=True,
    ),
)
def reject_fewshot(id: MemoryIdParam, body: ReviewBodyParam = None):  # noqa: A002 - the template's name
    reason = body.reason if body else None

    def perform(who: Identity) -> dict[str, Any]:
        record = container.fewshot_library().reject(who.tenant, id, who.user, reason)
        return {"status_code": 200, "body": fewshot_view(record).model_dump(mode="json")}

    return _write("fewshot_reject", {"id": id, "reason": reason}, perform)


@instrumented(correlation_id_path=correlation_paths.API_GATEWAY_REST, emit_metrics=False)
def lambda_handler(event: dict, context) -> dict:
    return app.resolve(event, context)
