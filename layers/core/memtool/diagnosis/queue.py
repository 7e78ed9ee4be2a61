"""Where off-path diagnose events go: the port, and its SQS, SQLite and no-op adapters.

A failed or thumbs-down answer puts a ``DiagnoseRequest`` on a queue; DiagnoseFunction consumes
it. In AWS the queue is SQS (redrive to a dead-letter queue after a few receives). Locally it is
``SQLiteDiagnosisQueue``, a durable file with SQS's delivery semantics: a received message is
invisible for a while and comes back unless deleted, so a consumer killed mid-batch loses nothing;
a message delivered ``max_attempts`` times without being deleted becomes a dead letter. Only the
SQS adapter touches boto3, through a client it is given.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from memtool.diagnosis.requests import DiagnoseRequest
from memtool.errors import MemtoolError
from memtool.memory.sqlite_tx import read_transaction, write_transaction

if TYPE_CHECKING:
    from memtool.settings import Settings

logger = logging.getLogger("memtool.diagnosis")

BUSY_TIMEOUT_SECONDS = 10.0
DEFAULT_MAX_ATTEMPTS = 3


class QueueUnavailable(MemtoolError):
    """The diagnose event could not be queued (the queue refused it or could not be reached)."""

    code = "diagnosis_queue_unavailable"


class DiagnosisQueue(Protocol):
    def send(self, request: DiagnoseRequest) -> None: ...


# ---- SQS (AWS) --------------------------------------------------------------------------------


class SqsDiagnosisQueue:
    """Sends each request as one SQS message whose body is the request's JSON."""

    def __init__(self, client: Any, queue_url: str) -> None:
        self.client = client
        self.queue_url = queue_url

    def send(self, request: DiagnoseRequest) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.send_message(QueueUrl=self.queue_url, MessageBody=request.model_dump_json())
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise QueueUnavailable(
                f"diagnose event {request.request_id} was not queued: "
                f"{error.get('Code', 'ClientError')}: {error.get('Message', str(exc))}"
            ) from exc
        except BotoCoreError as exc:
            raise QueueUnavailable(
                f"diagnose event {request.request_id} was not queued: {type(exc).__name__}: {exc}"
            ) from exc


# ---- none ---------------------------------------------------------------------------------------


class NullDiagnosisQueue:
    """Diagnosis off: events are dropped (and said so at debug level)."""

    def send(self, request: DiagnoseRequest) -> None:
        logger.debug(
            "diagnose queue is 'none': event %s for episode %s not queued", request.request_id, request.episode_id
        )


# ---- SQLite (the local runtime) -----------------------------------------------------------------


@dataclass(frozen=True)
class QueuedMessage:
    """One delivery of a message: ``attempts`` counts this one (SQS's ApproximateReceiveCount)."""

    message_id: str
    body: str
    attempts: int
    first_sent_at: datetime
    receipt_handle: str


