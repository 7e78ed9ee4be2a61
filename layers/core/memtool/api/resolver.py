"""The REST resolver every API handler shares: strict JSON bodies, validation, error mapping and
identity in one place.

Powertools validates each route's body, query and path parameters against the pydantic types the
route declares (the same types the OpenAPI document is generated from); a failure is a 400 naming
the field, as any other ValidationFailed.
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.middlewares.openapi_validation import OpenAPIRequestValidationMiddleware
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from memtool.api.http import status_for, validation_failed
from memtool.api.identity import Identity, identity_from_event
from memtool.api.json_body import body_limit, read_body
from memtool.errors import MemtoolError, ValidationFailed
from memtool.observability import logger
from memtool.settings import get_settings


def json_response(status_code: int, body: Any = None, headers: dict[str, str] | None = None) -> Response:
    if body is None:
        return Response(status_code=status_code, body="", headers=headers)
    return Response(
        status_code=status_code,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(body, ensure_ascii=False, allow_nan=False),
        headers=headers,
    )


class _StrictJsonValidation(OpenAPIRequestValidationMiddleware):
    """Powertools' request validation, reading every body with our strict JSON parser.

    Its own reader picks a parser by Content-Type (form and multipart included) and uses plain
    ``json.loads``; our bodies are JSON objects, whatever the header says. Query parameters a
    route does not declare are refused rather than ignored.
    """

    def handler(self, app: Any, next_middleware: Any) -> Response:
        known = {param.alias for param in app.context["_route"].dependant.query_params}
        for name in app.current_event.resolved_query_string_parameters or {}:
            if name not in known:  # a misspelt filter must not silently widen a listing
                raise ValidationFailed("unknown query parameter", field=name)
        return super().handler(app, next_middleware)

    def _get_body(self, app: Any) -> Any:
        event = app.current_event
        limit = body_limit(event.http_method, event.resource)  # per route: PUT /model takes a model
        return read_body(event.body, base64_encoded=bool(event.is_base64_encoded), max_bytes=limit)


def make_resolver() -> APIGatewayRestResolver:
    app = APIGatewayRestResolver(strip_prefixes=None, enable_validation=True)
    # Set by the constructor when validation is on; routes pick it up when they are first called.
    app._request_validation_middleware = _StrictJsonValidation()

    @app.exception_handler(MemtoolError)
    def domain_error(error: MemtoolError) -> Response:
        status = status_for(error)
        if status >= 500:
            logger.error("request failed", extra={"error": error.to_body()})
        return json_response(status, error.to_body())

    @app.exception_handler(RequestValidationError)
    def invalid_request(error: RequestValidationError) -> Response:
        return json_response(400, validation_failed(list(error.errors())).to_body())

    @app.not_found
    def no_route(_: NotFoundError) -> Response:
        return json_response(404, {"error": "not_found", "message": "no such route", "field": "path"})

    @app.exception_handler(Exception)
    def unexpected(error: Exception) -> Response:
        # A full disk or an unwritable file met outside the stores' transactions (an OSError ENOSPC
        # from a file write, a bare sqlite3 error) is what it is: 507 insufficient_storage, not a 500.
        from memtool.memory.sqlite_tx import storage_failure

        failure = storage_failure(error)
        if failure is not None:
            logger.warning("storage failure outside a store transaction", exc_info=error)
            return domain_error(failure)
        logger.exception("unhandled error")
        return json_response(500, {"error": "internal_error", "message": "the request could not be completed"})

    return app


def caller(app: APIGatewayRestResolver) -> Identity:
    return identity_from_event(app.current_event.raw_event, get_settings())
