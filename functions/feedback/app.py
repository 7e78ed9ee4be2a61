"""POST /feedback, GET/PATCH /fewshots: learning from what follows an answer (feedback issue)."""

from __future__ import annotations

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging import correlation_paths

from memtool.api.resolver import caller, make_resolver
from memtool.errors import NotImplementedYet

logger = Logger(service="memtool")
app = make_resolver()


@app.post("/feedback")
def feedback():
    caller(app)
    raise NotImplementedYet("feedback and credit assignment arrive with the learning issue", field="path")


@app.get("/fewshots")
def list_fewshots():
    caller(app)
    raise NotImplementedYet("the few-shot library arrives with the learning issue", field="path")


@app.patch("/fewshots/<fewshot_id>")
def review_fewshot(fewshot_id: str):
    caller(app)
    raise NotImplementedYet("few-shot review arrives with the learning issue", field="path")


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
def lambda_handler(event: dict, context) -> dict:
    return app.resolve(event, context)
