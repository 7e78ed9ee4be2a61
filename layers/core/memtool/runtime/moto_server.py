"""moto in server mode for the local runtime, locked down and bounded.

The local runtime uses moto for what it has no embedded stand-in for (Step Functions, and
DynamoDB when ``--store dynamodb`` asks for fidelity with AWS). Out of the box moto's server
would serve its management API (``/moto-api/data.json`` dumps every tenant's items, and
``/moto-api/reset`` wipes them) and echo any Origin for CORS; it runs DynamoDB transactions
without a lock, restoring a whole-table copy on a failed condition (which loses other writers'
items); and it keeps every model instance it ever made for its dashboard. This module serves
moto behind a WSGI middleware that closes those doors, and switches the instance tracking off.
"""

from __future__ import annotations

import threading
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
