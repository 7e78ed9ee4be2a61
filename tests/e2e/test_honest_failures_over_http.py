"""Honest failure states, the rest of them (issue 21, item 7), over the local runtime's HTTP and the
Lambda handler path:

- "net revenue between 1900-01-01 and 9999-12-31" is a 400 on ``question`` quoting "9999-12-31"
  (the request's validation, before any flow starts), in both; a normal question is unaffected.
- A full disk under the idempotency record of a write with an Idempotency-Key: 507
  insufficient_storage (Powertools wrapped it: it was a 500), nothing stored; once space is freed
  the same key stores the write once and replays it.
- A full disk during an ask: the answer says the store is full (``insufficient_storage``), not
  ``step_failed``; nothing is recorded.
- The OpenAPI document lists 413 and 507 on every write, and neither on a read.
"""

from __future__ import annotations

import json
import sqlite3
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memtool.memory import sqlite_store
from memtool.memory.sqlite_store import SQLiteMemoryStore
from memtool.runtime.local import LocalRuntime
from memtool.runtime.openapi import openapi_document
from memtool.runtime.sqlite_idempotency import SQLiteIdempotencyLayer

from tests.support import ROOT, Api

pytestmark = pytest.mark.slow

OUT_OF_RANGE = "net revenue between 1900-01-01 and 9999-12-31"
REFUSAL = '"9999-12-31" is outside the dates memtool can read (1900-01-01 to 2200-12-31): ask about a period inside them'
FULL = "the disk holding memtool's state is full; nothing of this request was stored"


