"""The tenant request budget over HTTP: a 429 ``rate_limited`` with a ``Retry-After`` header (whole
seconds), its body, and how the OpenAPI document describes it on the routes that spend the budget."""

from __future__ import annotations

from typing import Any, Literal

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from pydantic import BaseModel, ConfigDict, Field

from memtool.api.resolver import json_response
from memtool.errors import RateLimited

RETRY_AFTER = "Retry-After"
STATUS = 429


class BudgetView(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="which budget: tenant_requests (POST /ask and POST /feedback share it)")
    per_minute: int = Field(description="requests the tenant may make per minute, sustained")
    burst: int = Field(description="requests the tenant may make at once")


class RateLimitedBody(BaseModel):
    """A 429: the tenant's request budget is spent; retry after Retry-After seconds."""

    model_config = ConfigDict(extra="forbid")

    error: Literal["rate_limited"]
    message: str
    retry_after_seconds: int = Field(ge=1, description="as the Retry-After header")
    budget: BudgetView


RATE_LIMITED_RESPONSE: dict[str, Any] = {
    "description": "rate_limited: the tenant's request budget is spent (fair use); retry after Retry-After seconds",
    "headers": {
        RETRY_AFTER: {"description": "whole seconds until the budget accepts a request again", "schema": {"type": "integer", "minimum": 1}}
    },
    "content": {"application/json": {"model": RateLimitedBody}},
}


def budgeted(kwargs: dict[str, Any]) -> dict[str, Any]:
    """An ``operation(...)``'s keyword arguments with the 429 a route that spends the budget can answer."""
    return {**kwargs, "responses": {**kwargs["responses"], STATUS: RATE_LIMITED_RESPONSE}}


def rate_limited_response(error: RateLimited) -> Response:
    return json_response(STATUS, error.to_body(), headers={RETRY_AFTER: str(error.retry_after_seconds)})


def answer_rate_limits(app: APIGatewayRestResolver) -> None:
    """Answer RateLimited on this resolver with its 429 and Retry-After (before the generic error mapping)."""
    app.exception_handler(RateLimited)(rate_limited_response)
