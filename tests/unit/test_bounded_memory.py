"""What keeps the local runtime's memory bounded under load (issue 21, item 8; bench/soak.py measures it)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from memtool.retrieval.embedded_index import _Postings
from memtool.runtime import local_flows
from memtool.runtime.moto_server import HeapTrimmer, bound_duckdb_allocator


def test_moto_thread_list_drops_finished_threads() -> None:
    live = local_flows._LiveThreads()
    finished = [threading.Thread(target=lambda: None) for _ in range(local_flows.THREAD_LIST_SLACK)]
    for thread in finished:
        thread.start()
        thread.join()
        live.append(thread)
    assert len(live) == local_flows.THREAD_LIST_SLACK  # at the slack: nothing pruned yet
    gate = threading.Event()
    running = threading.Thread(target=gate.wait)
    running.start()
    try:
        live.append(running)  # past the slack: the finished ones go, the live one stays
        assert list(live) == [running]
    finally:
        gate.set()
        running.join()


def test_moto_uses_the_bounded_list_once_execution_is_enabled() -> None:
    from moto.stepfunctions.parser import utils

    local_flows.enable_execution_in_moto()
    assert isinstance(utils.TMP_THREADS, local_flows._LiveThreads)


def test_the_heap_is_trimmed_at_most_once_per_interval() -> None:
    trimmer = HeapTrimmer(interval=3600)
    if trimmer._libc is None:  # not glibc: nothing to trim, and it says so
        assert trimmer.after_flow() is False
        return
    assert trimmer.after_flow() is True
    assert [trimmer.after_flow() for _ in range(5)] == [False] * 5
    assert trimmer.trims == 1


def test_postings_grow_by_doubling_and_read_back_what_was_appended() -> None:
    postings = _Postings(np.asarray([3], dtype=np.int32), np.asarray([1], dtype=np.int32))
    assert postings.capacity == 1
    for slot in range(4, 40):
        postings.extend(np.asarray([slot], dtype=np.int32), np.asarray([slot % 3 + 1], dtype=np.int32))
    rows, tfs = postings.arrays()
    assert rows.tolist() == list(range(3, 40))
    assert tfs.tolist() == [1.0] + [float(s % 3 + 1) for s in range(4, 40)] and tfs.dtype == np.float32
    assert postings.count == 37 and 37 <= postings.capacity <= 2 * 37  # at most twice what it holds


_DUCKDB_DECAY = """
import ctypes, os
from memtool.runtime.moto_server import bound_duckdb_allocator
print(bound_duckdb_allocator(), os.environ.get("DUCKDB_JE_MALLOC_CONF"))
import _duckdb
import duckdb
duckdb.connect().execute("SELECT 42").fetchall()
value, size = ctypes.c_ssize_t(), ctypes.c_size_t(ctypes.sizeof(ctypes.c_ssize_t))
library = ctypes.CDLL(_duckdb.__file__)
for option in (b"opt.dirty_decay_ms", b"opt.muzzy_decay_ms"):
    assert library.duckdb_je_mallctl(option, ctypes.byref(value), ctypes.byref(size), None, 0) == 0
    print(option.decode(), value.value)
"""


def _duckdb_allocator_in_a_fresh_process(**environment: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "DUCKDB_JE_MALLOC_CONF"} | environment
    done = subprocess.run([sys.executable, "-c", _DUCKDB_DECAY], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_duckdb_returns_freed_pages_at_once_in_the_local_runtime() -> None:
    # The options reach DuckDB's own jemalloc: read back through its mallctl.
    assert _duckdb_allocator_in_a_fresh_process() == [
        "True dirty_decay_ms:0,muzzy_decay_ms:0",
        "opt.dirty_decay_ms 0",
        "opt.muzzy_decay_ms 0",
    ]


def test_a_users_duckdb_allocator_options_win() -> None:
    lines = _duckdb_allocator_in_a_fresh_process(DUCKDB_JE_MALLOC_CONF="dirty_decay_ms:500,muzzy_decay_ms:700")
    assert lines == ["False dirty_decay_ms:500,muzzy_decay_ms:700", "opt.dirty_decay_ms 500", "opt.muzzy_decay_ms 700"]


def test_too_late_once_duckdb_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DUCKDB_JE_MALLOC_CONF", raising=False)
    monkeypatch.setitem(sys.modules, "duckdb", sys.modules.get("duckdb") or object())
    assert bound_duckdb_allocator() is False
    assert "DUCKDB_JE_MALLOC_CONF" not in os.environ
