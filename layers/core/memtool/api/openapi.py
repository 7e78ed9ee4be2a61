"""What the OpenAPI document says beyond each route's pydantic types: every answer a route can
give (``operation``, which the API functions' routes use), the error descriptions, and the
identity and Idempotency-Key headers that handlers read from the raw event.

The document itself is assembled from the functions template.yaml wires to the API, so its
generator lives with the composition root: ``memtool.runtime.openapi``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from memtool.api.http import ErrorBody
from memtool.api.idempotency import IDEMPOTENCY_HEADER_NAME, KEY_PATTERN
from memtool.api.identity import HEADER_NAMES, IDENTIFIER_PATTERN, ROLES_HEADER, ROLES_HEADER_MAX, TENANT_HEADER, USER_HEADER
from memtool.api.json_body import MAX_BODY_BYTES

OPENAPI_VERSION = "3.1.0"
TITLE = "memtool"
IDEMPOTENT_EXTENSION = "x-memtool-idempotent"  # marks the routes that take an Idempotency-Key

ERROR_DESCRIPTIONS = {
    400: "bad input: the body, a parameter or a header named in `field`",
    401: "no identity: no authorizer claims (AWS) or no X-Memtool-Tenant/User headers (local)",
    403: "forbidden (the message says why): shared (tenant) memories need the curator or admin role; the few-shot "
    "library and the SQL cache are admins' to read; some kinds and keys are written by their flows only",
    404: "not found, also for another tenant's or user's memory",
    409: "stale expected_version (retry with current_version), or the same Idempotency-Key still in flight",
    413: f"payload_too_large: the body is over the route's limit ({MAX_BODY_BYTES // 1024} KiB; PUT /model's and "
    "POST /sources' are larger: they hold a model or a document)",
    422: "this Idempotency-Key was already used for a different request",
    503: "the deployment lacks a setting this request needs; `field` names the stack parameter to set",
    507: "insufficient_storage: the disk holding memtool's state is full; the message says what was stored (as a rule "
    "nothing: retry once space is freed); store_read_only: the state cannot be written (the operator fixes it)",
}
# Every write can be refused for its body's size (413) and, on the local runtime, for a state
# store that has no room or cannot be written (507): what operation() adds to a write's errors.
WRITE_ERRORS = (413, 507)

_LOCAL_ONLY = "Honoured only when MEMTOOL_RUNTIME=local; in AWS the Cognito authorizer's claims are the identity."
HEADER_PARAMETERS: dict[str, dict[str, Any]] = {
    "TenantHeader": {
        "name": HEADER_NAMES[TENANT_HEADER],
        "in": "header",
        "required": False,
        "description": f"The caller's tenant. {_LOCAL_ONLY} Sent twice it is a 400.",
        "schema": {"type": "string", "pattern": IDENTIFIER_PATTERN},
    },
    "UserHeader": {
        "name": HEADER_NAMES[USER_HEADER],
        "in": "header",
        "required": False,
        "description": f"The caller's user id. {_LOCAL_ONLY} Sent twice it is a 400.",
        "schema": {"type": "string", "pattern": IDENTIFIER_PATTERN},
    },
    "RolesHeader": {
        "name": HEADER_NAMES[ROLES_HEADER],
        "in": "header",
        "required": False,
        "description": f"Comma-separated roles (curator, admin). {_LOCAL_ONLY} Sent twice it is a 400.",
        "schema": {"type": "string", "maxLength": ROLES_HEADER_MAX},
    },
    "IdempotencyKeyHeader": {
        "name": IDEMPOTENCY_HEADER_NAME,
        "in": "header",
        "required": False,
        "description": (
            "Replaying a key returns the first answer; the same key with a different request is a 422. "
            "Scoped to the caller."
        ),
        "schema": {"type": "string", "pattern": KEY_PATTERN},
    },
}
IDENTITY_REFS = ["TenantHeader", "UserHeader", "RolesHeader"]


def operation(
    summary: str,
    *,
    tag: str,
    ok: Mapping[int, type[BaseModel] | None],
    errors: Iterable[int] = (),
    idempotent: bool = False,
    writes: bool | None = None,
    description: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments for a Powertools route: its summary and every answer it can give.

    ``ok`` maps each success status to its body model (None: no body); every route can also
    answer 400 and 401, plus the ``errors`` named, all with an ErrorBody. A route that ``writes``
    also answers ``WRITE_ERRORS`` (413, 507); unless told, a route writes when it takes an
    Idempotency-Key or can answer 409 (a stale expected_version, a key in flight: a write's answers).
    """
    errors = set(errors)
    if writes if writes is not None else idempotent or 409 in errors:
        errors.update(WRITE_ERRORS)
    responses: dict[int, dict[str, Any]] = {}
    for status, model in ok.items():
        responses[status] = {"description": "success" if model else "success, no body"}
        if model is not None:
            responses[status]["content"] = {"application/json": {"model": model}}
    for status in sorted({400, 401, *errors}):
        responses[status] = {
            "description": ERROR_DESCRIPTIONS[status],
            "content": {"application/json": {"model": ErrorBody}},
        }
    kwargs: dict[str, Any] = {"summary": summary, "tags": [tag], "responses": responses}
    if description:
        kwargs["description"] = description
    if idempotent:
        kwargs["openapi_extensions"] = {IDEMPOTENT_EXTENSION: True}
    return kwargs
