"""The embedded local runtime: the record store, the indexer feed, moto for Step Functions, the API.

Two record stores, chosen by ``store`` (or ``MEMTOOL_STORE``):

- ``sqlite`` (default): a real database under ``<home>/state/``. Every acknowledged write is
  committed (WAL, synchronous=FULL), so a ``kill -9`` loses nothing; its transactional outbox
  feeds the indexer, and a restart delivers whatever was not delivered yet.
- ``dynamodb``: the AWS adapter against moto's DynamoDB (tables from template.yaml), for
  fidelity; its stream feeds the indexer. Tables are saved to JSON on a clean stop only.

Either way AskFlow runs on moto's Step Functions engine from the real ASL. moto is locked down
(loopback, no management API, no CORS) and its address is never advertised. Everything binds
to 127.0.0.1 only.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import socket
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from memtool import __version__
from memtool.settings import Settings, use_settings

if TYPE_CHECKING:
    from memtool.memory.sqlite_store import SQLiteMemoryStore


class _Credentials(TypedDict):
    aws_access_key_id: str
    aws_secret_access_key: str


LOCAL_CREDENTIALS = _Credentials(aws_access_key_id="memtool-local", aws_secret_access_key="memtool-local")
StoreChoice = Literal["sqlite", "dynamodb"]
# /health says "degraded" when the oldest undelivered change is older than this.
LAG_DEGRADED_SECONDS = 30.0
PURGE_EVERY_SECONDS = 300.0


def _sqlite_store() -> SQLiteMemoryStore:
    """The container's record store where the runtime chose SQLite (its outbox and TTL purge are SQLite's own)."""
    from memtool.memory.sqlite_store import SQLiteMemoryStore
    from memtool.runtime import container

    store = container.memory_store()
    if not isinstance(store, SQLiteMemoryStore):
        raise TypeError(f"the local outbox and TTL purge need the SQLite store, not {type(store).__name__}")
    return store


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex((host, port)) == 0


def _quiet_libraries(verbose: bool) -> None:
    # Library configuration for the local process: no EMF metric dumps, no JSON logs of expected
    # 4xx answers on the console. --verbose shows warnings from memtool's own loggers.
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING" if verbose else "ERROR")
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ.setdefault("MOTO_DISABLE_GLOBAL_CORS", "true")
    warnings.filterwarnings("ignore", message="No application metrics to publish", category=UserWarning)
    for name in ("werkzeug", "moto", "botocore", "urllib3"):
        logging.getLogger(name).setLevel(logging.ERROR)
    logging.getLogger("memtool").setLevel(logging.WARNING if verbose else logging.ERROR)


@dataclass
class LocalRuntime:
    home: Path = Path(".memtool")
    host: str = "127.0.0.1"
    port: int = 3000
    verbose: bool = False
    root: Path | None = None
    warehouse_scale: float | None = None  # None: MEMTOOL_WAREHOUSE_SCALE (default 1.0)
    store: StoreChoice | None = None  # None: MEMTOOL_STORE, else sqlite
    workers: int = 16  # API worker threads; more connections than this wait in the queue
    backlog: int = 1024  # listen backlog: connections the kernel holds before accept
    progress: Any = None  # callable(str) for start-up messages
    access_log: Any = None  # callable(str) for --verbose request lines; default print
    serve_api: bool = True  # False: no REST API (memtool mcp serves its tools without one)
    tenants_file: Path | None = None  # YAML: tenant -> {warehouse: URL, model: PATH} (memtool serve --tenants)
    settings: Settings | None = field(default=None, init=False)
    api_url: str | None = field(default=None, init=False)
    loaded: dict[str, int] = field(default_factory=dict, init=False)
    saved: dict[str, int] = field(default_factory=dict, init=False)
    warehouse: Any = field(default=None, init=False)
    tenants: dict[str, Any] = field(default_factory=dict, init=False)
    _moto: Any = field(default=None, init=False)
    _http: Any = field(default=None, init=False)
    _names: dict[str, str] = field(default_factory=dict, init=False)
    _drain: Any = field(default=None, init=False)
    _outbox: Any = field(default=None, init=False)
    _diagnoses: Any = field(default=None, init=False)  # BackgroundDiagnoseDrain
    revived_diagnoses: int = field(default=0, init=False)  # dead diagnose events put back at start
    _purger: threading.Thread | None = field(default=None, init=False)
    _maintainer: threading.Thread | None = field(default=None, init=False)
    _stopping: threading.Event = field(default_factory=threading.Event, init=False)
    _started_at: float = field(default=0.0, init=False)

    @property
    def state_dir(self) -> Path:
        return self.home / "state"

    @property
    def store_kind(self) -> StoreChoice:
        assert self.settings is not None
        return self.settings.record_store

    def start(self) -> LocalRuntime:
        """Start everything; a start that fails stops what it had started (moto, the drains), so
        the caller gets the error alone and no thread is left behind."""
        if self.host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the local runtime listens on loopback only")
        if self.port and port_in_use(self.host, self.port):
            raise OSError(f"port {self.port} on {self.host} is already in use (choose another with --port)")
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> LocalRuntime:
        from memtool.runtime.local_api import LocalApiGateway, serve_http
        from memtool.runtime.moto_server import LocalMotoServer
        from memtool.runtime.template import load_template, project_root

        _quiet_libraries(self.verbose)
        root = self.root or project_root()
        template = load_template(root / "template.yaml")
        self._moto = LocalMotoServer(self.host, 0).start()
        from_environment = Settings()
        store = self.store or from_environment.store or "sqlite"
        self.settings = Settings(
            runtime="local",
            region="us-east-1",
            aws_endpoint_url=self._moto.endpoint,
            home=self.home,
            store=store,
            diagnose_queue="sqlite",
            **LOCAL_CREDENTIALS,
        )
        if self.warehouse_scale is not None:
            self.settings = self.settings.model_copy(update={"warehouse_scale": self.warehouse_scale})
        if self.tenants_file is not None:
            self.settings = self.settings.model_copy(update={"tenants_file": self.tenants_file.resolve()})
        use_settings(self.settings)
        self.tenants = self._read_tenants()
        self._check_state()
        self._ensure_warehouse()
        if store == "sqlite":
            self._start_sqlite()
        else:
            self._start_dynamodb(template, root)
        self._start_diagnose_queue(root)
        self._warm()
        self._started_at = time.time()
        if not self.serve_api:
            return self
        gateway = LocalApiGateway(template, root)
        self._http = serve_http(
            gateway,
            self.host,
            self.port,
            verbose=self.verbose,
            workers=self.workers,
            backlog=self.backlog,
            special_routes={("GET", "/health"): self.health, ("GET", "/openapi.json"): _openapi},
            access_log=self.access_log,
        )
        self.api_url = f"http://{self.host}:{self._http.server_address[1]}"
        self._started_at = time.time()
        if self.settings.maintenance_interval_hours > 0:
            self._maintainer = threading.Thread(target=self._maintain_daily, name="memtool-maintenance", daemon=True)
            self._maintainer.start()
        return self

    def _maintain_daily(self) -> None:
        """MaintenanceFlow's schedule, locally: every tenant, every step, once per interval (the first
        run one interval after start), on the same ASL through moto's engine."""
        from memtool.runtime import container
        from memtool.runtime.maintenance_launchers import LocalMaintenanceLauncher

        assert self.settings is not None
        interval = self.settings.maintenance_interval_hours * 3600
        log = logging.getLogger("memtool.local")
        while not self._stopping.wait(interval):
            try:
                launched = LocalMaintenanceLauncher(container.flow_runner()).launch({"trigger": "schedule"})
                steps = ((launched.output or {}).get("maintenance") or {}).get("report", {}).get("steps", {})
                log.info("maintenance %s: %s", launched.status.lower(), json.dumps(steps, ensure_ascii=False)[:500])
            except Exception as exc:  # noqa: BLE001 - the next interval tries again
                log.warning("maintenance failed: %s: %s", type(exc).__name__, exc)

    def _start_sqlite(self) -> None:
        from memtool.runtime import container
        from memtool.runtime.outbox_drain import BackgroundOutboxDrain, OutboxDrainer

        assert self.settings is not None
        store = _sqlite_store()
        # What a previous run (or a crash) left undelivered is delivered first, in order; dead
        # letters get another chance, so a restart after fixing their cause clears them.
        revived = store.revive_dead_letters()
        self.loaded = {"pending_changes": store.outbox_stats(container.clock().now()).pending, "revived": revived}
        drainer = OutboxDrainer(
            store=_sqlite_store,
            indexer=container.memory_indexer,
            now=lambda: container.clock().now(),
            max_attempts=self.settings.indexer_max_attempts,
        )
        self._outbox = BackgroundOutboxDrain(drainer).start()
        self._purger = threading.Thread(target=self._purge_expired, name="memtool-ttl", daemon=True)
        self._purger.start()

    def state_databases(self) -> dict[str, Path]:
        """The SQLite files this runtime keeps its state in, by the name /health gives each."""
        assert self.settings is not None
        files = {"diagnosis_queue": self.settings.diagnose_queue_file}
        if self.settings.record_store == "sqlite":  # the idempotency records share the store's file
            files = {"store": self.settings.sqlite_path, **files}
        if self.settings.vector_index == "embedded":
            from memtool.retrieval.embedded_index import DATABASE_FILE

            files["index"] = self.settings.home / "index" / DATABASE_FILE
        return files

    def _check_state(self) -> None:
        """Before anything is opened: every folder state is written to takes a file, and every state
        database that exists passes ``PRAGMA quick_check``.

        Either failure stops the start with one line naming the folder or file and what to do (as
        ``StoreReadOnly``, ``InsufficientStorage`` or ``StoreCorrupt``), instead of a traceback from
        whichever adapter opens it first, or a runtime that answers 500 on the reads touching a
        damaged page.
        """
        from memtool.memory.sqlite_store import check_database

        names = {
            "store": "the memory store",
            "diagnosis_queue": "the diagnosis queue",
            "index": "the vector index",
        }
        files = self.state_databases()
        for folder in dict.fromkeys([self.state_dir, *(path.parent for path in files.values())]):
            _check_folder(folder)
        for name, path in files.items():
            check_database(path, names[name])

    def storage_states(self) -> dict[str, str]:
        """Each state database's health: ok, full, read_only (until a write to it succeeds again) or
        corrupt (until a restart on a file that passes the start-up check). The vector index is
        left out: its failures show as the indexer's."""
        from memtool.memory.sqlite_tx import storage_problems

        if self.settings is None:
            return {}
        files = {name: path for name, path in self.state_databases().items() if name != "index"}
        found = storage_problems(files.values())
        return {name: found[str(path)].state if str(path) in found else "ok" for name, path in files.items()}

    def _start_diagnose_queue(self, root: Path) -> None:
        """The local SQS: diagnose events wait in a SQLite file and are drained into the real
        DiagnoseFunction handler, as Lambda's SQS event source would (either record store)."""
        from memtool.diagnosis.queue import SQLiteDiagnosisQueue
        from memtool.runtime.diagnose_drain import BackgroundDiagnoseDrain, DiagnoseDrainer
        from memtool.runtime.handlers import function_fleet

        assert self.settings is not None
        queue = SQLiteDiagnosisQueue(self.settings.diagnose_queue_file, max_attempts=self.settings.diagnose_max_attempts)
        # As with the outbox: dead letters get another chance at start, after their cause is fixed.
        self.revived_diagnoses = queue.revive_dead_letters()
        # The fleet, not the one cached module: DiagnoseFunction also serves POST /diagnose on the
        # API's threads, and two invocations must not share one resolver at the same time.
        handler = function_fleet(root, "diagnose")
        self._diagnoses = BackgroundDiagnoseDrain(DiagnoseDrainer(queue, handler)).start()

    def _purge_expired(self) -> None:
        """DynamoDB's TTL, locally: expired records leave the store (and, via the outbox, the index)."""
        from memtool.runtime import container

        while True:
            try:
                _sqlite_store().purge_expired(container.clock().now())
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                logging.getLogger("memtool.local").warning("TTL purge failed: %s: %s", type(exc).__name__, exc)
            if self._stopping.wait(PURGE_EVERY_SECONDS):
                return

    def _start_dynamodb(self, template: dict[str, Any], root: Path) -> None:
        from memtool.runtime.aws import client
        from memtool.runtime.handlers import function_handler
        from memtool.runtime.stream_drain import BackgroundDrain, StreamDrainer
        from memtool.runtime.tables import create_tables, load_tables

        assert self.settings is not None
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

    def _warm(self) -> None:
        """Build what the first ask needs now (index, planner over the warehouse, AskFlow on the
        engine), so the first user does not wait for it and memory after start is the baseline."""
        from memtool.runtime import container

        if self.progress:
            self.progress("warming up: vector index, planner, AskFlow")
        container.vector_index()
        container.embedder()
        for tenant in (None, *self.tenants):
            try:
                container.planner(tenant)
            except Exception as exc:  # noqa: BLE001 - a missing warehouse shows on the first ask, with its reason
                logging.getLogger("memtool.local").warning("planner warm-up failed for %s: %s", tenant or "the default tenant", exc)
        from memtool.runtime.local_flows import LocalFlowRunner

        runner = container.flow_runner()
        if isinstance(runner, LocalFlowRunner):  # it is, in the local runtime: AskFlow's state machine, made now
            runner.arn("AskFlow")

    def _read_tenants(self) -> dict[str, Any]:
        """The tenants file's entries: each model checked now (a bad one stops the start, with its
        lines), each warehouse opened (one that cannot be reached is a warning: that tenant's
        questions fail until it can be, the other tenants are served)."""
        from memtool.errors import ValidationFailed
        from memtool.runtime import container
        from memtool.sql.warehouse import WarehouseError

        entries = container.tenants()
        for tenant, entry in entries.items():
            self._check_model_file(tenant, entry.model)
            model = container.tenant_model(tenant)
            try:
                schema = container.warehouse(tenant).describe()
            except ValueError as exc:  # not a warehouse URL at all
                raise ValidationFailed(f"tenant {tenant}: {exc}", field="tenants") from None
            except WarehouseError as exc:
                line = f"tenant {tenant}: the warehouse cannot be read now ({exc}); its questions fail until it can"
                logging.getLogger("memtool.local").warning(line)
                if self.progress:
                    self.progress(f"WARNING {line}")
                continue
            missing = [t for t in model.catalog.physical_tables if t not in schema.tables]
            if missing:
                raise ValidationFailed(
                    f"tenant {tenant}: the warehouse {entry.warehouse} has no table {', '.join(missing)} that its model "
                    f"{entry.model} reads",
                    field="tenants",
                )
            if self.progress:
                self.progress(f"tenant {tenant}: {model.label} on {entry.warehouse}")
        return dict(entries)

    @staticmethod
    def _check_model_file(tenant: str, path: Path) -> None:
        """The tenant's model file, checked as `memtool model validate` checks it: problems with their lines."""
        import yaml

        from memtool.errors import ValidationFailed
        from memtool.semantic.validation import parse_for_checks, with_lines, yaml_depth_problem

        text = path.read_text(encoding="utf-8")
        too_deep = yaml_depth_problem(text)  # before PyYAML recurses into it
        if too_deep is not None:
            raise ValidationFailed(f"tenant {tenant}: {path}:{too_deep.line or '?'}: {too_deep.message}", field="tenants")
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
            problem = getattr(exc, "problem", None) or exc
            raise ValidationFailed(f"tenant {tenant}: {where}: YAML syntax error: {problem}", field="tenants") from None
        _, problems = parse_for_checks(document)
        if problems:
            shown = [f"{path}:{p.line or '?'}: {p.path}: {p.message}" for p in with_lines(problems, text)]
            more = f" (and {len(shown) - 5} more)" if len(shown) > 5 else ""
            raise ValidationFailed(f"tenant {tenant}: its model is not valid: " + "; ".join(shown[:5]) + more, field="tenants")

    def _ensure_warehouse(self) -> None:
        from datetime import date

        from memtool.sql.demo_warehouse import ensure_demo_warehouse, read_warehouse_summary

        assert self.settings is not None
        if self.settings.warehouse != "duckdb" or self.settings.warehouse_path is not None or self.settings.warehouse_url:
            return
        anchor = self.settings.today or date.today()
        if self.progress:
            self.progress(f"demo warehouse: 24 months ending {anchor:%Y-%m}, scale {self.settings.warehouse_scale}")
        path = ensure_demo_warehouse(
            self.home, anchor, seed=self.settings.warehouse_seed, scale=self.settings.warehouse_scale
        )
        self.warehouse = read_warehouse_summary(path)

    # ---- health -------------------------------------------------------------------------

    def indexer_stats(self) -> dict[str, Any]:
        if self._outbox is not None:
            stats = self._outbox.drainer.stats()
            stats["drain_errors"] = len(self._outbox.errors)
            return stats
        if self._drain is not None:
            drainer = self._drain.drainer
            return {
                "delivered": drainer.delivered,
                "pending": len(drainer._retry),
                "dead_letters": len(drainer.dead_letters),
                "lag_seconds": None,
                "drain_errors": len(self._drain.errors),
            }
        return {}

    def diagnosis_queue_stats(self) -> dict[str, Any]:
        if self._diagnoses is None:
            return {}
        stats = self._diagnoses.drainer.queue.stats()
        return {
            "pending": stats["pending"],
            "in_flight": stats["in_flight"],
            "dead_letters": stats["dead_letters"],
            "delivered": stats["delivered"],
            "drain_errors": len(self._diagnoses.errors),
        }

    def health(self) -> dict[str, Any]:
        """Status, versions, lags and counts: no file paths, no endpoints.

        It answers whatever state the files are in: counts it cannot read (a damaged or vanished
        store) are left out, and the reason is one of the problems.
        """
        problems: list[str] = []
        indexer = _readable(self.indexer_stats, "indexer counts", problems)
        diagnoses = _readable(self.diagnosis_queue_stats, "diagnosis queue counts", problems)
        lag = indexer.get("lag_seconds")
        if indexer.get("dead_letters"):
            problems.append("indexer has dead letters")
        if diagnoses.get("dead_letters"):
            problems.append("diagnosis queue has dead letters")
        if diagnoses.get("drain_errors"):
            problems.append("diagnosis queue feed failing")
        if lag is not None and lag > LAG_DEGRADED_SECONDS:
            problems.append(f"indexer lags {lag:.0f} s")
        if indexer.get("drain_errors"):
            problems.append("indexer feed failing")
        problems.extend(f"{name} circuit {state['state']}" for name, state in _breaker_states().items() if state["state"] != "closed")
        storage = self.storage_states()
        problems.extend(
            f"{name.replace('_', ' ')} {_STORAGE_PROBLEMS[state]}" for name, state in storage.items() if state != "ok"
        )
        http = self._http.stats if self._http is not None else None
        return {
            "status": "degraded" if problems else "ok",
            "problems": problems,
            "runtime": "local",
            "store": self.store_kind if self.settings else None,
            "storage": storage,
            "versions": {
                "memtool": __version__,
                "python": platform.python_version(),
            },
            "uptime_seconds": round(time.time() - self._started_at, 1),
            "requests": {
                "served": http.served if http else 0,
                "server_errors": http.server_errors if http else 0,
                "in_flight": max(0, http.in_flight - 1) if http else 0,  # not counting this one
            },
            "cache": _cache_stats(),
            "breakers": _breaker_states(),
            "indexer": indexer,
            "diagnosis_queue": diagnoses,
        }

    # ---- control ------------------------------------------------------------------------

    def drain(self) -> int:
        """Deliver pending changes to the indexer now (tests and the demo)."""
        if self._outbox is not None:
            return self._outbox.drainer.drain()
        return self._drain.drainer.drain() if self._drain else 0

    def drain_diagnoses(self) -> int:
        """Deliver queued diagnose events to DiagnoseFunction now (tests and the demo)."""
        return self._diagnoses.drainer.drain() if self._diagnoses is not None else 0

    def save(self) -> dict[str, int]:
        """DynamoDB mode only: moto keeps tables in memory, so a clean stop writes them out."""
        from memtool.runtime.aws import client
        from memtool.runtime.tables import save_tables

        assert self.settings is not None
        if not self._names:
            return {}
        self.saved = save_tables(client("dynamodb", self.settings), self._names, self.state_dir)
        return self.saved

    def stop(self) -> None:
        """Finish the requests in flight, deliver the outbox, then close everything."""
        self._stopping.set()
        try:
            if self._http is not None:
                self._http.stop()
            if self._purger is not None:
                self._purger.join(timeout=10)
            if self._maintainer is not None:
                self._maintainer.join(timeout=30)
            # Before the outbox: a diagnosis may write memories, which the outbox then indexes.
            if self._diagnoses is not None:
                self._diagnoses.stop()
                self._diagnoses.drainer.queue.close()
            if self._outbox is not None:
                self._outbox.stop()
            if self._drain is not None:
                self._drain.stop()
            if self._moto is not None and self._names:
                self.save()
        finally:
            if self._moto is not None:
                self._moto.stop()
            self._http = self._moto = self._drain = self._outbox = self._purger = self._maintainer = self._diagnoses = None
            use_settings(None)  # closes the store and the index

    def __enter__(self) -> LocalRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# What /health says of a state database in trouble (no path: /health shows none).