@pytest.fixture
def runtime_env(demo_warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {"MEMTOOL_WAREHOUSE_PATH": str(demo_warehouse), "MEMTOOL_TODAY": "2026-11-29"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def call(url: str, method: str, path: str, body: Any = None, *, tenant: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    sent = {"X-Memtool-Tenant": tenant, "X-Memtool-User": "li", "Content-Type": "application/json", **(headers or {})}
    data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
    request = urllib.request.Request(url + path, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def rows(path: Path, table: str) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


# ---- dates the parser cannot read: a 400 -------------------------------------------------------


def test_a_question_up_to_9999_12_31_is_a_400_over_http_and_a_normal_question_is_not(tmp_path: Path, runtime_env) -> None:
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    with LocalRuntime(home=tmp_path / "home", port=0, root=ROOT) as runtime:
        url = runtime.api_url or ""
        status, body = call(url, "POST", "/ask", {"question": OUT_OF_RANGE}, tenant=tenant)
        assert status == 400, body
        assert body == {"error": "validation_error", "message": REFUSAL, "field": "question"}
        # Full-width digits are read as the parser reads them (NFKC): refused the same way
        status, body = call(url, "POST", "/ask", {"question": "１９００-０１-０１到９９９９-１２-３１的净收入"}, tenant=tenant)
        assert (status, body["field"], body["message"]) == (400, "question", REFUSAL)
        # No flow started: no episode was recorded
        assert runtime.settings is not None
        assert rows(runtime.settings.sqlite_path, "heads") == 0

        status, answer = call(url, "POST", "/ask", {"question": "net revenue last month"}, tenant=tenant)
        assert status == 200, answer
        assert answer["status"] == "answered", answer.get("error")
        assert answer["rows"]
        # The edges of the range are questions like any other
        status, answer = call(url, "POST", "/ask", {"question": "net revenue between 2026-01-01 and 2200-12-31"}, tenant=tenant)
        assert status == 200 and answer["status"] != "failed", answer


def test_a_question_up_to_9999_12_31_is_a_400_in_the_lambda_handler(api: Api) -> None:
    reply = api.call("POST", "/ask", {"question": OUT_OF_RANGE})
    assert reply.status == 400, reply.json()
    assert reply.json() == {"error": "validation_error", "message": REFUSAL, "field": "question"}
    reply = api.call("POST", "/ask", {"question": "revenue over the last 3000 years"})
    assert (reply.status, reply.json()["field"]) == (400, "question")
    assert reply.json()["message"].startswith('"the last 3000 years" is outside the dates memtool can read')
    reply = api.call("POST", "/ask", {"question": "net revenue last month"})
    assert reply.status == 200 and reply.json()["status"] == "answered", reply.json()


# ---- a full disk -------------------------------------------------------------------------------


@pytest.fixture
def full_disk(
    tmp_path: Path, runtime_env, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[LocalRuntime, Path, list[sqlite3.Connection]]]:
    """A runtime whose state file cannot grow (``PRAGMA max_page_count`` at its size, on every
    connection the pools open: SQLite answers "database or disk is full" as on a full disk), whose
    idempotency table's one page is as full as rows of a few bytes make it: the next record of a
    real key needs a page split, so it is the idempotency record that meets the full disk."""
    home = tmp_path / "home"
    path = home / "state" / "memtool.sqlite3"
    SQLiteMemoryStore(path).close()
    SQLiteIdempotencyLayer(path).close()
    with sqlite3.connect(path, isolation_level=None) as conn:
        before = int(conn.execute("PRAGMA page_count").fetchone()[0])
        for i in range(10_000):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO idempotency (id, status, expiration) VALUES (?, 'COMPLETED', 4102444800)", (f"f{i:04d}",)
            )
            if int(conn.execute("PRAGMA page_count").fetchone()[0]) > before:
                conn.execute("ROLLBACK")
                break
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        full_at = int(conn.execute("PRAGMA page_count").fetchone()[0])
    assert full_at == before and i > 50  # the page is full: the loop stopped at the row that split it
    opened: list[sqlite3.Connection] = []
    real_open = sqlite_store.open_connection

    def capped(at: Path) -> sqlite3.Connection:
        conn = real_open(at)
        if Path(at).resolve() == path.resolve():
            conn.execute(f"PRAGMA max_page_count = {full_at}")
            opened.append(conn)
        return conn

    monkeypatch.setattr(sqlite_store, "open_connection", capped)
    with LocalRuntime(home=home, port=0, root=ROOT) as runtime:
        yield runtime, path, opened


def free_space(opened: list[sqlite3.Connection]) -> None:
    for conn in opened:
        try:
            conn.execute("PRAGMA max_page_count = 1073741823")
        except sqlite3.ProgrammingError:  # closed already (the start-up check's)
            pass


def test_a_full_disk_under_the_idempotency_record_answers_507_not_500(full_disk) -> None:
    runtime, path, opened = full_disk
    url = runtime.api_url or ""
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    key = {"Idempotency-Key": f"full-disk-{uuid.uuid4().hex[:8]}"}
    small = {"kind": "profile", "key": "report.notes", "content": "short", "tags": ["full"]}
    records = rows(path, "idempotency")

    status, body = call(url, "POST", "/memories", small, tenant=tenant, headers=key)
    assert status == 507, body
    assert body["error"] == "insufficient_storage"
    assert body["message"].startswith(FULL)
    # Nothing stored: no memory, and no idempotency record (a retry with the key is a first try)
    assert rows(path, "heads") == 0 and rows(path, "idempotency") == records
    status, health = call(url, "GET", "/health", tenant=tenant)
    assert (status, health["status"], health["storage"]["store"]) == (200, "degraded", "full")

    free_space(opened)
    status, created = call(url, "POST", "/memories", small, tenant=tenant, headers=key)
    assert status == 201, created
    status, replay = call(url, "POST", "/memories", small, tenant=tenant, headers=key)
    assert (status, replay) == (201, created)  # the first answer, not a second write
    assert rows(path, "heads") == 1
    assert runtime.health()["storage"]["store"] == "ok"


def test_a_full_disk_during_an_ask_says_the_store_is_full(full_disk) -> None:
    runtime, path, _ = full_disk
    url = runtime.api_url or ""
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    status, answer = call(url, "POST", "/ask", {"question": "net revenue last month"}, tenant=tenant)
    # The flow answers, then cannot record the episode (Record, then RecordFailure, fail): a failed
    # flow is a 200 with status failed (POST /ask's contract), and its error names the full store
    assert (status, answer["status"]) == (200, "failed"), answer
    assert answer["error"] == {
        "error": "insufficient_storage",
        "message": "the disk holding memtool's state is full, so the flow could not store what it needed; free some space and ask again",
        "step": None,
    }
    assert rows(path, "heads") == 0


# ---- the OpenAPI document ------------------------------------------------------------------------


def test_every_write_lists_413_and_507_and_no_read_does() -> None:
    document = openapi_document()
    for route, item in document["paths"].items():
        for method, op in item.items():
            responses = op["responses"]
            if method == "get":
                assert "413" not in responses and "507" not in responses, (method, route)
                continue
            assert {"413", "507"} <= set(responses), (method, route)
            for status in ("413", "507"):
                assert responses[status]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorBody"}
            assert responses["413"]["description"].startswith("payload_too_large: ")
            assert responses["507"]["description"].startswith("insufficient_storage: ")
