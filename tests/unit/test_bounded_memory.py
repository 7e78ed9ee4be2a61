"""What keeps the local runtime's memory bounded under load (issue 21, item 8; bench/soak.py measures it)."""

from __future__ import annotations

import threading

import numpy as np

from memtool.retrieval.embedded_index import _Postings
from memtool.runtime import local_flows
from memtool.runtime.moto_server import HeapTrimmer


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
