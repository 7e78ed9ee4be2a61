"""Diagnosis: POST /diagnose, GET /episodes/{id}, POST /lessons/{id}/share, the review of diagnoses
(GET /diagnoses, POST /diagnoses/{id}/confirm|reject), and the diagnose queue.

API Gateway events go to the REST resolver; SQS events (negative feedback and failed episodes
the ask flow could not repair) go to the batch processor, which reports partial failures so only
the failed records are retried (and, after the redrive limit, land in the dead-letter queue).
"""

# No `from __future__ import annotations`: Powertools reads the routes' parameter types at run time.
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.logging import correlation_paths

from memtool.api.diagnose import (
    ConfirmBody,
    DiagnoseBody,
    DiagnosisAnswer,
    DiagnosisListing,
    EpisodeView,
    RejectBody,
    ReviewStatus,
    ReviewStatusParam,
    ShareBody,
)
from memtool.api.identity import Identity
from memtool.api.memories import MemoryIdParam, MemoryRead, memory_view
from memtool.api.openapi import operation
from memtool.api.resolver import caller, json_response, make_resolver
from memtool.observability import instrumented
from memtool.runtime import container
from memtool.runtime.api_writes import idempotent_write

app = make_resolver()


@app.post(
    "/diagnose",
    **operation(
        "Diagnose an episode: classify the failure, test hypotheses by running their repairs, keep the lesson",
        tag="learning",
        ok={200: DiagnosisAnswer},
        errors=(404, 409, 422),
        idempotent=True,
    ),
)
def diagnose(body: Annotated[DiagnoseBody, Body()]):
    from memtool.flows.diagnose import new_request_id

    def perform(who: Identity) -> dict[str, Any]:
        report = container.diagnosis_service().diagnose_episode(
            who,
            body.episode_id,
            reason="on_demand",
            request_id=new_request_id(body.episode_id, "api"),
            expected=body.expected,
            comment=body.comment,
        )
        answer = DiagnosisAnswer.model_validate(report.model_dump(mode="json", exclude={"schema_facts"}))
        return {"status_code": 200, "body": answer.model_dump(mode="json")}

    return idempotent_write(app, caller(app), "diagnose", body.model_dump(mode="json"), perform)


@app.get(
    "/episodes/<id>",
    **operation("An episode of the caller, with its diagnoses", tag="learning", ok={200: EpisodeView}, errors=(404,)),
)
def get_episode(id: MemoryIdParam):  # noqa: A002 - the path parameter's name
    view = container.diagnosis_service().episode_view(caller(app), id)
    return EpisodeView(episode=memory_view(view["episode"]), diagnoses=[memory_view(r) for r in view["diagnoses"]]).model_dump(mode="json")


@app.post(
    "/lessons/<id>/share",
    **operation(
        "Share a verified lesson with the tenant (curators)",
        tag="learning",
        ok={201: MemoryRead},
        errors=(403, 404, 409, 422),
        idempotent=True,
    ),
)
def share_lesson(
    id: MemoryIdParam,  # noqa: A002
    body: Annotated[ShareBody | None, Body(description="whose lesson, and whether its context goes with it (optional)")] = None,
):
    owner = body.owner if body is not None else None
    include_context = body.include_context if body is not None else False

    def perform(who: Identity) -> dict[str, Any]:
        record = container.diagnosis_service().share(who, id, owner=owner, include_context=include_context)
        return {"status_code": 201, "body": MemoryRead(memory=record).model_dump(mode="json")}

    request = {"id": id, "owner": owner, "include_context": include_context}
    return idempotent_write(app, caller(app), "share_lesson", request, perform)


@app.get(
    "/diagnoses",
    **operation(
        "Diagnoses waiting for a person (pending_review): a curator's view is the tenant's, a user's their own",
        tag="learning",
        ok={200: DiagnosisListing},
    ),
)
def list_diagnoses(status: ReviewStatusParam = ReviewStatus.PENDING_REVIEW):
    items = container.diagnosis_service().pending(caller(app))
    return json_response(200, {"items": [memory_view(r) for r in items]})


@app.post(
    "/diagnoses/<id>/confirm",
    **operation(
        "Confirm a pending diagnosis: its repair runs once more and, when it runs, it becomes an active lesson",
        tag="learning",
        ok={200: MemoryRead},
        errors=(403, 404, 409, 422),
        idempotent=True,
    ),
)
def confirm_diagnosis(
    id: MemoryIdParam,  # noqa: A002
    body: Annotated[ConfirmBody | None, Body(description="whose diagnosis, and which hypothesis (optional)")] = None,
):
    owner, hypothesis = (body.owner, body.hypothesis) if body is not None else (None, None)

    def perform(who: Identity) -> dict[str, Any]:
        record = container.diagnosis_service().confirm(who, id, owner=owner, hypothesis=hypothesis)
        return {"status_code": 200, "body": MemoryRead(memory=record).model_dump(mode="json")}

    return idempotent_write(app, caller(app), "confirm_diagnosis", {"id": id, "owner": owner, "hypothesis": hypothesis}, perform)


@app.post(
    "/diagnoses/<id>/reject",
    **operation(
        "Reject a pending diagnosis: it is archived with the reason",
        tag="learning",
        ok={200: MemoryRead},
        errors=(403, 404, 409, 422),
        idempotent=True,
    ),
)
def reject_diagnosis(
    id: MemoryIdParam,  # noqa: A002
    body: Annotated[RejectBody | None, Body(description="whose diagnosis, and why (optional)")] = None,
):
    owner, reason = (body.owner, body.reason) if body is not None else (None, None)

    def perform(who: Identity) -> dict[str, Any]:
        record = container.diagnosis_service().reject(who, id, owner=owner, reason=reason)
        return {"status_code": 200, "body": MemoryRead(memory=record).model_dump(mode="json")}

    return idempotent_write(app, caller(app), "reject_diagnosis", {"id": id, "owner": owner, "reason": reason}, perform)


def _run_request(request):
    container.diagnosis_service().run_request(request)


@instrumented(correlation_id_path=correlation_paths.API_GATEWAY_REST, emit_metrics=False)
def lambda_handler(event: dict, context) -> dict:
    if isinstance(event, dict) and isinstance(event.get("Records"), list):
        from memtool.runtime.diagnose_batch import process_diagnose_batch

        return process_diagnose_batch(event, context, _run_request)
    return app.resolve(event, context)
