"""The local HTTP edge: raw HTTP framing, event building, and Lambda's one-invocation-per-container rule."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from memtool.api.json_body import MAX_BODY_BYTES, body_limit
from memtool.runtime.handlers import LambdaContainers, per_thread_router_state
from memtool.runtime.local_api import LocalApiGateway, serve_http

from tests.support import ROOT


@pytest.fixture(scope="module")
def gateway() -> LocalApiGateway:
    from memtool.runtime.template import load_template

    return LocalApiGateway(load_template(ROOT / "template.yaml"), ROOT)


class RecordingGateway:
    """Stands in for the gateway behind the HTTP server: records what the server hands it."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def invoke(self, method: str, path: str, *, headers: Any, query: Any, body: Any) -> Any:
        from memtool.runtime.local_api import ApiResponse

        self.calls.append({"method": method, "path": path, "headers": list(headers), "body": body})
        return ApiResponse(200, {"Content-Type": "application/json"}, json.dumps({"ok": True}))

    def body_limit(self, method: str, path: str) -> int:
        return body_limit(method, path)  # the routes these tests use are literal paths


@pytest.fixture
def server():
    recording = RecordingGateway()
    started = serve_http(recording, "127.0.0.1", 0, workers=4, backlog=256)  # type: ignore[arg-type]
    yield started, recording
    started.stop()


def raw_exchange(port: int, payload: bytes, timeout: float = 5) -> tuple[int, dict[str, Any] | None]:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(payload)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    response = b"".join(chunks)
    head, _, body = response.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, (json.loads(body) if body else None)


@pytest.mark.parametrize(
    ("content_length", "status", "field"),
    [("abc", 400, "Content-Length"), ("-5", 400, "Content-Length"), ("99999999999999", 400, "Content-Length"), ("7000000", 413, "body")],
)
def test_a_malformed_content_length_is_a_4xx_and_the_worker_is_free(server, content_length, status, field):
    http, recording = server
    port = http.server_address[1]
    request = f"POST /memories HTTP/1.1\r\nHost: x\r\nContent-Length: {content_length}\r\n\r\n{{}}".encode()
    got, body = raw_exchange(port, request)
    assert (got, body["field"]) == (status, field)
    assert recording.calls == []  # nothing reached a handler
    # and the server still answers the next request
    assert raw_exchange(port, b"GET /memories HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200


def test_a_body_shorter_than_its_content_length_times_out_as_a_4xx():
    recording = RecordingGateway()
    http = serve_http(recording, "127.0.0.1", 0, workers=1, request_deadline=0.5)  # type: ignore[arg-type]
    try:
        got, body = raw_exchange(http.server_address[1], b"POST /memories HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{}")
        assert (got, body["error"], body["field"]) == (408, "request_timeout", "body")
        # a client that gives up (closes its side) mid-body is refused too, at once
        with socket.create_connection(("127.0.0.1", http.server_address[1]), timeout=5) as sock:
            sock.sendall(b"POST /memories HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{}")
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(65536).split(b" ", 2)[1] == b"400"
        assert recording.calls == []
    finally:
        http.stop()


def test_duplicate_headers_reach_the_event_as_every_value(server):
    http, recording = server
    raw_exchange(
        http.server_address[1],
        b"GET /memories HTTP/1.1\r\nHost: x\r\nX-Memtool-Tenant: a\r\nX-Memtool-Tenant: b\r\n\r\n",
    )
    assert [v for k, v in recording.calls[0]["headers"] if k.lower() == "x-memtool-tenant"] == ["a", "b"]


def test_events_carry_duplicates_in_multi_value_headers(gateway):
    route, _ = gateway.match("GET", "/memories")  # type: ignore[misc]
    event = gateway.event(route, "GET", "/memories", {}, [("X-Memtool-Tenant", "a"), ("X-Memtool-Tenant", "b")], {}, None)
    assert event["multiValueHeaders"]["X-Memtool-Tenant"] == ["a", "b"]
    assert event["headers"]["X-Memtool-Tenant"] == "b"  # API Gateway's single-value view: the last


def test_invalid_utf8_is_refused_before_any_handler(gateway):
    reply = gateway.invoke("POST", "/memories", headers={"X-Memtool-Tenant": "t", "X-Memtool-User": "u"}, body=b'{"content": "\xff"}')
    assert reply.status == 400 and reply.json()["field"] == "body"


def test_path_parameters_are_decoded_exactly_once(gateway, monkeypatch):
    seen: dict[str, Any] = {}

    def capture(code_uri: Path, handler: str, event: dict[str, Any], context: Any) -> dict[str, Any]:
        seen.update(event["pathParameters"])
        return {"statusCode": 204, "body": ""}

    from memtool.runtime import local_api

    monkeypatch.setattr(local_api.containers, "invoke", capture)
    gateway.invoke("GET", "/memories/mem%252Fx", headers={})
    assert seen["id"] == "mem%2Fx"
    bad = gateway.invoke("GET", "/memories/%ff", headers={})
    assert bad.status == 400 and bad.json()["field"] == "path"


def test_powertools_request_state_is_per_thread():
    from aws_lambda_powertools.event_handler.api_gateway import BaseRouter

    per_thread_router_state()
    per_thread_router_state()  # idempotent
    BaseRouter.current_event = "main thread's event"  # type: ignore[assignment]
    seen: list[Any] = []

    def other() -> None:
        seen.append(BaseRouter.current_event)
        BaseRouter.current_event = "other thread's event"  # type: ignore[assignment]
        seen.append(BaseRouter.current_event)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == [None, "other thread's event"]
    assert BaseRouter.current_event == "main thread's event"


def test_concurrent_invocations_get_their_own_warm_copy(tmp_path):
    # Given a handler module with module-level state, like a Powertools resolver's `app`
    code = tmp_path / "fn"
    code.mkdir()
    (code / "app.py").write_text(
        "import threading, time\n"
        "STATE = {'busy': False}\n"
        "def lambda_handler(event, context):\n"
        "    assert not STATE['busy'], 'two invocations shared one container'\n"
        "    STATE['busy'] = True\n"
        "    time.sleep(0.05)\n"
        "    STATE['busy'] = False\n"
        "    return id(STATE)\n",
        encoding="utf-8",
    )
    fleet = LambdaContainers()
    barrier = threading.Barrier(6)
    results: list[int] = []

    def call() -> None:
        barrier.wait()
        results.append(fleet.invoke(code, "app.lambda_handler", {}, None))

    threads = [threading.Thread(target=call) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then six concurrent calls ran in six copies, and a later call reuses a warm one
    assert len(results) == 6 and len(set(results)) == 6
    assert fleet.invoke(code, "app.lambda_handler", {}, None) in results
    assert fleet.warm() == {"fn.app.lambda_handler": 6}


def test_a_client_trickling_its_request_is_cut_off_at_the_deadline():
    recording = RecordingGateway()
    http = serve_http(recording, "127.0.0.1", 0, workers=1, backlog=16, request_deadline=0.6)  # type: ignore[arg-type]
    try:
        port = http.server_address[1]
        slow = socket.create_connection(("127.0.0.1", port), timeout=5)
        started = time.monotonic()
        slow.sendall(b"POST /memories HTTP/1.1\r\nHost: x\r\n")
        # one byte at a time, each well within the per-read timeout, for longer than the deadline
        try:
            for byte in b"X-Slow: " + b"y" * 40:
                slow.sendall(bytes([byte]))
                time.sleep(0.05)
        except OSError:
            pass
        # Then the only worker is free again for another client soon after the deadline
        status, _ = raw_exchange(port, b"GET /memories HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 200
        assert time.monotonic() - started < 10  # the trickle itself lasts ~2 s; the point is: not 30
        assert [call["method"] for call in recording.calls] == ["GET"]  # the slow one never reached a handler
        slow.close()
    finally:
        http.stop()


def test_a_stop_does_not_wait_for_an_idle_client_and_refuses_new_ones():
    recording = RecordingGateway()
    http = serve_http(recording, "127.0.0.1", 0, workers=2, backlog=16)  # type: ignore[arg-type]
    port = http.server_address[1]
    idle = socket.create_connection(("127.0.0.1", port), timeout=5)  # connects, sends nothing
    time.sleep(0.2)
    started = time.monotonic()
    http.stop()
    assert time.monotonic() - started < 5  # not the 30 s request deadline
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).sendall(b"GET / HTTP/1.1\r\n\r\n")
    idle.close()


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [(b"GARBAGE\r\n\r\n", 400), (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414), (b"BREW /memories HTTP/1.1\r\nHost: x\r\n\r\n", 501)],
)
def test_the_servers_own_refusals_are_json_too(server, request_bytes, status):
    http, recording = server
    got, body = raw_exchange(http.server_address[1], request_bytes)
    assert got == status and body["field"] == "request"
    assert recording.calls == []


def send_with_body(port: int, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any] | None]:
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return raw_exchange(port, head.encode() + body, timeout=10)


