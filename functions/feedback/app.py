"""POST /feedback, GET/PATCH /fewshots: learning from what follows an answer (feedback issue)."""

# No `from __future__ import annotations`: Powertools reads the routes' parameter types at run time.
from typing import Annotated, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.logging import correlation_paths

from memtool.api.memories import MemoryIdParam
from memtool.api.openapi import operation
from memtool.api.resolver import caller, make_resolver
from memtool.errors import NotImplementedYet

logger = Logger(service="memtool")
app = make_resolver()

# Until the learning issue defines them, these bodies are any JSON object (still parsed strictly).
PendingBody = Annotated[dict[str, Any] | None, Body(description="its shape arrives with the learning issue")]


@app.post("/feedback", **operation("Feedback on an answer (not yet available)", tag="learning", ok={}, errors=(501,)))
def feedback(body: PendingBody = None):
    caller(app)
    raise NotImplementedYet("feedback and credit assignment arrive with the learning issue", field="path")


@app.get("/fewshots", **operation("The few-shot library (not yet available)", tag="learning", ok={}, errors=(501,)))
def list_fewshots():
    caller(app)
    raise NotImplementedYet("the few-shot library arrives with the learning issue", field="path")


@app.patch(
    "/fewshots/<id>",
    **operation("Review a few-shot example (not yet available)", tag="learning", ok={}, errors=(404, 501)),
)
def review_fewshot(id: MemoryIdParam, body: PendingBody = None):  # noqa: A002 - the template's name
    caller(app)
    raise NotImplementedYet("few-shot review arrives with the learning issue", field="path")


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
def lambda_handler(event: dict, context) -> dict:
    return app.resolve(event, context)