_SCHEMA = [
    # AUTOINCREMENT: delivery order is send order, and a deleted seq is never reused.
    """CREATE TABLE IF NOT EXISTS messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id TEXT NOT NULL UNIQUE,
        body TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        first_sent_at REAL NOT NULL,   -- seconds since the epoch
        visible_at REAL NOT NULL,      -- not delivered before this; in flight while in the future
        receipt_handle TEXT,           -- of the latest delivery; NULL: never delivered
        last_error TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS messages_visible ON messages (visible_at, seq)",
    """CREATE TABLE IF NOT EXISTS dead_letters (
        message_id TEXT PRIMARY KEY,
        body TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        first_sent_at REAL NOT NULL,
        dead_at REAL NOT NULL,
        last_error TEXT
    )""",
    "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
]


class SQLiteDiagnosisQueue:
    """A durable queue in one SQLite file, safe for any number of threads and processes.

    WAL with ``synchronous=FULL``: a ``send`` that returned survives ``kill -9``. Every change is
    one ``BEGIN IMMEDIATE`` transaction, so two receivers (threads or processes) never take the
    same message. ``clock`` gives seconds since the epoch; tests pass their own to expire a
    visibility timeout without waiting for it.
    """

    def __init__(
        self,
        path: Path,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.path = Path(path)
        self.max_attempts = max_attempts
        self.clock = clock
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            str(self.path), timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False
        )
        self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        with self._writing() as conn:
            for statement in _SCHEMA:
                conn.execute(statement)

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, the write lock taken before the first read."""
        with self._lock:
            if self._conn is None:
                raise RuntimeError(f"the diagnosis queue at {self.path} is closed")
            with write_transaction(self._conn) as conn:
                yield conn

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every SELECT in it sees the same snapshot."""
        with self._lock:
            if self._conn is None:
                raise RuntimeError(f"the diagnosis queue at {self.path} is closed")
            with read_transaction(self._conn) as conn:
                yield conn

    def send(self, request: DiagnoseRequest) -> None:
        self.send_body(request.model_dump_json())

    def send_body(self, body: str) -> str:
        """Queue a raw body (as SQS would take any string); returns the new message id."""
        message_id = str(uuid.uuid4())
        now = self.clock()
        with self._writing() as conn:
            conn.execute(
                "INSERT INTO messages (message_id, body, first_sent_at, visible_at) VALUES (?, ?, ?, ?)",
                (message_id, body, now, now),
            )
        return message_id

    def receive(self, max_messages: int = 10, visibility_seconds: float = 30.0) -> list[QueuedMessage]:
        """Up to ``max_messages`` visible messages, oldest first, each hidden for ``visibility_seconds``.

        A message already delivered ``max_attempts`` times that comes back (its consumer never
        deleted nor released it) goes to the dead letters instead of being delivered again.
        """
        if max_messages < 1:
            return []
        now = self.clock()
        taken: list[QueuedMessage] = []
        with self._writing() as conn:
            while len(taken) < max_messages:
                rows = conn.execute(
                    "SELECT seq, message_id, body, attempts, first_sent_at FROM messages"
                    " WHERE visible_at <= ? ORDER BY seq LIMIT ?",
                    (now, max_messages - len(taken)),
                ).fetchall()
                if not rows:
                    break
                for seq, message_id, body, attempts, first_sent_at in rows:
                    if attempts >= self.max_attempts:
                        self._bury(conn, message_id, now, "visibility timeout expired on the last attempt")
                        continue
                    receipt = uuid.uuid4().hex
                    conn.execute(
                        "UPDATE messages SET attempts = attempts + 1, visible_at = ?, receipt_handle = ? WHERE seq = ?",
                        (now + visibility_seconds, receipt, seq),
                    )
                    taken.append(
                        QueuedMessage(
                            message_id=message_id,
                            body=body,
                            attempts=attempts + 1,
                            first_sent_at=datetime.fromtimestamp(first_sent_at, UTC),
                            receipt_handle=receipt,
                        )
                    )
        return taken

    def delete(self, message_id: str, receipt_handle: str | None = None) -> bool:
        """Done with a message. With a receipt handle, only if it is still this delivery's (a
        consumer whose visibility timeout ran out must not delete the next consumer's delivery)."""
        with self._writing() as conn:
            deleted = conn.execute(
                "DELETE FROM messages WHERE message_id = ? AND (? IS NULL OR receipt_handle = ?)",
                (message_id, receipt_handle, receipt_handle),
            ).rowcount
            if deleted:
                conn.execute(
                    "INSERT INTO counters (name, value) VALUES ('delivered', 1)"
                    " ON CONFLICT (name) DO UPDATE SET value = value + 1"
                )
        return bool(deleted)

    def release(
        self,
        message_id: str,
        delay_seconds: float = 0.0,
        *,
        receipt_handle: str | None = None,
        error: str | None = None,
    ) -> bool:
        """A delivery failed: the message is visible again after ``delay_seconds``, or, when it
        has had ``max_attempts`` deliveries, it becomes a dead letter. Returns True for the latter."""
        now = self.clock()
        with self._writing() as conn:
            row = conn.execute(
                "SELECT attempts FROM messages WHERE message_id = ? AND (? IS NULL OR receipt_handle = ?)",
                (message_id, receipt_handle, receipt_handle),
            ).fetchone()
            if row is None:
                return False
            if row[0] >= self.max_attempts:
                self._bury(conn, message_id, now, error)
                return True
            conn.execute(
                "UPDATE messages SET visible_at = ?, last_error = ? WHERE message_id = ?",
                (now + max(0.0, delay_seconds), error, message_id),
            )
        return False

    @staticmethod
    def _bury(conn: sqlite3.Connection, message_id: str, now: float, error: str | None) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO dead_letters (message_id, body, attempts, first_sent_at, dead_at, last_error)"
            " SELECT message_id, body, attempts, first_sent_at, ?, COALESCE(?, last_error)"
            " FROM messages WHERE message_id = ?",
            (now, error, message_id),
        )
        conn.execute("DELETE FROM messages WHERE message_id = ?", (message_id,))
        logger.warning("diagnose event %s is a dead letter: %s", message_id, error or "no error recorded")

    def dead_letters(self) -> list[QueuedMessage]:
        """What gave up, oldest first (``attempts``: the deliveries it had; no receipt handle)."""
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT message_id, body, attempts, first_sent_at FROM dead_letters ORDER BY dead_at, message_id"
            ).fetchall()
        return [
            QueuedMessage(m, body, attempts, datetime.fromtimestamp(sent, UTC), receipt_handle="")
            for m, body, attempts, sent in rows
        ]

    def revive_dead_letters(self) -> int:
        """Put every dead letter back, visible now, with its delivery count reset (a restart after
        fixing their cause clears them). Returns how many."""
        now = self.clock()
        with self._writing() as conn:
            revived = conn.execute(
                "INSERT INTO messages (message_id, body, attempts, first_sent_at, visible_at, last_error)"
                " SELECT message_id, body, 0, first_sent_at, ?, last_error FROM dead_letters ORDER BY dead_at",
                (now,),
            ).rowcount
            conn.execute("DELETE FROM dead_letters")
        return revived

    def stats(self) -> dict[str, int]:
        now = self.clock()
        with self._reading() as conn:
            pending, in_flight = conn.execute(
                "SELECT COALESCE(SUM(visible_at <= ?), 0), COALESCE(SUM(visible_at > ?), 0) FROM messages",
                (now, now),
            ).fetchone()
            (dead,) = conn.execute("SELECT COUNT(*) FROM dead_letters").fetchone()
            delivered = conn.execute("SELECT value FROM counters WHERE name = 'delivered'").fetchone()
        return {
            "pending": int(pending),
            "in_flight": int(in_flight),
            "dead_letters": int(dead),
            "delivered": int(delivered[0]) if delivered else 0,
        }

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


# ---- choosing one -------------------------------------------------------------------------------


def build_diagnosis_queue(settings: Settings, sqs_client_factory: Callable[[], Any]) -> DiagnosisQueue:
    """The queue ``settings.diagnose_queue_kind`` names; the SQS client is made only for 'sqs'."""
    kind = settings.diagnose_queue_kind
    if kind == "sqs":
        if not settings.diagnose_queue_url:
            raise ValueError("MEMTOOL_DIAGNOSE_QUEUE is 'sqs' but MEMTOOL_DIAGNOSE_QUEUE_URL is not set")
        return SqsDiagnosisQueue(sqs_client_factory(), settings.diagnose_queue_url)
    if kind == "sqlite":
        return SQLiteDiagnosisQueue(settings.diagnose_queue_file, max_attempts=settings.diagnose_max_attempts)
    return NullDiagnosisQueue()
