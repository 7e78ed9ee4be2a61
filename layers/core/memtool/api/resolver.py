"""The REST resolver every API handler shares: error mapping and identity in one place."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError

from memtool.api.http import status_for
from memtool.api.identity import Identity, identity_from_event
from memtool.errors import MemtoolError
from memtool.runtime.settings import get_settings

logger = Logger(service="memtool")


def json_response(status_code: int, body: Any = None, headers: dict[str, str] | None = None) -> Response:
    if body is None:
        return Response(status_code=status_code, body="", headers=headers)
    return Response(
        status_code=status_code,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(body, ensure_ascii=False),
        headers=headers,
    )


def make_resolver() -> APIGatewayRestResolver:
    app = APIGatewayRestResolver(strip_prefixes=None)

    @app.exception_handler(MemtoolError)
    def domain_error(error: MemtoolError) -> Response:
        status = status_for(error)
        if status >= 500:
            logger.error("request failed", extra={"error": error.to_body()})
        return json_response(status, error.to_body())

    @app.not_found
    def no_route(_: NotFoundError) -> Response:
        return json_response(404, {"error": "not_found", "message": "no such route", "field": "path"})

    @app.exception_handler(Exception)
    def unexpected(error: Exception) -> Response:
        logger.exception("unhandled error")
        return json_response(500, {"error": "internal_error", "message": "the request could not be completed"})

    return app


def caller(app: APIGatewayRestResolver) -> Identity:
    return identity_from_event(app.current_event.raw_event, get_settings())
