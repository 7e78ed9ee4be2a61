"""POST /ask: answer a data question through AskFlow (filled by the ask issue)."""

from __future__ import annotations

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging import correlation_paths

from memtool.api.resolver import caller, make_resolver
from memtool.errors import NotImplementedYet

logger = Logger(service="memtool")
app = make_resolver()


@app.post("/ask")
def ask():
    caller(app)
    raise NotImplementedYet("asking arrives with the AskFlow state machine", field="path")


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
def lambda_handler(event: dict, context) -> dict:
    return app.resolve(event, context)
