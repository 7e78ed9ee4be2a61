"""The local source adapters keep every acknowledged version across ``kill -9``.

A child process writes versions of a few sources (SQLite metadata, file bodies) as fast as it can
and prints each one once ``put`` returned; it is killed with SIGKILL mid-stream. Every version it
acknowledged must then read back whole, with its SHA-256, from a fresh library over the same files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memtool.clock import SystemClock
from memtool.identity import Identity
from memtool.knowledge.bodies import FileSourceBodies
from memtool.knowledge.sources import SourceLibrary, source_digest
from memtool.memory.sqlite_store import SQLiteMemoryStore

CHILD = r"""
import json, sys
from pathlib import Path
from memtool.clock import SystemClock
from memtool.identity import Identity
from memtool.knowledge.bodies import FileSourceBodies
from memtool.knowledge.sources import SourceKind, SourceLibrary
from memtool.memory.sqlite_store import SQLiteMemoryStore

root = Path(sys.argv[1])
library = SourceLibrary(SQLiteMemoryStore(root / "memtool.sqlite3"), FileSourceBodies(root / "sources"), SystemClock())
curator = Identity(tenant="acme", user="mei", roles=frozenset({"curator"}))
n = 0
while True:
    name = f"etl/job-{n % 3}.sql"
    text = f"-- version {n}\n" + "insert into 报表 select * from 明细 where 批次 = %d;\n" % n * 200
    written = library.put(curator, name, SourceKind.ETL_SQL, text).source
    print(json.dumps({"id": written.id, "version": written.version, "sha256": written.sha256, "n": n}), flush=True)
    n += 1
"""


@pytest.mark.slow
def test_every_acknowledged_source_version_survives_kill_9(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    acknowledged: list[dict] = []
    deadline = time.monotonic() + 60
    assert child.stdout is not None
    while len(acknowledged) < 40:
        assert time.monotonic() < deadline, f"only {len(acknowledged)} versions acknowledged in 60 s"
        line = child.stdout.readline()
        assert line, "the writer stopped before it was killed"
        acknowledged.append(json.loads(line))
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=10)
    acknowledged.extend(json.loads(line) for line in child.stdout.read().splitlines() if line.strip().endswith("}"))

    store = SQLiteMemoryStore(tmp_path / "memtool.sqlite3")
    try:
        library = SourceLibrary(store, FileSourceBodies(tmp_path / "sources"), SystemClock())
        reader = Identity(tenant="acme", user="li", roles=frozenset({"analyst"}))
        for ack in acknowledged:
            page = library.read(reader, ack["id"], version=ack["version"], limit=16_000)
            assert page.source.sha256 == ack["sha256"] and page.complete
            assert source_digest(page.text) == ack["sha256"] and page.text.startswith(f"-- version {ack['n']}\n")
        assert len({a["id"] for a in acknowledged}) == 3
    finally:
        store.close()
