"""The local API Gateway: HTTP requests become REST proxy events for the real handlers.

Routes come from template.yaml. ``LocalApiGateway.invoke`` is the in-process path (tests);
``LocalHttpServer`` puts the same dispatch behind an HTTP server on 127.0.0.1 with a deep
listen backlog and a bounded pool of workers, so a burst of clients waits instead of being
reset, and a stop finishes the requests in flight.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

from memtool.runtime.handlers import containers
from memtool.runtime.lambda_context import LocalLambdaContext, discard_unpublished_metrics
from memtool.runtime.template import ApiRoute, api_routes

MAX_BODY_BYTES = 6 * 1024 * 1024  # API Gateway's own payload limit

logger = logging.getLogger("memtool.local_api")

Headers = Mapping[str, str] | Iterable[tuple[str, str]]


def _header_pairs(headers: Headers | None) -> list[tuple[str, str]]:
    if headers is None:
        return []
    if isinstance(headers, Mapping):
        return [(str(k), str(v)) for k, v in headers.items()]
    return [(str(k), str(v)) for k, v in headers]


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

    def match(self, method: str, path: str) -> tuple[ApiRoute, dict[str, str]] | Literal["method_not_allowed"] | None:
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
        headers: Headers | None = None,
        query: dict[str, list[str]] | None = None,
        body: str | bytes | None = None,
    ) -> ApiResponse:
        if isinstance(body, bytes):
            try:
                body = body.decode("utf-8")
            except UnicodeDecodeError as exc:
                return _error(400, "validation_error", f"request body is not valid UTF-8 (byte {exc.start})", "body")
        matched = self.match(method, path)
        if matched is None:
            return _error(404, "not_found", "no such route", "path")
        if isinstance(matched, str):  # "method_not_allowed"
            return _error(405, "method_not_allowed", f"{method} is not allowed on {path}", "method")
        route, raw_params = matched
        # API Gateway decodes path parameters exactly once (%252F arrives as %2F, not as /).
        try:
            params = {name: unquote(value, errors="strict") for name, value in raw_params.items()}
        except UnicodeDecodeError:
            return _error(400, "validation_error", "path parameter is not valid percent-encoded UTF-8", "path")
        event = self.event(route, method, unquote(path), params, _header_pairs(headers), query or {}, body)
        context = LocalLambdaContext(function_name=route.function)
        try:
            result = containers.invoke(route.code_uri, route.handler, event, context)
        finally:
            discard_unpublished_metrics()
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
        headers: list[tuple[str, str]],
        query: dict[str, list[str]],
        body: str | None,
    ) -> dict[str, Any]:
        now = time.time()
        single: dict[str, str] = {}
        multi: dict[str, list[str]] = {}
        for name, value in headers:
            single[name] = value  # API Gateway's `headers` keeps the last value ...
            multi.setdefault(name, []).append(value)  # ... and multiValueHeaders every one
        return {
            "resource": route.path,
            "path": path,
            "httpMethod": method.upper(),
            "headers": single,
            "multiValueHeaders": multi,
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
                "identity": {"sourceIp": "127.0.0.1", "userAgent": single.get("User-Agent", "")},
            },
            "body": body or None,
            "isBase64Encoded": False,
        }


def _error(status: int, code: str, message: str, field_name: str) -> ApiResponse:
    body = json.dumps({"error": code, "message": message, "field": field_name})
    return ApiResponse(status, {"Content-Type": "application/json"}, body)


class _BadRequest(Exception):
    def __init__(self, response: ApiResponse) -> None:
        super().__init__(response.body)
        self.response = response


class _Handler(BaseHTTPRequestHandler):
    """One HTTP request → one API Gateway event. The connection closes after the answer."""

    server: LocalHttpServer
    server_version = "memtool-local"
    sys_version = ""
    timeout = 30  # seconds one read may wait (the socket timeout)
    request_deadline = 30.0  # seconds the whole request (line, headers, body) may take to arrive
    _deadline: threading.Timer | None = None

    def setup(self) -> None:
        super().setup()
        # A client that trickles its request a byte at a time would hold a worker forever with a
        # per-read timeout alone: past the deadline its reading side is shut and it gets no more.
        seconds = 1.0 if self.server.stopping else self.request_deadline
        self._deadline = threading.Timer(seconds, self._stop_reading)
        self._deadline.daemon = True
        self._deadline.start()
        self.server.reading(self.connection, True)

    _expired = False

    def _stop_reading(self) -> None:
        self._expired = True  # whatever was read so far is a truncated request, never dispatched
        try:
            self.connection.shutdown(socket.SHUT_RD)
        except OSError:
            pass

    def _request_read(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self.server.reading(self.connection, False)

    def finish(self) -> None:
        self._request_read()
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # one access line per request is written by _send when verbose

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's own refusals (a garbled request line, headers too long, an unknown method)
        answer in JSON like every other error, not as an HTML page."""
        self.close_connection = True
        self.request_version = "HTTP/1.0"  # a garbled line reads as HTTP/0.9, which has no status line
        body = json.dumps({"error": "bad_request" if code < 500 else "not_implemented", "message": message or "", "field": "request"})
        payload = body.encode("utf-8")
        try:
            self.send_response(code, message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD" and code >= 200 and code not in (204, 304):
                self.wfile.write(payload)
        except OSError:
            pass

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if self.server.verbose:
            logger.info(format, *args)

    def _content_length(self) -> int:
        values = self.headers.get_all("Content-Length") or []
        if len(values) > 1 and len(set(values)) > 1:
            raise _BadRequest(_error(400, "validation_error", "conflicting Content-Length headers", "Content-Length"))
        if self.headers.get("Transfer-Encoding"):
            raise _BadRequest(_error(411, "length_required", "send the body with a Content-Length", "Content-Length"))
        if not values:
            return 0
        raw = values[0].strip()
        if not raw.isdigit() or len(raw) > 12:
            raise _BadRequest(_error(400, "validation_error", "must be a non-negative integer", "Content-Length"))
        length = int(raw)
        if length > MAX_BODY_BYTES:
            raise _BadRequest(_error(413, "payload_too_large", f"body over {MAX_BODY_BYTES} bytes", "body"))
        return length

    def _read_body(self, length: int) -> bytes | None:
        if not length:
            return None
        body = self.rfile.read(length)
        if len(body) < length:
            raise _BadRequest(_error(400, "validation_error", "body is shorter than its Content-Length", "body"))
        return body

    def _dispatch(self) -> None:
        started = time.perf_counter()
        self.server.in_flight_change(+1)
        try:
            response = self._answer()
        finally:
            self.server.in_flight_change(-1)
        self._send(response, started)

    def _answer(self) -> ApiResponse:
        url = urlsplit(self.path)
        special = self.server.special_routes.get((self.command, url.path))
        try:
            length = self._content_length()
            if special is not None:
                return ApiResponse(200, {"Content-Type": "application/json"}, json.dumps(special(), ensure_ascii=False))
            body = self._read_body(length)
            self._request_read()
            if self._expired:
                raise TimeoutError("the request did not arrive before its deadline")
        except _BadRequest as bad:
            self.close_connection = True
            return bad.response
        except (TimeoutError, OSError):
            self.close_connection = True
            return _error(408, "request_timeout", "the request did not arrive in time", "body")
        try:
            return self.server.gateway.invoke(
                self.command,
                url.path,
                headers=list(self.headers.items()),
                query=parse_qs(url.query, keep_blank_values=True),
                body=body,
            )
        except Exception:  # a handler crash is a 502 from API Gateway too; the details go to the log
            logger.exception("handler failed for %s %s", self.command, url.path)
            return _error(502, "bad_gateway", "the request could not be completed", "handler")

    def _send(self, response: ApiResponse, started: float) -> None:
        payload = response.body.encode("utf-8")
        try:
            self.send_response(response.status)
            for name, value in response.headers.items():
                if name.lower() not in ("content-length", "connection"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Connection", "close")
            self.end_headers()
            if payload and self.command != "HEAD":
                self.wfile.write(payload)
        except OSError:  # the client went away; nothing to tell it
            pass
        self.server.served(response.status)
        if self.server.verbose:
            elapsed = (time.perf_counter() - started) * 1000
            self.server.access_log(f"{self.command} {self.path} {response.status} {elapsed:.0f} ms")

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = do_HEAD = do_OPTIONS = _dispatch


@dataclass
class ServerStats:
    served: int = 0
    server_errors: int = 0
    in_flight: int = 0


class LocalHttpServer(HTTPServer):
    """An HTTP server with a deep backlog and a bounded worker pool.

    Connections are accepted as fast as they arrive (the backlog holds bursts the accept loop
    has not reached yet) and queued for ``workers`` threads, so 100 concurrent clients wait
    their turn instead of seeing a reset. ``stop`` stops accepting, then lets every accepted
    request finish.
    """

    allow_reuse_address = True
    daemon_threads = False

    def __init__(
        self,
        address: tuple[str, int],
        gateway: LocalApiGateway,
        *,
        workers: int = 16,
        backlog: int = 1024,
        verbose: bool = False,
        special_routes: dict[tuple[str, str], Callable[[], Any]] | None = None,
        access_log: Callable[[str], None] | None = None,
    ) -> None:
        self.request_queue_size = backlog  # read by server_activate's listen()
        super().__init__(address, _Handler)
        self.gateway = gateway
        self.verbose = verbose
        self.special_routes = dict(special_routes or {})
        self.access_log = access_log or (lambda line: print(line, flush=True))
        self.stats = ServerStats()
        self._stats_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="memtool-api")
        self._thread: threading.Thread | None = None
        self.stopping = False
        self._reading: set[socket.socket] = set()
        self._reading_lock = threading.Lock()

    def reading(self, connection: socket.socket, still: bool) -> None:
        """Track connections whose request has not fully arrived (a stop cuts them short)."""
        with self._reading_lock:
            if still:
                self._reading.add(connection)
            else:
                self._reading.discard(connection)

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        super().server_bind()

    # ---- bookkeeping --------------------------------------------------------------------

    def in_flight_change(self, delta: int) -> None:
        with self._stats_lock:
            self.stats.in_flight += delta

    def served(self, status: int) -> None:
        with self._stats_lock:
            self.stats.served += 1
            self.stats.server_errors += int(status >= 500)

    # ---- the worker pool ----------------------------------------------------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        self._pool.submit(self._process, request, client_address)

    def _process(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - as socketserver does: handle_error logs it and the server keeps serving
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if self.verbose:
            logger.exception("connection from %s failed", client_address)

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> LocalHttpServer:
        self._thread = threading.Thread(target=self.serve_forever, name="memtool-accept", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, finish every request that has arrived, then return.

        The listening socket closes first, so a new client is refused at once instead of waiting
        in the backlog; clients still sending their request get a second to finish; requests
        being handled run to their answer.
        """
        self.stopping = True
        self.shutdown()  # the accept loop ends
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.server_close()  # the listening socket: new connections are refused from here on
        with self._reading_lock:
            waiting = list(self._reading)
        for connection in waiting:
            timer = threading.Timer(1.0, _shut_reading, args=(connection,))
            timer.daemon = True
            timer.start()
        self._pool.shutdown(wait=True)


def _shut_reading(connection: socket.socket) -> None:
    try:
        connection.shutdown(socket.SHUT_RD)
    except OSError:
        pass


def serve_http(
    gateway: LocalApiGateway,
    host: str,
    port: int,
    *,
    verbose: bool = False,
    workers: int = 16,
    backlog: int = 1024,
    special_routes: dict[tuple[str, str], Callable[[], Any]] | None = None,
    access_log: Callable[[str], None] | None = None,
) -> LocalHttpServer:
    return LocalHttpServer(
        (host, port),
        gateway,
        workers=workers,
        backlog=backlog,
        verbose=verbose,
        special_routes=special_routes,
        access_log=access_log,
    ).start()
