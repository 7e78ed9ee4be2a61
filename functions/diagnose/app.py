"""POST /diagnose: causal diagnosis and verified repair of a failed episode (diagnosis issue)."""

# No `from __future__ import annotations`: Powertools reads the routes' parameter types at run time.
from typing import Annotated, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.logging import correlation_paths

from memtool.api.openapi import operation
from memtool.api.resolver import caller, make_resolver
from memtool.errors import NotImplementedYet

logger = Logger(service="memtool")
app = make_resolver()

# Until the diagnosis issue defines it, the body is any JSON object (still parsed strictly).
PendingBody = Annotated[dict[str, Any] | None, Body(description="its shape arrives with the diagnosis issue")]


@app.post(
    "/diagnose", **operation("Diagnose a failed episode (not yet available)", tag="learning", ok={}, errors=(501,))
)
def diagnose(body: PendingBody = None):
    caller(app)
    raise NotImplementedYet("diagnosis (classify, test a repair, keep the lesson) arrives with the diagnosis release", field="path")


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
def lambda_handler(event: dict, context) -> dict:
    return app.resolve(event, context)
