"""Honest failure states (issue 21, item 7): the local runtime says what is wrong with its state,
and what to do, instead of a traceback, a 500 internal_error or a /health that says ok.

- A state database with a page overwritten by garbage, or a garbage header: `memtool serve` and
  `memtool demo` exit 2 with one line on stderr naming the file and what to do; the file is left
  as it was.
- A state folder (or file) that cannot be written: the same, one line, exit 2. As root, chmod
  stops nothing, so the folder is made immutable (``chattr +i``), which stops root too; where
  that is unavailable the test is skipped rather than faked.
- A page damaged while the runtime runs: the reads touching it answer 500 ``store_corrupt`` (no
  path in the body) and /health says degraded, storage ``corrupt``; a restart refuses the file.
- A full disk, for real as SQLite sees it: every connection of the store's pool opens with
  ``PRAGMA max_page_count`` at the file's size, so SQLite itself answers "database or disk is
  full". A write answers 507 ``insufficient_storage``, nothing of it is stored (head, versions,
  slot, outbox), /health says degraded until a write that needs space succeeds again.
- "net revenue between 1900-01-01 and 9999-12-31": a 400 validation_error on question quoting
  "9999-12-31" (it was an OverflowError, step_failed).
- `memtool model validate` on YAML 100,000 levels deep: one line, exit 2 (it was a RecursionError
  traceback); a tenants file's deep model stops `memtool serve` in one line; PUT /model with a deep
  model is a 4xx, never a 500.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memtool.errors import StoreCorrupt
from memtool.memory import sqlite_store
from memtool.memory.records import MemoryDraft, MemoryKind
from memtool.memory.sqlite_store import SQLiteMemoryStore
from memtool.memory.store import Partition
from memtool.runtime.local import LocalRuntime
from memtool.runtime.sqlite_idempotency import SQLiteIdempotencyLayer

from tests.support import ROOT, Api

pytestmark = pytest.mark.slow

GARBAGE = bytes.fromhex("deadbeef")


# ---- helpers ---------------------------------------------------------------------------------


@pytest.fixture
def runtime_env(demo_warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The session's small demo warehouse and a fixed today, for in-process and child runtimes."""
    env = {"MEMTOOL_WAREHOUSE_PATH": str(demo_warehouse), "MEMTOOL_TODAY": "2026-11-29"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def memtool(*argv: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """The real command line in a child process (the environment, monkeypatched or not, is inherited)."""
    return subprocess.run(
        [sys.executable, "-m", "memtool.cli", *argv], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=dict(os.environ)
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The child's stderr, which must be exactly one line and no traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    return lines[0]


def populated_store(path: Path, memories: int = 200) -> None:
    """A real state file, written by the store itself: 200 memories of about 500 bytes."""
    now = datetime.now(UTC)
    with SQLiteMemoryStore(path) as store:
        for i in range(memories):
            store.create(Partition("acme", "li"), MemoryDraft(kind=MemoryKind.EPISODIC, content=f"memory {i} " + "x" * 500), now)
    assert not Path(f"{path}-wal").exists()  # a clean close checkpoints: every page is in the main file


def pragma(path: Path, name: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"PRAGMA {name}").fetchone()[0])


def overwrite_pages(path: Path, pages: range) -> None:
    size = pragma(path, "page_size")
    with open(path, "r+b") as handle:
        for page in pages:
            handle.seek((page - 1) * size)  # page n starts at (n - 1) * page_size
            handle.write(GARBAGE * (size // len(GARBAGE)))


def call(url: str, method: str, path: str, body: Any = None, *, tenant: str = "acme", roles: str | None = None) -> tuple[int, Any]:
    headers = {"X-Memtool-Tenant": tenant, "X-Memtool-User": "li", "Content-Type": "application/json"}
    if roles:
        headers["X-Memtool-Roles"] = roles
    data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def counts(path: Path) -> dict[str, int]:
    """Rows per table, read on a connection of the test's own (no cap, no pool)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return {table: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in ("heads", "versions", "slots", "outbox")}


# ---- a damaged state database at start ------------------------------------------------------------


def test_a_page_of_garbage_stops_serve_and_demo_in_one_line_naming_the_file(tmp_path: Path, runtime_env) -> None:
    home = tmp_path / "home"
    path = home / "state" / "memtool.sqlite3"
    populated_store(path)
    total = pragma(path, "page_count")
    assert total > 100 and pragma(path, "freelist_count") == 0  # every page is in use: the middle one holds data
    overwrite_pages(path, range(total // 2, total // 2 + 1))
    damaged = path.read_bytes()

    for command in (("serve", "--home", str(home), "--port", "0"), ("demo", "--home", str(home))):
        done = memtool(*command)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        line = one_line(done)
        assert line.startswith(f"memtool {command[0]}: the memory store {path} is damaged (quick_check: "), line
        assert "restore it from a copy, or move it away to start with an empty one" in line
        assert f"(mv {path} {path}.damaged, with its -wal and -shm files if they exist)" in line
        assert "API " not in done.stdout  # no banner (serve), no "API at" (demo): the runtime did not start
    # The file is left exactly as it was (nothing repaired, truncated or moved)
    assert path.read_bytes() == damaged
    assert sorted(p.name for p in path.parent.iterdir()) == ["memtool.sqlite3"]


def test_a_garbage_header_stops_serve_in_one_line(tmp_path: Path, runtime_env) -> None:
    home = tmp_path / "home"
    path = home / "state" / "memtool.sqlite3"
    populated_store(path, memories=5)
    with open(path, "r+b") as handle:
        handle.write(GARBAGE * 25)  # the 100-byte header, "SQLite format 3" included
    done = memtool("serve", "--home", str(home), "--port", "0")
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith(f"memtool serve: the memory store {path} is not a readable SQLite database (file is not a database): ")
    assert "restore it from a copy" in line
    assert path.read_bytes()[:100] == GARBAGE * 25


# ---- a state folder or file that cannot be written ---------------------------------------------------


@contextmanager
def unwritable(target: Path) -> Iterator[str]:
    """``target`` made unwritable for this process: chmod for a user; for root (whom mode bits do
    not stop) the immutable attribute, which stops root too. Skipped where neither works."""
    if os.geteuid() != 0:
        mode = target.stat().st_mode
        target.chmod(0o555 if target.is_dir() else 0o444)
        try:
            yield "chmod"
        finally:
            target.chmod(mode)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(target)], capture_output=True).returncode != 0:
        pytest.skip("running as root, where chmod stops nothing, and chattr +i is not available on this file system")
    try:
        yield "chattr +i"
    finally:
        subprocess.run([chattr, "-i", str(target)], check=True)


def test_a_read_only_state_folder_stops_serve_and_demo_in_one_line(tmp_path: Path, runtime_env) -> None:
    home = tmp_path / "home"
    state = home / "state"
    populated_store(state / "memtool.sqlite3", memories=3)
    before = sorted(p.name for p in state.iterdir())
    with unwritable(state):
        with pytest.raises(OSError):  # the precondition, proven: this process cannot create a file there
            (state / "probe").touch()
        for command in (("serve", "--home", str(home), "--port", "0"), ("demo", "--home", str(home))):
            done = memtool(*command)
            assert done.returncode == 2, (command, done.stderr)
            line = one_line(done)
            assert line.startswith(f"memtool {command[0]}: the state folder {state} cannot be written ("), line
            assert line.endswith("): make it writable, or choose another with --home")
    assert sorted(p.name for p in state.iterdir()) == before  # no -wal, no -shm, no probe left behind


def test_a_port_in_use_stops_serve_and_demo_in_one_line(tmp_path: Path, runtime_env) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for command in (("serve", "--port", str(port)), ("demo", "--port", str(port))):
            done = memtool(*command, "--home", str(tmp_path / "home"))
            assert done.returncode == 2, (command, done.stderr)
            assert one_line(done) == f"memtool {command[0]}: port {port} on 127.0.0.1 is already in use (choose another with --port)"
            assert "API " not in done.stdout  # no banner (serve), no "API at" (demo): the runtime did not start


def test_a_read_only_state_file_stops_serve_in_one_line(tmp_path: Path, runtime_env) -> None:
    home = tmp_path / "home"
    path = home / "state" / "memtool.sqlite3"
    populated_store(path, memories=3)
    with unwritable(path):
        done = memtool("serve", "--home", str(home), "--port", "0")
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith(f"memtool serve: the memory store {path} cannot be written ("), line
    assert line.endswith("): make it and its folder writable, or choose another --home")
    assert counts(path)["heads"] == 3


# ---- a page damaged while the runtime runs ----------------------------------------------------------


def test_a_page_damaged_while_running_answers_store_corrupt_and_health_says_degraded(tmp_path: Path, runtime_env) -> None:
    home = tmp_path / "home"
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    with LocalRuntime(home=home, port=0, root=ROOT) as runtime:
        url = runtime.api_url or ""
        ids = []
        for i in range(40):
            status, created = call(url, "POST", "/memories", {"kind": "episodic", "content": f"note {i} " + "y" * 1000}, tenant=tenant)
            assert status == 201
            ids.append(created["memory"]["id"])
        runtime.drain()
        assert runtime.health()["storage"] == {"store": "ok", "diagnosis_queue": "ok"}
        assert runtime.settings is not None
        path = runtime.settings.sqlite_path
        # Every committed page into the main file, then garbage over every page but the schema's.
        # The pool's connections may hold pages in their caches; a write of the test's own (the
        # header's user_version, unchanged) moves the WAL on, so each drops its cache and reads the
        # file at its next transaction, as after any other writer's commit.
        with sqlite3.connect(path, timeout=10) as conn:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            assert busy == 0
            total = int(conn.execute("PRAGMA page_count").fetchone()[0])
        overwrite_pages(path, range(2, total + 1))
        with sqlite3.connect(path, timeout=10, isolation_level=None) as conn:
            conn.execute("PRAGMA user_version = 1")

        status, body = call(url, "GET", f"/memories/{ids[0]}", tenant=tenant)
        assert status == 500, body
        assert body["error"] == "store_corrupt"
        assert "state database is damaged" in body["message"] and "restore the file from a copy" in body["message"]
        assert str(tmp_path) not in json.dumps(body)  # no path to an API caller
        status, listing = call(url, "GET", "/memories", tenant=tenant)
        assert (status, listing["error"]) == (500, "store_corrupt")

        status, health = call(url, "GET", "/health", tenant=tenant)
        assert status == 200  # the runtime still answers; what is wrong is in the body
        assert health["status"] == "degraded"
        assert health["storage"]["store"] == "corrupt"
        assert any(p.startswith("store damaged: ") for p in health["problems"]), health["problems"]
        assert str(tmp_path) not in json.dumps(health)
    # A restart refuses the damaged file, naming it
    with pytest.raises(StoreCorrupt, match=f"the memory store {path} is damaged"):
        LocalRuntime(home=home, port=0, root=ROOT).start()


# ---- a full disk ------------------------------------------------------------------------------------


def test_a_full_disk_answers_507_stores_nothing_and_health_says_degraded(
    tmp_path: Path, runtime_env, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    path = home / "state" / "memtool.sqlite3"
    # The state file as the runtime makes it (the store's tables and the idempotency table), and its size
    SQLiteMemoryStore(path).close()
    SQLiteIdempotencyLayer(path).close()
    full_at = pragma(path, "page_count")
    # Every connection the pools open to this file may not grow it past that size: SQLite itself
    # then answers SQLITE_FULL, "database or disk is full", as it does on a full disk.
    opened: list[sqlite3.Connection] = []
    real_open = sqlite_store.open_connection

    def capped(at: Path) -> sqlite3.Connection:
        conn = real_open(at)
        if Path(at).resolve() == path.resolve():
            assert int(conn.execute(f"PRAGMA max_page_count = {full_at}").fetchone()[0]) == full_at
            opened.append(conn)
        return conn

    monkeypatch.setattr(sqlite_store, "open_connection", capped)
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    big = {"kind": "profile", "key": "report.notes", "content": "z" * 8000, "tags": ["full"]}
    with LocalRuntime(home=home, port=0, root=ROOT) as runtime:
        url = runtime.api_url or ""
        assert runtime.health()["storage"]["store"] == "ok"

        status, body = call(url, "POST", "/memories", big, tenant=tenant)
        assert status == 507, body
        assert body["error"] == "insufficient_storage"
        assert body["message"].startswith("the disk holding memtool's state is full; nothing of this request was stored")
        # Nothing half-written: no head, no version, no slot, no outbox entry
        assert counts(path) == {"heads": 0, "versions": 0, "slots": 0, "outbox": 0}
        status, listing = call(url, "GET", "/memories", tenant=tenant)
        assert (status, listing["items"]) == (200, [])

        status, health = call(url, "GET", "/health", tenant=tenant)
        assert (status, health["status"], health["storage"]["store"]) == (200, "degraded", "full")
        assert any(p.startswith("store disk full: ") for p in health["problems"]), health["problems"]
        # Writes that need no new page (the outbox drain, the TTL purge) go on; they prove no space
        runtime.drain()
        time.sleep(0.5)
        assert runtime.health()["storage"]["store"] == "full"

        # Space is freed: the same write is stored, and /health is ok again
        for conn in opened:
            try:
                conn.execute("PRAGMA max_page_count = 1073741823")
            except sqlite3.ProgrammingError:  # closed already (the start-up check's)
                pass
        status, created = call(url, "POST", "/memories", big, tenant=tenant)
        assert status == 201, created
        assert counts(path)["heads"] == 1
        health = runtime.health()
        assert health["storage"]["store"] == "ok"
        assert not any(p.startswith("store ") for p in health["problems"])


# ---- dates the parser cannot read --------------------------------------------------------------------


def test_a_question_up_to_9999_12_31_is_refused_naming_the_words(api: Api) -> None:
    reply = api.call("POST", "/ask", {"question": "net revenue between 1900-01-01 and 9999-12-31"})
    # The request's validation reads the question's dates as the flow's parser does: a 400 on
    # question quoting the words, before any flow starts (tests/e2e/test_honest_failures_over_http.py)
    assert reply.status == 400
    assert reply.json() == {
        "error": "validation_error",
        "message": '"9999-12-31" is outside the dates memtool can read (1900-01-01 to 2200-12-31): ask about a period inside them',
        "field": "question",
    }


# ---- YAML too deep ------------------------------------------------------------------------------------


def test_model_validate_refuses_deep_yaml_in_one_line(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: deep\nmetrics: " + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    done = memtool("model", "validate", str(deep))
    assert done.returncode == 2
    assert one_line(done) == f"{deep}:2: the YAML is nested deeper than 32 levels; a semantic model is a few levels deep"
    assert done.stdout == ""

    block = tmp_path / "block.yaml"
    block.write_text("".join("  " * i + f"k{i}:\n" for i in range(2000)) + "  " * 2000 + "leaf: 1\n", encoding="utf-8")
    done = memtool("model", "validate", str(block))
    assert done.returncode == 2
    assert one_line(done) == f"{block}:33: the YAML is nested deeper than 32 levels; a semantic model is a few levels deep"


def test_a_tenants_file_with_a_deep_model_stops_serve_in_one_line(tmp_path: Path, runtime_env, demo_warehouse: Path) -> None:
    model = tmp_path / "deep.yaml"
    model.write_text("name: deep\nmetrics: " + "[" * 50_000 + "]" * 50_000 + "\n", encoding="utf-8")
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(f"deep:\n  warehouse: duckdb:///{demo_warehouse}\n  model: {model}\n", encoding="utf-8")
    done = memtool("serve", "--home", str(tmp_path / "home"), "--port", "0", "--tenants", str(tenants))
    assert done.returncode == 2
    assert one_line(done) == (
        f"memtool serve: tenant deep: {model}:2: the YAML is nested deeper than 32 levels; a semantic model is a few levels deep"
    )


def test_put_model_with_a_deep_model_is_refused_not_a_500(api: Api) -> None:
    nested: Any = "x"
    for _ in range(36):  # the model 37 deep: within the body's 40 levels, past the model's 32
        nested = {"a": nested}
    reply = api.call("PUT", "/model", {"model": {"name": "deep", "tables": [nested]}, "expected_version": None}, roles="curator")
    body = reply.json()
    assert 400 <= reply.status < 500, body
    assert body["error"] == "model_invalid"
    assert body["problems"][0]["message"] == "is nested deeper than 32 levels; a semantic model is a few levels deep"
    # 10,000 levels: refused by the body parser, before any model code runs
    reply = api.call("PUT", "/model", raw='{"model": ' + "[" * 10_000 + "]" * 10_000 + "}", roles="curator")
    assert 400 <= reply.status < 500 and reply.json()["field"] == "body"
    assert api.call("GET", "/model").status == 404  # nothing was stored
