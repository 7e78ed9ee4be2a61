"""POST /diagnose: causal diagnosis and verified repair of a failed episode (diagnosis issue)."""

from __future__ import annotations

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging import correlation_paths

from memtool.api.resolver import caller, make_resolver
from memtool.errors import NotImplementedYet

logger = Logger(service="memtool")
app = make_resolver()


@app.post("/diagnose")
def diagnose():
    caller(app)
    raise NotImplementedYet("diagnosis arrives with the learning issue", field="path")


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
def lambda_handler(event: dict, context) -> dict:
    return app.resolve(event, context)
