"""Contract tests of the E2B sandbox adapter against a scripted double of E2B's API.

The real ``e2b`` SDK (2.x) sends its real HTTP requests — the control-plane REST calls
(``POST /v2/sandboxes``, ``DELETE /sandboxes/{id}``) and the envd calls (``POST/GET /files``
for uploads and downloads, Connect RPC ``/process.Process/Start`` as a server stream of
``application/connect+json`` envelopes and ``/filesystem.Filesystem/ListDir``) — to a local HTTP
server on 127.0.0.1, reached through the SDK's own ``api_url``/``sandbox_url`` options. The server
records every request and answers from the test's script. Nothing leaves the machine. What this
proves is the request shape and the adapter's reading of the answers, and that the VM is killed on
every path; it does not prove that E2B's live service accepts a given template.
"""

from __future__ import annotations

import base64
import json
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from memtool.analysis.sandbox.e2b import E2BSandbox
from memtool.analysis.sandbox.port import SandboxUnavailable

PNG = b"\x89PNG\r\n\x1a\n" + b"chart"


@dataclass
class Sent:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class ScriptedE2B:
    """The control plane and one sandbox's envd, as far as a script run needs them."""

    exit_code: int = 0
    stdout: bytes = b""
    stderr: bytes = b""
    hang: bool = False  # the command never ends: the SDK's own timeout must fire
    create_status: int = 201
    outputs: dict[str, bytes] = field(default_factory=dict)  # files the "script" leaves behind
    requests: list[Sent] = field(default_factory=list)
    uploads: dict[str, bytes] = field(default_factory=dict)

    def sent(self, method: str, path: str) -> list[Sent]:
        return [r for r in self.requests if r.method == method and r.path == path]


def _envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", flags, len(data)) + data


