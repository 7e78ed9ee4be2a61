"""Every bad input the probes found, sent over real HTTP to `memtool serve`'s server: a 4xx that
names the field, and nothing stored. (The same rules are unit-tested at the handlers; this is the
whole path a client takes: socket, HTTP parsing, the gateway, the handler, the store.)"""

from __future__ import annotations

import base64
import json
import socket
import uuid
from pathlib import Path

import pytest

from memtool.runtime.local import LocalRuntime

from tests.support import ROOT

pytestmark = pytest.mark.slow


def send(port: int, method: str, path: str, body: bytes | None, headers: list[tuple[str, str]]) -> tuple[int, dict]:
    """Raw HTTP, so headers can repeat and bodies can be anything."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in headers]
    if body is not None and not any(name.lower() == "content-length" for name, _ in headers):
        lines.append(f"Content-Length: {len(body)}")
    payload = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + (body or b"")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(payload)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, rest = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), (json.loads(rest) if rest else {})


def crafted_cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def test_every_bad_input_from_the_probes_is_a_4xx_naming_the_field_and_stores_nothing(tmp_path: Path, demo_warehouse, monkeypatch):
    monkeypatch.setenv("MEMTOOL_WAREHOUSE_PATH", str(demo_warehouse))
    monkeypatch.setenv("MEMTOOL_TODAY", "2026-11-29")
    tenant = f"bad-{uuid.uuid4().hex[:6]}"
    who = [("X-Memtool-Tenant", tenant), ("X-Memtool-User", "li"), ("Content-Type", "application/json")]
    with LocalRuntime(home=tmp_path / "home", port=0, root=ROOT) as runtime:
        port = int(runtime.api_url.rsplit(":", 1)[1])
        status, created = send(port, "POST", "/memories", json.dumps({"kind": "episodic", "content": "v1"}).encode(), who)
        assert status == 201
        memory_id = created["memory"]["id"]

        def value_body(raw_value: str) -> bytes:
            return ('{"kind": "episodic", "content": "x", "value": ' + raw_value + "}").encode()

        cases: list[tuple[str, str, str, bytes | None, list[tuple[str, str]], str]] = [
            ("null content in PATCH", "PATCH", f"/memories/{memory_id}", b'{"expected_version": 1, "content": null}', who, "content"),
            ("null tags in PATCH", "PATCH", f"/memories/{memory_id}", b'{"expected_version": 1, "tags": null}', who, "tags"),
            ("a 4,301-digit integer", "POST", "/memories", value_body("1" * 4301), who, "value"),
            ("JSON nested 10k deep", "POST", "/memories", value_body("[" * 10_000 + "]" * 10_000), who, "body"),
            ("NaN", "POST", "/memories", value_body('{"a": NaN}'), who, "value.a"),
            ("Infinity", "POST", "/memories", value_body("Infinity"), who, "value"),
            ("1e400", "POST", "/memories", value_body("1e400"), who, "value"),
            ("invalid UTF-8", "POST", "/memories", b'{"kind": "episodic", "content": "\xff\xfe"}', who, "body"),
            ("NUL in content", "POST", "/memories", b'{"kind": "episodic", "content": "a\\u0000b"}', who, "content"),
            ("NUL in a key", "POST", "/memories", b'{"kind": "profile", "key": "k\\u0000", "content": "x"}', who, "key"),
            ("NUL in a tag", "POST", "/memories", b'{"kind": "episodic", "content": "x", "tags": ["a\\u0000"]}', who, "tags.0"),
            ("a control character in value", "POST", "/memories", value_body('{"a": "\\u0007"}'), who, "value.a"),
            ("a whitespace-only question", "POST", "/ask", b'{"question": "   \\n\\t "}', who, "question"),
            ("a crafted cursor", "GET", "/memories?cursor=eyJwayI6eyJTIjoiVCNvdGhlciNPI2xpIn19", None, who, "cursor"),
            ("a cursor with u beyond 64 bits", "GET", "/memories?kind=episodic&cursor=" + crafted_cursor(
                '{"l":"T#' + tenant + '#O#li#K#episodic","i":"zzz","u":99999999999999999999999}'), None, who, "cursor"),
            ("a cursor with a lone surrogate", "GET", "/memories?kind=episodic&cursor=" + crafted_cursor(
                '{"l":"T#' + tenant + '#O#li#K#episodic","i":"\\ud800","u":1}'), None, who, "cursor"),
            ("a DynamoDB cursor with a numeric sk", "GET", "/memories?kind=episodic&cursor=" + crafted_cursor(
                '{"pk":{"S":"T#' + tenant + '#O#li"},"sk":5}'), None, who, "cursor"),
            ("a non-numeric Content-Length", "POST", "/memories", b"{}", [*who, ("Content-Length", "abc")], "Content-Length"),
            ("a negative Content-Length", "POST", "/memories", b"{}", [*who, ("Content-Length", "-1")], "Content-Length"),
            ("two tenant headers", "POST", "/memories", b'{"kind": "episodic", "content": "x"}', [("X-Memtool-Tenant", "other"), *who], "X-Memtool-Tenant"),
            ("two user headers", "GET", "/memories", None, [*who, ("X-Memtool-User", "wang")], "X-Memtool-User"),
            ("a 16 KB roles header", "GET", "/memories", None, [*who, ("X-Memtool-Roles", "r," * 8000)], "X-Memtool-Roles"),
        ]
        failures = []
        for name, method, path, body, headers, field in cases:
            status, reply = send(port, method, path, body, headers)
            if not (400 <= status < 500 and reply.get("field") == field):
                failures.append(f"{name}: {status} {reply}")
        assert not failures, "\n".join(failures)

        # Nothing was stored: the one memory is still at version 1, and it is the only one
        status, listing = send(port, "GET", "/memories?limit=100", None, who)
        assert status == 200 and [m["id"] for m in listing["items"]] == [memory_id]
        status, shared = send(port, "GET", "/memories?scope=tenant", None, who)
        assert status == 200 and shared["items"] == []
        status, current = send(port, "GET", f"/memories/{memory_id}", None, who)
        assert current["memory"]["version"] == 1 and current["memory"]["content"] == "v1"
        # and no request got a 5xx
        assert runtime.health()["requests"]["server_errors"] == 0
