"""The local API Gateway: HTTP requests become REST proxy events for the real handlers.

Routes come from template.yaml. ``LocalApiGateway.invoke`` is the in-process path (tests);
``serve_http`` puts the same dispatch behind an HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from memtool.runtime.handlers import load_handler
from memtool.runtime.lambda_context import LocalLambdaContext
from memtool.runtime.template import ApiRoute, api_routes

MAX_BODY_BYTES = 6 * 1024 * 1024  # API Gateway's own payload limit


@dataclass
class ApiResponse:
    status: int
    headers: dict[str, str]
    body: str

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class LocalApiGateway:
    template: dict[str, Any]
    root: Path
    stage: str = "local"
    routes: list[ApiRoute] = field(init=False)

    def __post_init__(self) -> None:
        self.routes = api_routes(self.template, self.root)

    def match(self, method: str, path: str) -> tuple[ApiRoute, dict[str, str]] | None | str:
        allowed = False
        for route in self.routes:
            found = route.pattern.match(path)
            if found is None:
                continue
            if route.method == method.upper():
                return route, found.groupdict()
            allowed = True
        return "method_not_allowed" if allowed else None

    def invoke(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        query: dict[str, list[str]] | None = None,
        body: str | bytes | None = None,
    ) -> ApiResponse:
        matched = self.match(method, path)
        if matched is None:
            return _error(404, "not_found", "no such route", "path")
        if matched == "method_not_allowed":
            return _error(405, "method_not_allowed", f"{method} is not allowed on {path}", "method")
        route, params = matched  # type: ignore[misc]
        event = self.event(route, method, path, params, headers or {}, query or {}, body)
        handler = load_handler(route.code_uri, route.handler)
        context = LocalLambdaContext(function_name=route.function)
        result = handler(event, context)
        response_body = result.get("body") or ""
        if result.get("isBase64Encoded"):
            response_body = base64.b64decode(response_body).decode("utf-8")
        response_headers = {k: str(v) for k, v in (result.get("headers") or {}).items()}
        for name, values in (result.get("multiValueHeaders") or {}).items():
            response_headers[name] = ", ".join(str(v) for v in values)
        return ApiResponse(int(result.get("statusCode", 500)), response_headers, response_body)

    def event(
        self,
        route: ApiRoute,
        method: str,
        path: str,
        params: dict[str, str],
        headers: dict[str, str],
        query: dict[str, list[str]],
        body: str | bytes | None,
    ) -> dict[str, Any]:
        if isinstance(body, bytes):
            body = body.decode("utf-8", errors="replace")
        now = time.time()
        return {
            "resource": route.path,
            "path": path,
            "httpMethod": method.upper(),
            "headers": dict(headers),
            "multiValueHeaders": {k: [v] for k, v in headers.items()},
            "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
            "multiValueQueryStringParameters": dict(query) or None,
            "pathParameters": params or None,
            "stageVariables": None,
            "requestContext": {
                "resourcePath": route.path,
                "httpMethod": method.upper(),
                "path": f"/{self.stage}{path}",
                "stage": self.stage,
                "requestId": str(uuid.uuid4()),
                "requestTime": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
                "requestTimeEpoch": int(now * 1000),
                "accountId": "123456789012",
                "apiId": "memtool-local",
                "protocol": "HTTP/1.1",
                "identity": {"sourceIp": "127.0.0.1", "userAgent": headers.get("User-Agent", "")},
            },
            "body": body or None,
            "isBase64Encoded": False,
        }


def _error(status: int, code: str, message: str, field_name: str) -> ApiResponse:
    body = json.dumps({"error": code, "message": message, "field": field_name})
    return ApiResponse(status, {"Content-Type": "application/json"}, body)


class _Handler(BaseHTTPRequestHandler):
    gateway: LocalApiGateway
    health: Any
    server_version = "memtool-local"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if getattr(self.server, "verbose", False):
            super().log_message(format, *args)

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        if self.command == "GET" and url.path == "/health":
            return self._send(ApiResponse(200, {"Content-Type": "application/json"}, json.dumps(self.health())))
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            return self._send(_error(413, "payload_too_large", f"body over {MAX_BODY_BYTES} bytes", "body"))
        body = self.rfile.read(length) if length else None
        try:
            response = self.gateway.invoke(
                self.command,
                url.path,
                headers={k: v for k, v in self.headers.items()},
                query=parse_qs(url.query, keep_blank_values=True),
                body=body,
            )
        except Exception as exc:  # a handler crash is a 502 from API Gateway too
            response = _error(502, "bad_gateway", f"handler failed: {type(exc).__name__}: {exc}", "handler")
        self._send(response)

    def _send(self, response: ApiResponse) -> None:
        payload = response.body.encode("utf-8")
        self.send_response(response.status)
        for name, value in response.headers.items():
            if name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if payload and self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _dispatch


def serve_http(gateway: LocalApiGateway, host: str, port: int, health: Any, verbose: bool = False):
    handler = type("BoundHandler", (_Handler,), {"gateway": gateway, "health": staticmethod(health)})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    server.verbose = verbose  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, name="memtool-api", daemon=True)
    thread.start()
    return server, thread
