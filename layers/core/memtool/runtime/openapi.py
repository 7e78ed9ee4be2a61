"""The OpenAPI 3.1 document of the HTTP API, generated from the routes and their pydantic types.

Each API function (functions/<name>/app.py) has its own Powertools resolver whose routes declare
their bodies, parameters and responses (``memtool.api.openapi.operation`` builds the response
part). The document is those resolvers' schemas merged, for the functions template.yaml wires to
the API, plus what no single route declares: the identity and Idempotency-Key headers, read from
the raw event, and the error body shape. It lives here, beside the template loader and the
handler loader it needs, not in ``api`` (which the handlers import).

    python -m memtool.runtime.openapi > openapi.json     # regenerate the checked-in copy
"""

from __future__ import annotations

import copy
import json
import sys
from functools import lru_cache
from typing import Any

from memtool.api.openapi import HEADER_PARAMETERS, IDEMPOTENT_EXTENSION, IDENTITY_REFS, OPENAPI_VERSION, TITLE
from memtool.runtime.handlers import load_handler
from memtool.runtime.template import api_routes, load_template, project_root


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
            refs = [*IDENTITY_REFS, *(["IdempotencyKeyHeader"] if op.pop(IDEMPOTENT_EXTENSION, False) else [])]
            op["parameters"] = [*op.get("parameters", []), *({"$ref": f"#/components/parameters/{r}"} for r in refs)]
            op["responses"] = {str(code): responses[code] for code in sorted(responses, key=lambda c: int(c))}
    components = document.setdefault("components", {})
    schemas = components.get("schemas", {})
    used = _referenced_schemas(document["paths"], schemas)
    components["schemas"] = {name: schemas[name] for name in sorted(used)}
    components["parameters"] = HEADER_PARAMETERS
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
