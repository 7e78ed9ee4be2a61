"""The semantic model API over HTTP on the local runtime: a curator's versions, 409 on a stale
expected_version, 403 for others, 422 with every problem (the warehouse's too) while the version
in force stays, and 404 model_missing for a tenant with none."""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from memtool.runtime.local import LocalRuntime
from memtool.semantic.catalog import load_catalog

from tests.support import ROOT

pytestmark = pytest.mark.slow


def call(url: str, method: str, path: str, body: Any = None, *, tenant: str = "acme", roles: str | None = "curator") -> tuple[int, Any]:
    headers = {"X-Memtool-Tenant": tenant, "X-Memtool-User": "zhang", "Content-Type": "application/json"}
    if roles:
        headers["X-Memtool-Roles"] = roles
    data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def demo() -> dict[str, Any]:
    return copy.deepcopy(load_catalog().model_dump(mode="json"))


def index_of(document: dict[str, Any], name: str) -> int:
    return next(i for i, m in enumerate(document["metrics"]) if m["name"] == name)


def test_a_curator_puts_versions_and_refusals_change_nothing(tmp_path) -> None:
    with LocalRuntime(home=tmp_path / "home", port=0, root=ROOT, warehouse_scale=0.05) as runtime:
        url = runtime.api_url
        assert url is not None

        # Given the demo model put by a curator: version 1, checked on the warehouse
        status, first = call(url, "PUT", "/model", {"model": demo(), "expected_version": None})
        assert status == 201, first
        assert (first["version"], first["model_version"], first["updated_by"], first["warehouse_checked"]) == (
            1, load_catalog().model_version, "zhang", True,
        )  # fmt: skip

        # When a changed model is put on version 1, it is version 2 and history has both
        changed = {**demo(), "model_version": "2026.12.1"}
        status, second = call(url, "PUT", "/model", {"model": changed, "expected_version": 1})
        assert (status, second["version"], second["memory_id"]) == (200, 2, first["memory_id"])
        status, history = call(url, "GET", "/model/history", roles=None)
        assert status == 200
        assert [(i["version"], i["model_version"]) for i in history["items"]] == [(1, load_catalog().model_version), (2, "2026.12.1")]

        # A stale expected_version is a 409 naming the field and the version to retry with
        status, stale = call(url, "PUT", "/model", {"model": {**demo(), "model_version": "lost"}, "expected_version": 1})
        assert (status, stale["error"], stale["field"], stale["current_version"]) == (409, "version_conflict", "expected_version", 2)

        # A non-curator may read it but not put it
        status, forbidden = call(url, "PUT", "/model", {"model": changed, "expected_version": 2}, roles=None)
        assert (status, forbidden["error"]) == (403, "forbidden")

        # An invalid model: a metric naming an unknown dimension, and one whose expression reads a
        # column the warehouse lacks: one 422 lists both
        invalid = {**demo(), "model_version": "broken"}
        units, net = index_of(invalid, "units"), index_of(invalid, "net_revenue")
        invalid["metrics"][units]["dimensions"] = [*invalid["metrics"][units]["dimensions"], "colour"]
        invalid["metrics"][net]["expression"] = "ROUND(SUM(ol.no_such_column), 2)"
        status, refused = call(url, "PUT", "/model", {"model": invalid, "expected_version": 2})
        assert (status, refused["error"]) == (422, "model_invalid"), refused
        paths = {p["path"]: p["message"] for p in refused["problems"]}
        assert set(paths) == {f"metrics[{units}].dimensions", f"metrics[{net}].expression"}
        assert "colour" in paths[f"metrics[{units}].dimensions"]
        assert "no_such_column" in paths[f"metrics[{net}].expression"]

        # And the version in force is still 2, as stored
        status, current = call(url, "GET", "/model", roles=None)
        assert (status, current["version"], current["model"]["model_version"]) == (200, 2, "2026.12.1")
        status, old = call(url, "GET", "/model?version=1", roles=None)
        assert (status, old["version"], old["model"]) == (200, 1, demo())

        # Another tenant has none: 404 model_missing, saying how to make one
        status, missing = call(url, "GET", "/model", tenant="globex")
        assert (status, missing["error"]) == (404, "model_missing")
        assert "memtool model init --warehouse URL > model.yaml" in missing["message"]
        assert "memtool model push model.yaml" in missing["message"]
        assert call(url, "GET", "/model/history", tenant="globex")[0] == 404

        # The model's memory is written only here: /memories refuses its key, so no PUT skips the checks
        forged = {"kind": "knowledge", "scope": "tenant", "key": "semantic_model", "content": "a model", "value": {"model": {}}}
        status, refused_write = call(url, "POST", "/memories", forged)
        assert (status, refused_write["error"], refused_write.get("field")) == (403, "forbidden", "key"), refused_write
        status, current = call(url, "GET", "/model", roles=None)
        assert (status, current["version"]) == (200, 2)
