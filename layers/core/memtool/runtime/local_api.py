"""The local API Gateway: HTTP requests become REST proxy events for the real handlers.

Routes come from template.yaml. ``LocalApiGateway.invoke`` is the in-process path (tests);
``LocalHttpServer`` puts the same dispatch behind an HTTP server on 127.0.0.1: a deep listen
backlog, one reader thread that reads every request in full against a deadline, and a bounded
pool of workers that only ever see requests that have arrived. So a burst of clients waits
instead of being reset, a client trickling its request cannot hold a worker, and a stop finishes
the requests in flight.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import logging
import queue
import selectors
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.message import Message
from email.utils import formatdate
from functools import partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

from memtool.api.json_body import MAX_BODY_BYTES, BodyTooLarge, body_limit
from memtool.runtime.handlers import containers
from memtool.runtime.lambda_context import LocalLambdaContext, discard_unpublished_metrics
from memtool.runtime.template import ApiRoute, api_routes

# A client's whole request (line, headers, body) arrives within this many seconds of its
# connection being accepted, or is answered 408: the only time a slow client can hold anything.
REQUEST_DEADLINE_SECONDS = 10.0
STOP_GRACE_SECONDS = 1.0  # at a stop, what a client still sending its request has left
_LINE_MAX_BYTES = 65536  # the stdlib's limit on the request line (over it: 414)
_HEAD_MAX_BYTES = 2 * _LINE_MAX_BYTES  # request line and header lines: more is a 431, never buffered
_RECV_BYTES = 65536
_LINGER_SECONDS = 2.0  # after an answer, how long the client's leftover input is read and dropped
_LINGER_MAX_BYTES = 8 * 1024 * 1024

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

    def body_limit(self, method: str, path: str) -> int:
        """The largest body the route ``path`` matches takes (``json_body.body_limit``); the reader
        refuses a larger one with a 413 before reading it, so a handler never sees it."""
        matched = self.match(method, path)
        if isinstance(matched, tuple):
            route, _ = matched
            return body_limit(route.method, route.path)
        return MAX_BODY_BYTES  # no route: the 404 or 405 needs no body

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


def _declared_length(headers: Message, limit: int) -> int | ApiResponse:
    """The body length a request's headers declare, or the 4xx that refuses it before it is read."""
    values = headers.get_all("Content-Length") or []
    if len(values) > 1 and len(set(values)) > 1:
        return _error(400, "validation_error", "conflicting Content-Length headers", "Content-Length")
    if headers.get("Transfer-Encoding"):
        return _error(411, "length_required", "send the body with a Content-Length", "Content-Length")
    if not values:
        return 0
    raw = values[0].strip()
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:
        return _error(400, "validation_error", "must be a non-negative integer", "Content-Length")
    length = int(raw)
    if length > limit:
        return ApiResponse(413, {"Content-Type": "application/json"}, json.dumps(BodyTooLarge(length, limit).to_body()))
    return length


@dataclass
class _Arriving:
    """A connection whose request is still arriving: the bytes so far, and until when more may come."""

    connection: socket.socket
    client_address: Any
    deadline: float  # time.monotonic()
    buffer: bytearray = field(default_factory=bytearray)
    scanned: int = 0  # where the search for the blank line that ends the headers resumes
    head_end: int | None = None  # the headers' end, once they have all arrived
    expected: int = 0  # the bytes (head and body) the request is complete at
    refusal: ApiResponse | None = None  # the 4xx its headers earned (no body is read for it)

    def arrived(self) -> _Arrived:
        assert self.head_end is not None
        body = bytes(self.buffer[self.head_end : self.expected]) if self.refusal is None else b""
        return _Arrived(self.connection, bytes(self.buffer[: self.head_end]), body or None, self.refusal)

    def request_line(self) -> str:
        return " ".join(bytes(self.buffer[:200]).split(b"\n", 1)[0].decode("iso-8859-1").split()[:2]) or "-"


@dataclass(frozen=True)
class _Arrived:
    """A request read in full, or refused from its headers: all a worker needs, none of it to wait for."""

    connection: socket.socket
    head: bytes  # the request line and the header lines, up to and with the blank line
    body: bytes | None
    refusal: ApiResponse | None


@dataclass
class _Lingering:
    """A connection answered and shut for writing, read until the client closes it (``_linger``)."""

    connection: socket.socket
    deadline: float
    drained: int = 0