def _serve(double: ScriptedE2B) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _body(self) -> bytes:
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                chunks = b""
                while True:
                    size = int(self.rfile.readline().strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        return chunks
                    chunks += self.rfile.read(size)
                    self.rfile.readline()
            length = int(self.headers.get("content-length") or 0)
            return self.rfile.read(length) if length else b""

        def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _handle(self) -> None:
            url = urlparse(self.path)
            sent = Sent(self.command, url.path, parse_qs(url.query), {k.lower(): v for k, v in self.headers.items()}, self._body())
            double.requests.append(sent)
            route = (self.command, url.path)
            if route == ("POST", "/v2/sandboxes"):
                if double.create_status != 201:
                    return self._answer(double.create_status, json.dumps({"code": double.create_status, "message": "scripted"}).encode())
                return self._answer(201, json.dumps({"templateID": "base", "sandboxID": "sbx-1", "clientID": "c", "envdVersion": "0.2.4", "envdAccessToken": "envd-token"}).encode())
            if route == ("DELETE", "/sandboxes/sbx-1"):
                return self._answer(204, b"")
            if route == ("POST", "/files"):
                path = sent.query["path"][0]
                double.uploads[path] = _multipart_file(sent)
                return self._answer(200, json.dumps([{"name": path.rsplit("/", 1)[1], "type": "file", "path": path}]).encode())
            if route == ("GET", "/files"):
                path = sent.query["path"][0]
                name = path.rsplit("/", 1)[1]
                return self._answer(200, double.outputs[name], "application/octet-stream")
            if route == ("POST", "/filesystem.Filesystem/ListDir"):
                workdir = json.loads(sent.body)["path"]
                names = {**{p.rsplit("/", 1)[1]: d for p, d in double.uploads.items()}, **double.outputs}
                entries = [{"name": n, "type": "FILE_TYPE_FILE", "path": f"{workdir}/{n}", "size": str(len(d))} for n, d in sorted(names.items())]
                return self._answer(200, json.dumps({"entries": entries}).encode())
            if route == ("POST", "/process.Process/Start"):
                return self._process()
            return self._answer(404, json.dumps({"code": 404, "message": f"unscripted {route}"}).encode())

        def _process(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "application/connect+json")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()

            def chunk(data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            chunk(_envelope({"event": {"start": {"pid": 7}}}))
            if double.hang:
                threading.Event().wait(5)
                return
            for stream, data in (("stdout", double.stdout), ("stderr", double.stderr)):
                if data:
                    chunk(_envelope({"event": {"data": {stream: base64.b64encode(data).decode()}}}))
            end = {"exitCode": double.exit_code, "exited": True, "status": f"exit status {double.exit_code}"}
            chunk(_envelope({"event": {"end": end}}))
            chunk(_envelope({}, flags=0x02))
            self.wfile.write(b"0\r\n\r\n")

        do_GET = do_POST = do_DELETE = _handle

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _multipart_file(sent: Sent) -> bytes:
    boundary = sent.headers["content-type"].split("boundary=")[1].encode()
    part = sent.body.split(b"--" + boundary)[1]
    return part.split(b"\r\n\r\n", 1)[1].rsplit(b"\r\n", 1)[0]


@pytest.fixture
def e2b() -> Iterator[tuple[ScriptedE2B, E2BSandbox]]:
    double = ScriptedE2B()
    server = _serve(double)
    url = next(server)
    try:
        yield double, E2BSandbox("e2b_test_key", connection_opts={"api_url": url, "sandbox_url": url})
    finally:
        server.close()


def test_a_run_creates_an_offline_sandbox_uploads_runs_collects_and_kills(e2b: tuple[ScriptedE2B, E2BSandbox]) -> None:
    double, sandbox = e2b
    double.stdout = b"fitted\n"
    double.outputs = {"result.json": b'{"slope": 2.5}', "chart.png": PNG}

    run = sandbox.run("print('fitted')", files={"data.json": b'{"rows": []}'}, timeout_seconds=20)

    assert run.ok and run.error is None and run.isolation == "e2b"
    assert run.result == {"slope": 2.5} and run.stdout == "fitted\n"
    assert [(f.name, f.content_type, f.data) for f in run.files] == [("chart.png", "image/png", PNG)]
    create = double.sent("POST", "/v2/sandboxes")[0]
    assert create.headers["x-api-key"] == "e2b_test_key"
    body = json.loads(create.body)
    assert body["allow_internet_access"] is False and body["timeout"] == 20 + 60
    assert double.uploads == {"/home/user/work/data.json": b'{"rows": []}', "/home/user/work/script.py": b"print('fitted')"}
    start = json.loads(double.sent("POST", "/process.Process/Start")[0].body[5:])
    assert start["process"]["cmd"] == "/bin/bash" and "python script.py" in " ".join(start["process"]["args"])
    assert start["process"]["cwd"] == "/home/user/work"
    assert len(double.sent("DELETE", "/sandboxes/sbx-1")) == 1


def test_a_failing_script_is_an_exit_error_and_the_sandbox_is_still_killed(e2b: tuple[ScriptedE2B, E2BSandbox]) -> None:
    double, sandbox = e2b
    double.exit_code = 1
    double.stderr = b"Traceback (most recent call last):\nZeroDivisionError: division by zero\n"

    run = sandbox.run("1/0", files={}, timeout_seconds=10)

    assert run.ok is False and run.error_kind == "exit" and run.error == "ZeroDivisionError: division by zero"
    assert "Traceback" in run.stderr and run.result is None
    assert len(double.sent("DELETE", "/sandboxes/sbx-1")) == 1


def test_a_memory_error_maps_to_the_memory_limit(e2b: tuple[ScriptedE2B, E2BSandbox]) -> None:
    double, sandbox = e2b
    double.exit_code = 1
    double.stderr = b"MemoryError\n"

    run = sandbox.run("x = bytearray(1 << 40)", files={}, timeout_seconds=10)

    assert run.error_kind == "memory_limit" and run.error == "MemoryError"
    assert len(double.sent("DELETE", "/sandboxes/sbx-1")) == 1


def test_a_hanging_script_times_out_and_the_sandbox_is_still_killed(e2b: tuple[ScriptedE2B, E2BSandbox]) -> None:
    double, sandbox = e2b
    double.hang = True

    run = sandbox.run("while True: pass", files={}, timeout_seconds=1)

    assert run.ok is False and run.error_kind == "timeout"
    assert run.error == "the script ran longer than 1 s (wall clock) and was stopped"
    assert len(double.sent("DELETE", "/sandboxes/sbx-1")) == 1


def test_a_refused_create_raises_unavailable_and_nothing_else_is_sent(e2b: tuple[ScriptedE2B, E2BSandbox]) -> None:
    double, sandbox = e2b
    double.create_status = 401

    with pytest.raises(SandboxUnavailable, match="E2B could not create a sandbox"):
        sandbox.run("print(1)", files={}, timeout_seconds=5)

    assert [(r.method, r.path) for r in double.requests] == [("POST", "/v2/sandboxes")]


def test_importing_the_sandbox_package_loads_neither_e2b_nor_numpy() -> None:
    import subprocess
    import sys

    probe = "import sys, memtool.analysis.sandbox, memtool.analysis.sandbox.e2b, memtool.analysis.sandbox.local; print(sorted(m for m in ('e2b', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
