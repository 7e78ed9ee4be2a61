"""The body limit is per route (issue 21, item 3): PUT /model takes a semantic model up to its
documented size, every other route keeps 64 KiB. Over real HTTP to the local server in front of the
real handlers (moto in process), and in process, where the Lambda's own check answers as in AWS."""

from __future__ import annotations

import copy
import json
import socket
from typing import Any

import pytest

from memtool.api.json_body import MAX_BODY_BYTES, body_limit
from memtool.runtime.local_api import LocalApiGateway, serve_http
from memtool.semantic.catalog import load_catalog
from memtool.semantic.validation import MODEL_MAX_BYTES, stored_size

from tests.support import ROOT

pytestmark = pytest.mark.slow

CURATOR = [("X-Memtool-Tenant", "acme-limits"), ("X-Memtool-User", "zhang"), ("X-Memtool-Roles", "curator")]


def send(port: int, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in CURATOR]
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, rest = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(rest)


def model_of_about(size: int) -> dict[str, Any]:
    """The demo model, its description grown until the document is about ``size`` bytes as stored."""
    model = copy.deepcopy(load_catalog().model_dump(mode="json"))
    model["description"] += " " + "a curated note on every metric." * ((size - stored_size(model)) // 31)
    return model


def test_put_model_takes_a_200_kb_model_and_other_routes_refuse_200_kb_with_a_413(aws, template):
    gateway = LocalApiGateway(template, ROOT)
    http = serve_http(gateway, "127.0.0.1", 0, workers=2)
    try:
        port = http.server_address[1]
        model = model_of_about(200_000)
        body = json.dumps({"model": model, "expected_version": None}, ensure_ascii=False).encode()
        assert 195_000 < len(body) < MODEL_MAX_BYTES
        status, put = send(port, "PUT", "/model", body)
        assert status == 201, put  # stored: not refused as too large, nor for anything else
        assert put["version"] == 1 and put["warehouse_checked"] is True

        # a body over the route's limit (the model's limit plus the envelope's room) is a 413
        over = json.dumps({"model": model_of_about(body_limit("PUT", "/model") + 1000), "expected_version": 1}).encode()
        status, refused = send(port, "PUT", "/model", over)
        assert (status, refused["error"], refused["field"]) == (413, "payload_too_large", "body")
        assert f"{body_limit('PUT', '/model'):,} bytes" in refused["message"]

        memory = json.dumps({"kind": "episodic", "content": "x" * 200_000}).encode()
        status, refused = send(port, "POST", "/memories", memory)
        assert (status, refused["error"], refused["field"]) == (413, "payload_too_large", "body")
        assert f"{MAX_BODY_BYTES:,} bytes" in refused["message"]
    finally:
        http.stop()


def test_the_lambda_refuses_a_body_over_its_route_limit_with_the_same_413(aws, template):
    # In AWS, API Gateway passes bodies up to 10 MB: the handler's own check is the one that answers.
    gateway = LocalApiGateway(template, ROOT)
    headers = dict(CURATOR) | {"Content-Type": "application/json"}
    reply = gateway.invoke("POST", "/memories", headers=headers, body=json.dumps({"kind": "episodic", "content": "x" * 200_000}))
    assert (reply.status, reply.json()["error"], reply.json()["field"]) == (413, "payload_too_large", "body")
    assert f"{MAX_BODY_BYTES:,} bytes" in reply.json()["message"]
    # PUT /model's limit is larger: a 200 KB model is read and checked as a model (this one is not a model)
    reply = gateway.invoke("PUT", "/model", headers=headers, body=json.dumps({"model": {"name": "x" * 200_000}, "expected_version": None}))
    assert reply.status in (400, 422) and reply.json()["error"] != "payload_too_large"
