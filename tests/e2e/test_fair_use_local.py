"""Fair use in the local runtime: its API gateway runs the same ask and feedback handlers, so a tenant
over its request budget gets the same 429 and Retry-After; the bucket is kept in the runtime's
SQLite file (the default store) beside the memories."""

from __future__ import annotations

import json
import sqlite3
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from memtool.clock import FrozenClock
from memtool.runtime import container
from memtool.runtime.local_api import LocalApiGateway
from memtool.settings import Settings, use_settings
from tests.support import ROOT, Api

MISSING_EPISODE = {"episode_id": "ep-0000000000000000", "rating": 1}


@pytest.fixture
def local_api(tmp_path: Path, template: dict[str, Any], clock: FrozenClock) -> Any:
    settings = Settings(
        runtime="local",
        home=tmp_path / "home",
        store="sqlite",
        warehouse="none",
        vector_index="none",
        tenant_requests_per_minute=30,  # one every 2 s
        tenant_request_burst=2,
    )
    use_settings(settings)
    yield settings, LocalApiGateway(template, ROOT)
    container.reset()


def test_the_local_gateway_answers_429_with_retry_after_from_the_sqlite_bucket(local_api, clock: FrozenClock) -> None:
    settings, gateway = local_api
    acme = Api(gateway, tenant="acme", user="li")
    spent = [acme.call("POST", "/feedback", MISSING_EPISODE).status for _ in range(2)]
    assert 429 not in spent  # each spent one request (and found no such episode)

    refused = acme.call("POST", "/ask", {"question": "上个月净收入"})  # the same budget: refused before any flow

    assert refused.status == 429
    assert refused.headers["Retry-After"] == "2"
    body = refused.json()
    assert body["error"] == "rate_limited" and body["retry_after_seconds"] == 2
    assert body["budget"] == {"name": "tenant_requests", "per_minute": 30, "burst": 2}
    # Another tenant is not refused; the first is again once its interval has passed.
    assert Api(gateway, tenant="initech", user="wu").call("POST", "/feedback", MISSING_EPISODE).status != 429
    clock.advance(seconds=2)
    assert acme.call("POST", "/feedback", MISSING_EPISODE).status != 429
    # The buckets live in the runtime's SQLite file.
    with sqlite3.connect(settings.sqlite_path) as conn:
        rows = dict(conn.execute("SELECT tenant, spent FROM request_budgets WHERE name = 'tenant_requests'").fetchall())
    assert rows == {"acme": 3, "initech": 1}


@pytest.mark.slow
def test_memtool_serve_takes_the_budget_from_its_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memtool.runtime.local import LocalRuntime

    monkeypatch.setenv("MEMTOOL_TENANT_REQUESTS_PER_MINUTE", "6")
    monkeypatch.setenv("MEMTOOL_TENANT_REQUEST_BURST", "1")
    tenant = f"acme-{uuid.uuid4().hex[:6]}"
    with LocalRuntime(home=tmp_path / "home", port=0, root=ROOT, warehouse_scale=0.05) as runtime:

        def post(path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
            request = urllib.request.Request(
                f"{runtime.api_url}{path}",
                data=json.dumps(body).encode(),
                method="POST",
                headers={"X-Memtool-Tenant": tenant, "X-Memtool-User": "li", "Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    return response.status, dict(response.headers), json.loads(response.read() or b"null")
            except urllib.error.HTTPError as error:
                return error.code, dict(error.headers), json.loads(error.read() or b"null")

        first = post("/feedback", MISSING_EPISODE)
        status, headers, body = post("/ask", {"question": "上个月净收入"})

    assert first[0] != 429
    assert status == 429 and body["error"] == "rate_limited"
    assert 1 <= int(headers["Retry-After"]) <= 10  # one request every 10 s