_STORAGE_PROBLEMS = {
    "full": "disk full: writes answer 507 insufficient_storage until space is freed",
    "read_only": "not writable: writes answer 507 store_read_only until it is made writable",
    "corrupt": "damaged: reads of the bad pages fail; stop, restore the file from a copy (or move it away), restart",
}


def _readable(read: Any, what: str, problems: list[str]) -> dict[str, Any]:
    """``read()``, or {} with a problem saying why it could not be read (the domain error's code,
    or the error's type: never a message, which may hold a path)."""
    import sqlite3

    from memtool.errors import MemtoolError

    try:
        return read()
    except MemtoolError as exc:
        problems.append(f"{what} unreadable: {exc.code}")
    except (sqlite3.Error, OSError, RuntimeError) as exc:
        problems.append(f"{what} unreadable: {type(exc).__name__}")
    return {}


def _check_folder(folder: Path) -> None:
    """The folder exists (created if need be) and takes a new file, written and synced, as SQLite's
    journal and WAL files will need. A probe, not ``os.access``: root passes any mode bit, but
    not an immutable folder, a read-only mount or a full disk."""
    from memtool.errors import InsufficientStorage, StoreReadOnly
    from memtool.memory.sqlite_tx import storage_failure

    probe = folder / f".memtool-write-check-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as handle:
            handle.write(b"memtool")
            handle.flush()
            os.fsync(handle.fileno())
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if isinstance(storage_failure(exc), InsufficientStorage):
            raise InsufficientStorage(f"the state folder {folder} is on a full disk ({reason}): free some space and start again") from exc
        raise StoreReadOnly(
            f"the state folder {folder} cannot be written ({reason}): make it writable, or choose another with --home"
        ) from exc


def _cache_stats() -> dict[str, Any]:
    from memtool.cache.sql_cache import STATS

    return STATS.snapshot()


def _breaker_states() -> dict[str, Any]:
    """Each outside dependency's circuit (closed, open, half_open) and its counts."""
    from memtool.runtime import container

    return container.breakers().health()


def _openapi() -> dict[str, Any]:
    from memtool.runtime.openapi import openapi_document

    return openapi_document()

