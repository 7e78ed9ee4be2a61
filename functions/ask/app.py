"""POST /ask: answer a data question through AskFlow."""

# No `from __future__ import annotations`: Powertools reads the routes' parameter types at run
# time, through decorators whose globals are not this module's.
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit

from memtool.api.ask import AskAnswer, AskBody
from memtool.api.budget import answer_rate_limits, budgeted
from memtool.api.identity import Identity
from memtool.api.openapi import operation
from memtool.api.resolver import caller, make_resolver
from memtool.observability import instrumented, metrics, tracer
from memtool.runtime import container
from memtool.runtime.api_writes import idempotent_write
from memtool.runtime.budget import spend_request

app = make_resolver()
answer_rate_limits(app)  # 429 rate_limited with Retry-After


@app.post(
    "/ask",
    **budgeted(
        operation(
            "Ask a data question; a failed flow is a 200 with status failed and an error",
            tag="ask",
            ok={200: AskAnswer},
            errors=(409, 422, 503),
            idempotent=True,
        )
    ),
)
@tracer.capture_method
def ask(body: Annotated[AskBody, Body()]):
    """A retry with the same Idempotency-Key answers the first answer: it never starts a second flow
    (nor spends the tenant's request budget again)."""

    def perform(who: Identity) -> dict[str, Any]:
        spend_request(who)  # fair use: a tenant over its budget gets a 429 before any flow starts
        answer = container.ask_service().ask(who, body.command())
        metrics.add_metric(name=f"Ask_{answer.status}", unit=MetricUnit.Count, value=1)
        if answer.cache is not None:  # hits by kind, misses by reason (refusals are counted by the cache itself)
            outcome = "Hit" if answer.cache.get("hit") else "Miss"
            metrics.add_metric(name=f"Cache{outcome}_{answer.cache.get('reason')}", unit=MetricUnit.Count, value=1)
        return {"status_code": 200, "body": answer.model_dump(mode="json")}

    return idempotent_write(app, caller(app), "ask", body.model_dump(mode="json"), perform)


@instrumented(correlation_id_path=correlation_paths.API_GATEWAY_REST)
def lambda_handler(event: dict, context) -> dict:
    return app.resolve(event, context)
