"""moto in server mode for the local runtime, locked down and bounded.

The local runtime uses moto for what it has no embedded stand-in for (Step Functions, and
DynamoDB when ``--store dynamodb`` asks for fidelity with AWS). Out of the box moto's server
would serve its management API (``/moto-api/data.json`` dumps every tenant's items, and
``/moto-api/reset`` wipes them) and echo any Origin for CORS; it runs DynamoDB transactions
without a lock, restoring a whole-table copy on a failed condition (which loses other writers'
items); and it keeps every model instance it ever made for its dashboard. This module serves
moto behind a WSGI middleware that closes those doors, and switches the instance tracking off.

It also bounds the process's C heap, which moto's engine churns (see ``bound_malloc_arenas`` and
``HeapTrimmer``), and DuckDB's own allocator (``bound_duckdb_allocator``): the local runtime
starts moto first, before any worker thread and before DuckDB is imported.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

DYNAMODB_TARGET = "DynamoDB_20120810."
_DENIED_PREFIXES = ("/moto-api",)

StartResponse = Callable[..., Any]


class LockedDownMoto:
    """WSGI middleware: no management API, no CORS, and DynamoDB calls one at a time."""

    def __init__(self, app: Callable[[dict[str, Any], StartResponse], Iterable[bytes]]) -> None:
        self._app = app
        self._dynamodb = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path.startswith(_DENIED_PREFIXES) or environ.get("REQUEST_METHOD") == "OPTIONS":
            start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "9")])
            return [b"not found"]

        def without_cors(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
            kept = [(k, v) for k, v in headers if not k.lower().startswith("access-control-")]
            return start_response(status, kept, *rest)

        if environ.get("HTTP_X_AMZ_TARGET", "").startswith(DYNAMODB_TARGET):
            # moto's transact_write_items is neither atomic nor isolated: serialise the table.
            with self._dynamodb:
                return list(self._app(environ, without_cors))
        return self._app(environ, without_cors)


def stop_instance_tracking() -> None:
    """moto records every model instance for its dashboard; the local runtime has none."""
    from moto.core.common_models import BaseModel
    from moto.core.model_instances import reset_model_data

    def untracked_new(cls: type, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(cls)

    BaseModel.__new__ = staticmethod(untracked_new)  # type: ignore[method-assign]  # a monkeypatch of moto, on purpose
    reset_model_data()


# glibc's malloc arenas for the local runtime's process (M_ARENA_MAX). Its default is eight per
# core, and each arena keeps what was freed into it for its own reuse; moto's engine starts about
# eleven short-lived threads per ask, so allocations spread over every arena and each holds its
# own high-water mark. On 2 cores, after 1,000 asks, the arenas held 259 MB of which 64 MB were in
# use. Two arenas: the process runs Python under one GIL, so threads rarely contend for malloc,
# and a second arena covers the native threads (DuckDB's, SQLite's) that run without it.
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's malloc.h


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt, libc.malloc_trim  # noqa: B018 - glibc has both; musl and others may not
    except (OSError, AttributeError):
        return None
    return libc


def bound_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas for this process, unless ``MALLOC_ARENA_MAX`` already chose;
    True when the cap was set. It applies to arenas made from now on, so it is called before the
    runtime starts its threads (``LocalMotoServer.start``)."""
    libc = _glibc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))


# DuckDB allocates through its own copy of jemalloc (its symbols are ``duckdb_je_*``), which reads
# its options from DUCKDB_JE_MALLOC_CONF once, when DuckDB is imported. As DuckDB ships it, freed
# pages stay resident for a second (``dirty_decay_ms`` 1000) and then linger as "muzzy" pages; under
# a steady stream of queries there is always a second's worth. Measured in one process, 8 threads
# running the soak's seven aggregate and join queries on the demo warehouse 6,000 times (through
# DuckDBWarehouse, glibc capped at two arenas): anonymous RSS 64-77 MB after 1,000 queries and
# 85-88 MB at the end as shipped; 50-53 MB and 67 MB when freed pages go back at once. It costs
# DuckDB time (those 6,000 queries took 49 s instead of 34-38 s, about 2 ms a query on 2 cores),
# a few milliseconds of an ask that takes hundreds.
DUCKDB_ALLOCATOR = "dirty_decay_ms:0,muzzy_decay_ms:0"


def bound_duckdb_allocator(conf: str = DUCKDB_ALLOCATOR) -> bool:
    """Set DuckDB's allocator options for this process, unless ``DUCKDB_JE_MALLOC_CONF`` already
    chose or DuckDB is imported already (too late: it read them then); True when they were set."""
    if "DUCKDB_JE_MALLOC_CONF" in os.environ or "duckdb" in sys.modules:
        return False
    os.environ["DUCKDB_JE_MALLOC_CONF"] = conf
    return True


class HeapTrimmer:
    """Hands the C heap's free pages back to the OS (glibc's ``malloc_trim``), at most once per
    ``interval`` seconds, when a flow has finished.

    An ask allocates and frees tens of megabytes (moto parses a Map definition with ANTLR, copies
    the execution's JSON at every state; DuckDB and SQLite buffer results), and glibc returns
    freed memory to the OS only from the top of each heap: the pages in between stay resident
    until reused. Trimming takes a few milliseconds with the arenas locked; every ten seconds it
    costs nothing measurable and keeps the freed part of the heap out of the RSS.
    """

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self.trims = 0
        self._libc = _glibc()
        self._next = 0.0
        self._lock = threading.Lock()

    def after_flow(self) -> bool:
        """Trim if the interval has passed (and no other thread is trimming); True when it did."""
        if self._libc is None or time.monotonic() < self._next or not self._lock.acquire(blocking=False):
            return False
        try:
            self._next = time.monotonic() + self.interval
            self._libc.malloc_trim(0)
            self.trims += 1
            return True
        finally:
            self._lock.release()


heap_trimmer = HeapTrimmer()


class LocalMotoServer:
    """moto's backends behind ``LockedDownMoto`` on a loopback port, in a thread."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> LocalMotoServer:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        bound_malloc_arenas()
        bound_duckdb_allocator()
        stop_instance_tracking()
        # moto's backends are process-wide: a runtime starts from its own saved state, never from
        # what an earlier runtime in this process left in memory.
        from moto.core.base_backend import BackendDict

        BackendDict.reset()
        app = LockedDownMoto(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(self.host, self.port, app, threaded=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="memtool-moto", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None
