"""The OpenAPI 3.1 document of the HTTP API, generated from the routes and their pydantic types.

Each API function (functions/<name>/app.py) has its own Powertools resolver whose routes declare
their bodies, parameters and responses (``operation`` below builds the response part). The
document is those resolvers' schemas merged, for the functions template.yaml wires to the API,
plus what no single route declares: the identity and Idempotency-Key headers, read from the raw
event, and the error body shape.

    python -m memtool.api.openapi > openapi.json     # regenerate the checked-in copy
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from pydantic import BaseModel

from memtool.api.http import ErrorBody
from memtool.api.idempotency import IDEMPOTENCY_HEADER_NAME, KEY_PATTERN
from memtool.api.identity import HEADER_NAMES, IDENTIFIER_PATTERN, ROLES_HEADER, ROLES_HEADER_MAX, TENANT_HEADER, USER_HEADER

OPENAPI_VERSION = "3.1.0"
TITLE = "memtool"
_IDEMPOTENT = "x-memtool-idempotent"  # marks the routes that take an Idempotency-Key

ERROR_DESCRIPTIONS = {
    400: "bad input: the body, a parameter or a header named in `field`",
    401: "no identity: no authorizer claims (AWS) or no X-Memtool-Tenant/User headers (local)",
    403: "shared (tenant) memories need the curator or admin role",
    404: "not found, also for another tenant's or user's memory",
    409: "stale expected_version (retry with current_version), or the same Idempotency-Key still in flight",
    422: "this Idempotency-Key was already used for a different request",
    501: "a capability a later release fills",
}

_LOCAL_ONLY = "Honoured only when MEMTOOL_RUNTIME=local; in AWS the Cognito authorizer's claims are the identity."
_HEADER_PARAMETERS: dict[str, dict[str, Any]] = {
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
_IDENTITY_REFS = ["TenantHeader", "UserHeader", "RolesHeader"]


def operation(
    summary: str,
    *,
    tag: str,
    ok: Mapping[int, type[BaseModel] | None],
    errors: Iterable[int] = (),
    idempotent: bool = False,
    description: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments for a Powertools route: its summary and every answer it can give.

    ``ok`` maps each success status to its body model (None: no body); every route can also
    answer 400 and 401, plus the ``errors`` named, all with an ErrorBody.
    """
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
        kwargs["openapi_extensions"] = {_IDEMPOTENT: True}
    return kwargs


def openapi_document() -> dict[str, Any]:
    """The whole API as one OpenAPI 3.1 document (a fresh copy of a cached build)."""
    return copy.deepcopy(_document())


def openapi_json() -> str:
    """The document as the text checked in at openapi.json."""
    return json.dumps(_document(), indent=2, ensure_ascii=False) + "\n"


@lru_cache(maxsize=1)
def _document() -> dict[str, Any]:
    from aws_lambda_powertools.event_handler.openapi.merge import OpenAPIMerge

    merge = OpenAPIMerge(
        title=TITLE,
        version=_package_version(),
        openapi_version=OPENAPI_VERSION,
        description=(
            "memtool's HTTP API: memories, recall and asking. In AWS the Cognito authorizer's claims "
            "identify the caller; the local runtime trusts the X-Memtool-* headers instead. Errors are "
            '{"error", "message", "field"} with the field that is wrong.'
        ),
        on_conflict="error",
    )
    for app in _api_resolvers():
        merge.add_schema(json.loads(app.get_openapi_json_schema(title=TITLE, openapi_version=OPENAPI_VERSION)))
    return _finish(merge.get_openapi_schema())


def _api_resolvers() -> list[Any]:
    """The resolver of every function template.yaml wires to the API (ordered by route).

    The document describes the deployed API, so it is assembled like the local gateway is: from
    the template's routes and the real handler modules (imported lazily, as the gateway does).
    """
    from memtool.runtime.handlers import load_handler
    from memtool.runtime.template import api_routes, load_template, project_root

    root = project_root()
    resolvers: dict[str, Any] = {}
    for route in sorted(api_routes(load_template(root / "template.yaml"), root), key=lambda r: (r.path, r.method)):
        if route.function not in resolvers:
            handler = load_handler(route.code_uri, route.handler)
            resolvers[route.function] = sys.modules[handler.__module__].app
    return list(resolvers.values())


def _finish(document: dict[str, Any]) -> dict[str, Any]:
    """Our conventions on top of the merged schema: 400 (never Powertools' 422) for bad input,
    header parameters, no body on 204, and stable ordering."""
    for item in document.get("paths", {}).values():
        for op in item.values():
            responses = op["responses"]
            default_422 = responses.get("422", responses.get(422))
            if default_422 and "HTTPValidationError" in json.dumps(default_422):
                responses.pop("422", None)
                responses.pop(422, None)
            for response in responses.values():
                content = response.get("content") or {}
                if content and all(not media.get("schema") for media in content.values()):
                    response.pop("content")
            refs = [*_IDENTITY_REFS, *(["IdempotencyKeyHeader"] if op.pop(_IDEMPOTENT, False) else [])]
            op["parameters"] = [*op.get("parameters", []), *({"$ref": f"#/components/parameters/{r}"} for r in refs)]
            op["responses"] = {str(code): responses[code] for code in sorted(responses, key=lambda c: int(c))}
    components = document.setdefault("components", {})
    schemas = components.get("schemas", {})
    used = _referenced_schemas(document["paths"], schemas)
    components["schemas"] = {name: schemas[name] for name in sorted(used)}
    components["parameters"] = _HEADER_PARAMETERS
    document["paths"] = dict(sorted(document["paths"].items()))
    return json.loads(json.dumps(document))  # plain JSON types only (no int keys, no tuples)


def _referenced_schemas(paths: dict[str, Any], schemas: dict[str, Any]) -> set[str]:
    """Schemas the paths reach, directly or through other schemas (Powertools adds its own
    validation-error schemas whether or not a route answers with them)."""
    prefix = "#/components/schemas/"
    found: set[str] = set()
    pending = [paths]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(prefix) and ref[len(prefix) :] not in found:
                found.add(ref[len(prefix) :])
                pending.append(schemas[ref[len(prefix) :]])
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return found


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memtool")
    except PackageNotFoundError:
        return "0.0.0"


if __name__ == "__main__":
    sys.stdout.write(openapi_json())