def test_the_body_limit_is_per_route_and_an_oversized_body_is_refused_unread_with_its_answer_intact(server):
    http, recording = server
    port = http.server_address[1]
    big = b'{"content": "' + b"x" * 200_000 + b'"}'
    # PUT /model carries a semantic model: 200 KB reaches the handler whole
    assert send_with_body(port, "PUT", "/model", big)[0] == 200
    assert recording.calls[-1]["body"] == big
    # every other route keeps 64 KiB: a 413 naming the limit, and no handler sees the body. The client
    # is still sending when the answer goes out; the server reads and drops the rest before closing,
    # so the answer is not lost to a reset (five times, as a reset would lose it only sometimes).
    for _ in range(5):
        status, body = send_with_body(port, "POST", "/memories", big)
        assert body is not None
        assert (status, body["error"], body["field"]) == (413, "payload_too_large", "body")
        assert f"{MAX_BODY_BYTES:,} bytes" in body["message"]
    assert len(recording.calls) == 1
    assert body_limit("PUT", "/model") > 200_000 and body_limit("POST", "/memories") == MAX_BODY_BYTES


class SlowGateway(RecordingGateway):
    """A handler that takes its time, to hold a worker on purpose."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def invoke(self, method: str, path: str, *, headers: Any, query: Any, body: Any) -> Any:
        time.sleep(self.seconds)
        return super().invoke(method, path, headers=headers, query=query, body=body)


def test_a_request_waits_for_a_worker_as_a_complete_request_and_a_stop_finishes_it():
    slow = SlowGateway(0.5)
    http = serve_http(slow, "127.0.0.1", 0, workers=1)  # type: ignore[arg-type]
    port = http.server_address[1]
    answers: list[int] = []

    def ask() -> None:
        answers.append(raw_exchange(port, b"GET /memories HTTP/1.1\r\nHost: x\r\n\r\n")[0])

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    time.sleep(0.1)  # the first is being handled, the other two wait for the one worker
    started = time.monotonic()
    http.stop()
    for thread in threads:
        thread.join()
    # Then every request that had arrived was answered, in turn, before the stop returned
    assert answers == [200, 200, 200]
    assert 0.9 < time.monotonic() - started < 5
    assert http.stats.served == 3 and http.stats.in_flight == 0
