"""Idempotent API writes as every write route runs them: once per Idempotency-Key and caller,
with the persistence layer the container chose (DynamoDB in AWS, the SQLite file locally)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response

from memtool.api.idempotency import Outcome, idempotency_key, run_once
from memtool.api.identity import Identity
from memtool.api.resolver import json_response
from memtool.runtime import container
from memtool.settings import get_settings


def idempotent_write(
    app: APIGatewayRestResolver, who: Identity, operation: str, request: Any, perform: Callable[[Identity], Outcome]
) -> Response:
    """Run ``perform`` once for this request's Idempotency-Key (every time without one) and
    answer its outcome; a replay answers the first outcome."""
    outcome = run_once(
        idempotency_key(app.current_event.raw_event),
        who,
        operation,
        request,
        lambda: perform(who),
        persistence=container.idempotency_store(),
        ttl_seconds=get_settings().idempotency_ttl_seconds,
        lambda_context=app.lambda_context,
    )
    return json_response(outcome["status_code"], outcome["body"])
