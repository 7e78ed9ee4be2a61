"""The embedded local runtime: moto in server mode, tables from template.yaml, the local API.

State survives restarts: tables are saved under ``<home>/state/`` on shutdown and loaded on
start. Everything binds to 127.0.0.1 only.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtool.runtime.settings import Settings, use_settings

LOCAL_CREDENTIALS = {"aws_access_key_id": "memtool-local", "aws_secret_access_key": "memtool-local"}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex((host, port)) == 0


def _quiet_powertools() -> None:
    # Library configuration for the local process: no EMF metric lines or JSON logs on the console.
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto server's request log


@dataclass
class LocalRuntime:
    home: Path = Path(".memtool")
    host: str = "127.0.0.1"
    port: int = 3000
    verbose: bool = False
    root: Path | None = None
    warehouse_scale: float | None = None  # None: MEMTOOL_WAREHOUSE_SCALE (default 1.0)
    progress: Any = None  # callable(str) for start-up messages
    settings: Settings | None = field(default=None, init=False)
    api_url: str | None = field(default=None, init=False)
    loaded: dict[str, int] = field(default_factory=dict, init=False)
    saved: dict[str, int] = field(default_factory=dict, init=False)
    _moto: Any = field(default=None, init=False)
    _http: Any = field(default=None, init=False)
    _names: dict[str, str] = field(default_factory=dict, init=False)
    _drain: Any = field(default=None, init=False)
    warehouse: Any = field(default=None, init=False)
    _started_at: float = field(default=0.0, init=False)

    @property
    def state_dir(self) -> Path:
        return self.home / "state"

    def start(self) -> LocalRuntime:
        from moto.server import ThreadedMotoServer

        from memtool.runtime.aws import client
        from memtool.runtime.handlers import function_handler
        from memtool.runtime.local_api import LocalApiGateway, serve_http
        from memtool.runtime.stream_drain import BackgroundDrain, StreamDrainer
        from memtool.runtime.tables import create_tables, load_tables
        from memtool.runtime.template import load_template, project_root

        if self.host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the local runtime listens on loopback only")
        if self.port and port_in_use(self.host, self.port):
            raise OSError(f"port {self.port} on {self.host} is already in use (choose another with --port)")
        _quiet_powertools()
        root = self.root or project_root()
        template = load_template(root / "template.yaml")
        moto_port = free_port(self.host)
        self._moto = ThreadedMotoServer(ip_address=self.host, port=moto_port, verbose=False)
        self._moto.start()
        self.settings = Settings(
            runtime="local",
            region="us-east-1",
            aws_endpoint_url=f"http://{self.host}:{moto_port}",
            home=self.home,
            **LOCAL_CREDENTIALS,
        )
        if self.warehouse_scale is not None:
            self.settings = self.settings.model_copy(update={"warehouse_scale": self.warehouse_scale})
        use_settings(self.settings)
        self._ensure_warehouse()
        dynamodb = client("dynamodb", self.settings)
        self._names = create_tables(dynamodb, self.settings, template)
        self._drain = BackgroundDrain(
            StreamDrainer(
                dynamodb,
                client("dynamodbstreams", self.settings),
                self.settings.memory_table,
                function_handler(root, "indexer"),
            )
        ).start()
        # Restored items flow through the stream like new writes, so the index catches up.
        self.loaded = load_tables(dynamodb, self._names, self.state_dir)
        gateway = LocalApiGateway(template, root)
        self._http, _ = serve_http(gateway, self.host, self.port, self.health, verbose=self.verbose)
        bound_port = self._http.server_address[1]
        self.api_url = f"http://{self.host}:{bound_port}"
        self._started_at = time.time()
        return self

    def _ensure_warehouse(self) -> None:
        from datetime import date

        from memtool.sql.demo_warehouse import ensure_demo_warehouse, read_warehouse_summary

        assert self.settings is not None
        if self.settings.warehouse != "duckdb" or self.settings.warehouse_path is not None:
            return
        anchor = self.settings.today or date.today()
        if self.progress:
            self.progress(f"demo warehouse: 24 months ending {anchor:%Y-%m}, scale {self.settings.warehouse_scale}")
        path = ensure_demo_warehouse(
            self.home, anchor, seed=self.settings.warehouse_seed, scale=self.settings.warehouse_scale
        )
        self.warehouse = read_warehouse_summary(path)

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "runtime": "local",
            "uptime_seconds": round(time.time() - self._started_at, 1),
            "dynamodb_endpoint": self.settings.aws_endpoint_url if self.settings else None,
            "tables": self._names,
            "warehouse": str(self.warehouse.path) if self.warehouse else None,
            "state_dir": str(self.state_dir.resolve()),
            "indexer": {
                "delivered": self._drain.drainer.delivered if self._drain else 0,
                "dead_letters": len(self._drain.drainer.dead_letters) if self._drain else 0,
                "errors": list(self._drain.errors) if self._drain else [],
            },
        }

    def drain(self) -> int:
        """Deliver pending stream records to the indexer now (tests and the demo)."""
        return self._drain.drainer.drain() if self._drain else 0

    def save(self) -> dict[str, int]:
        from memtool.runtime.aws import client
        from memtool.runtime.tables import save_tables

        assert self.settings is not None
        self.saved = save_tables(client("dynamodb", self.settings), self._names, self.state_dir)
        return self.saved

    def stop(self) -> None:
        try:
            if self._http is not None:
                self._http.shutdown()
                self._http.server_close()
            if self._drain is not None:
                self._drain.stop()
            if self._moto is not None and self.settings is not None:
                self.save()
        finally:
            if self._moto is not None:
                self._moto.stop()
            self._http = self._moto = self._drain = None
            use_settings(None)

    def __enter__(self) -> LocalRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
