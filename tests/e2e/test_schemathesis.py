"""Property-based tests of the HTTP API against its own OpenAPI document (schemathesis).

The real local runtime serves the API over HTTP; schemathesis generates requests from
``openapi_document()`` (valid ones and ones that break the schema) and checks that no answer is
an unplanned 5xx and that every status, content type and body is one the document declares.

One test walks every operation against one runtime: the runtime's settings and background drains
live in this process, and the suite's per-test cleanup resets the process settings (closing the
stores the runtime holds) after every test function.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from memtool.runtime.openapi import openapi_document
from memtool.demo import ApiClient
from memtool.runtime.local import LocalRuntime

from tests.support import ROOT

pytestmark = pytest.mark.slow

# Examples per operation, valid and schema-breaking together; /ask runs a whole flow each time.
EXAMPLES = 25
EXAMPLES_FOR = {"/ask": 6}
IDENTITY_HEADERS = ("x-memtool-tenant", "x-memtool-user", "x-memtool-roles")
# Memories written before each operation on /{id}, so its examples also reach existing ones
# (one of each kind; the shared kinds by a curator).
SEEDS = [
    ({"kind": "profile", "content": "金额默认用元", "value": {"unit": "元"}}, None),
    ({"kind": "episodic", "content": "上个月各渠道的净收入"}, None),
    ({"kind": "correction", "content": "净收入 excludes test lines"}, None),
    ({"kind": "working", "content": "这次用分", "session_id": "s-1"}, None),
    ({"kind": "knowledge", "content": "净收入 = Σ(gross − discount) − refunds"}, "curator"),
]


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MEMTOOL_TODAY", "2026-11-29")
        home = tmp_path_factory.mktemp("schemathesis")
        with LocalRuntime(home=home, port=0, root=ROOT, warehouse_scale=0.05) as started:
            yield started


def test_every_route_answers_as_the_openapi_document_says(runtime: LocalRuntime) -> None:
    schema = schemathesis.openapi.from_dict(openapi_document())
    schema.config.update(base_url=runtime.api_url)
    tenant = f"fuzz-{uuid.uuid4().hex[:8]}"
    client = ApiClient(runtime.api_url, tenant, "fuzzer")
    # Every other request comes from a curator, so the curator-only paths (shared memories) run too.
    curator_turn = itertools.cycle([False, True])

    def seeded_ids() -> list[str]:
        ids = []
        for body, roles in SEEDS:
            reply = client.call("POST", "/memories", body, headers={"X-Memtool-Roles": roles} if roles else None)
            assert reply.status == 201, reply.body
            ids.append(reply.body["memory"]["id"])
        return ids

    def call(case) -> None:
        for name in list(case.headers or {}):
            if name.lower() in IDENTITY_HEADERS:
                del case.headers[name]
        identity = {"X-Memtool-Tenant": tenant, "X-Memtool-User": "fuzzer"}
        if next(curator_turn):
            identity["X-Memtool-Roles"] = "curator"
        case.call_and_validate(headers=identity, checks=CHECKS, timeout=60)

    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == sum(len(item) for item in openapi_document()["paths"].values())
    for operation in operations:
        strategies = [operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE)]
        if "{id}" in operation.path:
            strategies += [operation.as_strategy(path_parameters={"id": id_}) for id_ in seeded_ids()]
        cases = st.one_of(*strategies)

        @given(case=cases)
        @settings(
            max_examples=EXAMPLES_FOR.get(operation.path, EXAMPLES),
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=True,  # the same examples every run: CI stays reproducible (fuzz wider by hand)
            print_blob=True,
        )
        def conforms(case) -> None:
            call(case)

        try:
            conforms()
        except Exception as failure:  # one operation's failure must not hide another's
            failures.append(f"{operation.method.upper()} {operation.path}:\n{failure}")
    assert not failures, "\n\n".join(failures)
