"""The OpenAPI document: generated from the routes, checked in, and in step with template.yaml."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from memtool.runtime.openapi import openapi_document, openapi_json
from memtool.runtime.template import api_routes
from tests.support import ROOT

CHECKED_IN = ROOT / "openapi.json"
METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in document["paths"].items() for method in item if method in METHODS}


def template_routes(template: dict[str, Any]) -> set[tuple[str, str]]:
    return {(route.method, route.path) for route in api_routes(template, ROOT)}


def test_the_checked_in_document_is_the_generated_one():
    assert CHECKED_IN.read_text(encoding="utf-8") == openapi_json(), (
        "openapi.json is stale: regenerate it with `python -m memtool.runtime.openapi > openapi.json`"
    )


def test_the_document_has_exactly_the_templates_routes(template):
    assert operations(openapi_document()) == template_routes(template)


def test_the_route_check_would_notice_a_missing_or_extra_route(template):
    document = openapi_document()
    del document["paths"]["/memories/search"]
    assert operations(document) != template_routes(template)
    document = openapi_document()
    document["paths"]["/memories"]["put"] = {"responses": {}}
    assert operations(document) != template_routes(template)


def test_the_document_is_valid_openapi_3_1():
    from openapi_spec_validator import validate

    document = openapi_document()
    assert document["openapi"] == "3.1.0"
    validate(document)


def test_every_operation_declares_its_errors_identity_headers_and_bodies():
    document = openapi_document()
    parameters = document["components"]["parameters"]
    for path, item in document["paths"].items():
        for method, op in item.items():
            where = f"{method.upper()} {path}"
            responses = op["responses"]
            for status in ("400", "401"):
                assert responses[status]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorBody"
                }, where
            # never Powertools' HTTPValidationError: our error body (PUT /model's names every problem)
            assert "422" not in responses or re.search(r'schemas/(ErrorBody|ModelInvalidBody)"', json.dumps(responses["422"])), where
            names = {parameters[p["$ref"].rsplit("/", 1)[1]]["name"] for p in op["parameters"] if "$ref" in p}
            assert {"X-Memtool-Tenant", "X-Memtool-User", "X-Memtool-Roles"} <= names, where
            # POST /ask too: a retry with the same key answers the first answer, never a second flow
            written = ("/ask", "/memories", "/sessions", "/feedback", "/fewshots/", "/diagnose", "/lessons/")
            written += ("/sources", "/proposals", "/prefill", "/suggestions/", "/charts/")
            writes = path.startswith(written) and method != "get"
            assert ("Idempotency-Key" in names) == writes, where
            if "{id}" in path:
                assert any(p.get("in") == "path" and p["name"] == "id" for p in op["parameters"]), where
            for status, response in responses.items():
                if status == "204":
                    assert "content" not in response, where
                else:
                    assert response["content"]["application/json"]["schema"], (where, status)
    memories = document["paths"]["/memories"]["post"]
    assert memories["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/CreateMemoryBody"
    }
    assert set(memories["responses"]) == {"200", "201", "400", "401", "403", "409", "413", "422", "507"}
    # the reads refuse the admins' kinds (few-shots, the SQL cache) to other callers: schemathesis found
    # GET /memories?kind=fewshot answering a 403 the document did not list
    assert "403" in document["paths"]["/memories"]["get"]["responses"]
    assert "403" in document["paths"]["/memories/{id}"]["get"]["responses"]
    ask = document["paths"]["/ask"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ask == {"$ref": "#/components/schemas/AskAnswer"}


def test_the_documented_models_carry_the_input_rules():
    schemas = openapi_document()["components"]["schemas"]
    create = schemas["CreateMemoryBody"]
    assert create["additionalProperties"] is False and create["required"] == ["kind", "content"]
    assert "pattern" in create["properties"]["content"]
    assert "32 levels" in create["properties"]["value"]["description"]
    patch = schemas["PatchMemoryBody"]["properties"]
    assert patch["content"]["type"] == "string" and "default" not in patch["content"]  # null is refused
    assert {"type": "null"} in patch["source_text"]["anyOf"]  # null clears
    error = schemas["AskAnswer"]["properties"]["error"]
    assert {"$ref": "#/components/schemas/AskError"} in error["anyOf"]
    assert set(schemas["AskError"]["properties"]) == {"error", "message", "step"}
    assert set(schemas["ErrorBody"]["required"]) == {"error", "message"}
    assert not {"HTTPValidationError", "ValidationError", "ResponseValidationError"} & set(schemas)


@pytest.mark.parametrize("ref", ["#/components/schemas/", "#/components/parameters/"])
def test_every_reference_resolves(ref):
    document = openapi_document()
    kind = ref.rstrip("/").rsplit("/", 1)[1]
    refs = {part.split('"')[0] for part in json.dumps(document).split(f'"$ref": "{ref}')[1:]}
    assert refs and refs <= set(document["components"][kind])


def test_the_document_is_built_once_and_handed_out_as_copies():
    first = openapi_document()
    first["paths"].clear()
    started = time.perf_counter()
    second = openapi_document()
    assert second["paths"] and second == json.loads(openapi_json())
    assert time.perf_counter() - started < 0.5