def _head_end(arriving: _Arriving) -> int | None:
    """Where the request's head ends (past the first blank line after the request line), or None
    while it has not all arrived. Resumes where the last call stopped, so a trickle costs no rescan."""
    buffer = arriving.buffer
    if not arriving.scanned:
        first = buffer.find(b"\n")
        if first < 0:
            return None
        arriving.scanned = first + 1
    while (line_end := buffer.find(b"\n", arriving.scanned)) >= 0:
        if buffer[arriving.scanned : line_end] in (b"", b"\r"):
            return line_end + 1
        arriving.scanned = line_end + 1
    return None


class _SocketWriter(io.BufferedIOBase):
    """The handler's ``wfile``: every write sent whole (as socketserver's own writer does)."""

    def __init__(self, connection: socket.socket) -> None:
        self._connection = connection

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._connection.sendall(data)
        with memoryview(data) as view:
            return view.nbytes


class _Handler(BaseHTTPRequestHandler):
    """One request that has arrived in full → one API Gateway event. The connection closes after the answer.

    The server's reader thread has read the whole request before a worker runs this: ``rfile`` is
    its line and headers in memory, so the stdlib parses them (and answers its own 400, 414, 431 and
    501) and no read here can wait on the client; the body is ``arrived.body``.
    """

    server: LocalHttpServer
    server_version = "memtool-local"
    sys_version = ""
    arrived: _Arrived

    def setup(self) -> None:
        self.arrived = self.request
        self.connection = self.arrived.connection
        self.rfile = io.BytesIO(self.arrived.head)
        self.wfile = _SocketWriter(self.connection)

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

    def _dispatch(self) -> None:
        started = time.perf_counter()
        self.server.in_flight_change(+1)
        try:
            response = self._answer()
        finally:
            self.server.in_flight_change(-1)
        self._send(response, started)

    def _answer(self) -> ApiResponse:
        if self.arrived.refusal is not None:  # a bad or oversized Content-Length: the body was never read
            self.close_connection = True
            return self.arrived.refusal
        url = urlsplit(self.path)
        special = self.server.special_routes.get((self.command, url.path))
        if special is not None:
            return ApiResponse(200, {"Content-Type": "application/json"}, json.dumps(special(), ensure_ascii=False))
        from memtool.runtime.console import console_response  # the console's files (docs/console.md)

        page = console_response(self.command, url.path)
        if page is not None:
            return page
        try:
            return self.server.gateway.invoke(
                self.command,
                url.path,
                headers=list(self.headers.items()),
                query=parse_qs(url.query, keep_blank_values=True),
                body=self.arrived.body,
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
        except OSError:  # the client went away, or did not take its answer in time; nothing to tell it
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
    """An HTTP server that reads every request on one thread and answers on a bounded worker pool.

    The reader thread accepts connections as fast as they arrive (the backlog holds a burst it has
    not reached yet) and reads all of them at once without blocking; a worker gets a request only
    once its line, headers and body have arrived. A request not in by ``request_deadline`` seconds
    after its connection was accepted is answered 408 and closed. So a client trickling its request
    a byte at a time holds a buffer for at most that long and never a worker, and 100 concurrent
    clients wait their turn instead of seeing a reset. ``stop`` stops accepting, gives clients still
    sending a second, then lets every request that arrived finish.
    """

    allow_reuse_address = True

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
        request_deadline: float = REQUEST_DEADLINE_SECONDS,
    ) -> None:
        self.request_queue_size = backlog  # read by server_activate's listen()
        super().__init__(address, _Handler)
        self.gateway = gateway
        self.verbose = verbose
        self.special_routes = dict(special_routes or {})
        self.access_log = access_log or (lambda line: print(line, flush=True))
        self.request_deadline = request_deadline
        self.stats = ServerStats()
        self._stats_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="memtool-api")
        self._thread: threading.Thread | None = None
        self.stopping = False
        self._stopped = False
        # The reader thread's own state: only it touches the selector and these two maps.
        self._selector = selectors.DefaultSelector()
        self._arriving: dict[socket.socket, _Arriving] = {}
        self._lingering: dict[socket.socket, _Lingering] = {}
        self._accepting = True
        self._accept_paused_until: float | None = None
        # Workers hand answered connections back through a queue, and wake the reader with a byte.
        self._answered: queue.SimpleQueue[socket.socket] = queue.SimpleQueue()
        self._wake_up, self._wake_signal = socket.socketpair()
        self._wake_up.setblocking(False)
        self._wake_signal.setblocking(False)
        self._arrivals_over = threading.Event()  # stopping, and no request is still arriving
        self._workers_done = False

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

    def handle_error(self, request: Any, client_address: Any) -> None:
        if self.verbose:
            logger.exception("connection from %s failed", client_address)

    # ---- the reader thread: accept, read, hand over, expire, linger ---------------------

    def _read_requests(self) -> None:
        self.socket.setblocking(False)
        self._selector.register(self.socket, selectors.EVENT_READ, self._accept)
        self._selector.register(self._wake_up, selectors.EVENT_READ, self._woken)
        try:
            while True:
                for key, _ in self._selector.select(self._wait(time.monotonic())):
                    try:
                        key.data()
                    except Exception:  # one connection's failure must not stop the reader for the others
                        logger.exception("reading a request failed")
                        if isinstance(key.fileobj, socket.socket) and key.fileobj not in (self.socket, self._wake_up):
                            self._close(key.fileobj)
                now = time.monotonic()
                self._expire(now)
                if self._accept_paused_until is not None and now >= self._accept_paused_until and self._accepting:
                    self._accept_paused_until = None
                    self._selector.register(self.socket, selectors.EVENT_READ, self._accept)
                if self.stopping:
                    if self._accepting:
                        self._stop_accepting(now)
                    if not self._arriving:
                        self._arrivals_over.set()
                    if self._workers_done and not self._lingering and self._answered.empty():
                        break
        finally:
            for connection in [*self._arriving, *self._lingering]:
                connection.close()
            self._arriving.clear()
            self._lingering.clear()
            self._arrivals_over.set()
            self._selector.close()

    def _wait(self, now: float) -> float:
        deadlines = [a.deadline for a in self._arriving.values()] + [lingering.deadline for lingering in self._lingering.values()]
        if self._accept_paused_until is not None:
            deadlines.append(self._accept_paused_until)
        return max(0.0, min([*deadlines, now + 1.0]) - now)

    def _accept(self) -> None:
        for _ in range(64):  # then the connections already accepted get their turn
            try:
                connection, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors, say: the backlog holds the rest a moment
                logger.warning("accepting a connection failed: %s", exc)
                self._selector.unregister(self.socket)
                self._accept_paused_until = time.monotonic() + 0.1
                return
            connection.setblocking(False)
            arriving = _Arriving(connection, address, time.monotonic() + self.request_deadline)
            self._arriving[connection] = arriving
            self._selector.register(connection, selectors.EVENT_READ, partial(self._receive, arriving))

    def _receive(self, arriving: _Arriving) -> None:
        try:
            data = arriving.connection.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset by the client
            data = b""
        if not data:  # the client closed its side before its request was complete: never dispatched
            self._forget(arriving)
            if arriving.head_end is not None and arriving.refusal is None:
                self._answer_here(arriving, _error(400, "validation_error", "body is shorter than its Content-Length", "body"))
            else:
                arriving.connection.close()
            return
        arriving.buffer += data
        if arriving.head_end is None and not self._head_arrived(arriving):
            return
        if arriving.refusal is not None or len(arriving.buffer) >= arriving.expected:
            self._forget(arriving)
            self._pool.submit(self._process, arriving.arrived(), arriving.client_address)

    def _head_arrived(self, arriving: _Arriving) -> bool:
        """Once the headers are in: how much body to wait for, or the refusal they earn."""
        end = _head_end(arriving)
        if end is None:
            if len(arriving.buffer) > _HEAD_MAX_BYTES:
                self._forget(arriving)
                line_done = b"\n" in arriving.buffer[: _LINE_MAX_BYTES + 1]
                status, what = (431, "the request's headers are too long") if line_done else (414, "the request line is too long")
                self._answer_here(arriving, _error(status, "bad_request", what, "request"))
            return False
        arriving.head_end = arriving.expected = end
        line, _, header_lines = bytes(arriving.buffer[:end]).partition(b"\n")
        words = line.decode("iso-8859-1").split()
        try:
            headers = http.client.parse_headers(io.BytesIO(header_lines))
        except http.client.HTTPException:  # too many or too long: the worker's stdlib parse answers it
            return True
        if len(words) != 3:  # garbled: the same
            return True
        method, target = words[0], words[1]
        if target.startswith("//"):  # as the stdlib's parse reads it
            target = "/" + target.lstrip("/")
        try:
            path = urlsplit(target).path
        except ValueError:
            path = target
        declared = _declared_length(headers, self.gateway.body_limit(method, path))
        if isinstance(declared, ApiResponse):
            arriving.refusal = declared
        else:
            arriving.expected = end + declared
        return True

    def _forget(self, arriving: _Arriving) -> None:
        """The reader is done reading this request (complete, refused, expired or abandoned)."""
        self._selector.unregister(arriving.connection)
        del self._arriving[arriving.connection]

    def _expire(self, now: float) -> None:
        for arriving in [a for a in self._arriving.values() if a.deadline <= now]:
            self._forget(arriving)
            if not arriving.buffer:  # nothing was asked: nothing to answer
                arriving.connection.close()
                continue
            message = f"the request did not arrive within {self.request_deadline:g} s"
            self._answer_here(arriving, _error(408, "request_timeout", message, "body" if arriving.head_end else "request"))
        for lingering in [entry for entry in self._lingering.values() if entry.deadline <= now]:
            self._close(lingering.connection)

    def _answer_here(self, arriving: _Arriving, response: ApiResponse) -> None:
        """A refusal the reader answers itself (408, a head too long, a body cut short): a few
        hundred bytes, which the connection's empty send buffer takes in one non-blocking send."""
        payload = response.body.encode("utf-8")
        head = (
            f"HTTP/1.0 {response.status} {HTTPStatus(response.status).phrase}\r\n"
            f"Server: {_Handler.server_version}\r\nDate: {formatdate(usegmt=True)}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
        )
        try:
            arriving.connection.send(head.encode("latin-1") + payload)
        except OSError:
            pass
        self.served(response.status)
        if self.verbose:
            self.access_log(f"{arriving.request_line()} {response.status} (refused while reading)")
        self._linger(arriving.connection)

    def _linger(self, connection: socket.socket) -> None:
        """Close an answered connection without losing the answer.

        The client may still be sending (a body refused unread, a trickle cut off), and closing a
        socket with unread input resets the connection, which can drop the answer before the client
        reads it. So the writing side is shut (the client sees the answer end) and whatever still
        comes is read and dropped until the client closes, for at most ``_LINGER_SECONDS``.
        """
        try:
            connection.setblocking(False)
            connection.shutdown(socket.SHUT_WR)
        except OSError:
            connection.close()
            return
        lingering = _Lingering(connection, time.monotonic() + _LINGER_SECONDS)
        self._lingering[connection] = lingering
        self._selector.register(connection, selectors.EVENT_READ, partial(self._drain, lingering))

    def _drain(self, lingering: _Lingering) -> None:
        try:
            data = lingering.connection.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        lingering.drained += len(data)
        if not data or lingering.drained > _LINGER_MAX_BYTES:
            self._close(lingering.connection)

    def _close(self, connection: socket.socket) -> None:
        try:
            self._selector.unregister(connection)
        except (KeyError, ValueError):
            pass
        self._arriving.pop(connection, None)
        self._lingering.pop(connection, None)
        connection.close()

    def _woken(self) -> None:
        try:
            while self._wake_up.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        while not self._answered.empty():
            self._linger(self._answered.get_nowait())

    def _wake(self) -> None:
        try:
            self._wake_signal.send(b"\0")
        except OSError:  # its buffer is full of wake-ups already, or the server has stopped
            pass

    def _stop_accepting(self, now: float) -> None:
        self._accepting = False
        if self._accept_paused_until is None:
            self._selector.unregister(self.socket)
        self._accept_paused_until = None
        self.server_close()  # the listening socket: new connections are refused from here on
        for arriving in self._arriving.values():
            arriving.deadline = min(arriving.deadline, now + STOP_GRACE_SECONDS)

    # ---- the worker pool ----------------------------------------------------------------

    def _process(self, arrived: _Arrived, client_address: Any) -> None:
        try:
            # Writing the answer blocks at most this long on a client that does not read it.
            arrived.connection.settimeout(self.request_deadline)
            self.finish_request(arrived, client_address)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - as socketserver does: handle_error logs it and the server keeps serving
            self.handle_error(arrived, client_address)
        finally:
            self._answered.put(arrived.connection)  # the reader lingers on it, then closes it
            self._wake()

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> LocalHttpServer:
        self._thread = threading.Thread(target=self._read_requests, name="memtool-http-reader", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, finish every request that has arrived, then return.

        The listening socket closes first, so a new client is refused at once instead of waiting
        in the backlog; clients still sending their request get a second to finish; requests
        being handled run to their answer.
        """
        if self._stopped:
            return
        self._stopped = True
        self.stopping = True
        if self._thread is None:  # never started
            self.server_close()
        else:
            self._wake()
            self._arrivals_over.wait(timeout=STOP_GRACE_SECONDS + 10)
        self._pool.shutdown(wait=True)
        self._workers_done = True
        if self._thread is not None:
            self._wake()
            self._thread.join(timeout=_LINGER_SECONDS + 10)
        self._wake_up.close()
        self._wake_signal.close()


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
    request_deadline: float = REQUEST_DEADLINE_SECONDS,
) -> LocalHttpServer:
    return LocalHttpServer(
        (host, port),
        gateway,
        workers=workers,
        backlog=backlog,
        verbose=verbose,
        special_routes=special_routes,
        access_log=access_log,
        request_deadline=request_deadline,
    ).start()
