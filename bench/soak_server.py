"""`memtool serve` with a heap profiler inside: what bench/soak.py starts in ``--profile`` mode.

Runs ``memtool.cli serve`` unchanged, with ``tracemalloc`` started first (``SOAK_TRACE_FRAMES``
frames per allocation, default 8) and a watcher thread: when ``<SOAK_PROFILE_DIR>/<name>.request``
appears, it writes ``<name>.snapshot`` (a ``tracemalloc.Snapshot`` dump, filtered to drop the
profiler's own frames) and removes the request. The soak compares two snapshots by line
(``Snapshot.compare_to(..., "lineno")``) to name what grew.

When ``<name>.breakdown`` is requested instead, it writes ``<name>.json``: where the process's
resident memory sits, by owner: glibc's heaps (``mallinfo2``), DuckDB's jemalloc
(``stats.resident``/``allocated`` through its ``mallctl``), Python's object allocator (blocks in
use), the embedded index's arrays (found through ``gc``), and ``/proc/self/smaps`` summed by kind
of mapping. What the soak's ``--breakdown`` mode tabulates.

    SOAK_PROFILE_DIR=/tmp/prof python bench/soak_server.py serve --port 3000 --home /tmp/h
"""

from __future__ import annotations

import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path


def _smaps() -> dict[str, float]:
    """Resident MB by kind of mapping: the brk heap, anonymous maps, files, stacks."""
    kinds: dict[str, float] = {}
    kind = "other"
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if not head:
                continue
            if "-" in head[0] and len(head) >= 5:  # a mapping's header line
                name = head[5] if len(head) > 5 else ""
                kind = (
                    "heap"
                    if name == "[heap]"
                    else "stack"
                    if name.startswith("[stack")
                    else "anonymous"
                    if not name
                    else "file"
                    if name.startswith("/")
                    else "other"
                )
            elif head[0] == "Rss:":
                kinds[kind] = kinds.get(kind, 0.0) + int(head[1]) / 1024
    return {k: round(v, 1) for k, v in sorted(kinds.items())}


def _glibc() -> dict[str, float]:
    import ctypes

    class Mallinfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
        ]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = Mallinfo2
    info = libc.mallinfo2()
    mb = 2**20
    return {
        "arena_mb": round(info.arena / mb, 1),
        "mmapped_mb": round(info.hblkhd / mb, 1),
        "in_use_mb": round(info.uordblks / mb, 1),
        "free_mb": round(info.fordblks / mb, 1),
    }


def _jemalloc() -> dict[str, float]:
    import ctypes

    duckdb = sys.modules.get("duckdb")
    if duckdb is None:
        return {}
    library = ctypes.CDLL(duckdb._duckdb.__file__)
    epoch, size = ctypes.c_uint64(1), ctypes.c_size_t(8)
    library.duckdb_je_mallctl(b"epoch", ctypes.byref(epoch), ctypes.byref(size), ctypes.byref(epoch), size)
    out = {}
    for stat in ("allocated", "active", "resident", "mapped", "retained"):
        value, size = ctypes.c_size_t(), ctypes.c_size_t(ctypes.sizeof(ctypes.c_size_t))
        if library.duckdb_je_mallctl(f"stats.{stat}".encode(), ctypes.byref(value), ctypes.byref(size), None, 0) == 0:
            out[f"{stat}_mb"] = round(value.value / 2**20, 1)
    return out


def _index() -> dict[str, float]:
    import gc

    import numpy as np

    documents = slots = 0
    array_bytes = 0
    for obj in gc.get_objects():
        if type(obj).__name__ == "Partition" and type(obj).__module__.endswith("embedded_partition"):
            documents += obj.live_count
            slots += obj.size
            for value in vars(obj).values():
                if isinstance(value, np.ndarray):
                    array_bytes += value.nbytes
            array_bytes += sum(p._data.nbytes for p in obj.postings.values())
    return {"documents": documents, "slots": slots, "arrays_mb": round(array_bytes / 2**20, 1)}


def _breakdown(path: Path) -> None:
    import json

    status = {}
    with open("/proc/self/status") as proc:
        for line in proc:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "Threads"):
                status[key] = value.strip()
    result = {
        "status": status,
        "smaps_mb": _smaps(),
        "glibc": _glibc(),
        "jemalloc": _jemalloc(),
        "python_blocks": sys.getallocatedblocks(),
        "traced_mb": round(tracemalloc.get_traced_memory()[0] / 2**20, 1) if tracemalloc.is_tracing() else None,
        "index": _index(),
    }
    partial = path.with_suffix(".json.part")
    partial.write_text(json.dumps(result, indent=1))
    partial.rename(path.with_suffix(".json"))


def _watch(folder: Path) -> None:
    while True:
        start = folder / "trace.start"
        if start.exists():
            # late start (bench/soak.py --trace-from): only what is allocated from here on is traced
            tracemalloc.start(int(os.environ.get("SOAK_TRACE_FRAMES", "8")))
            start.unlink()
        for request in sorted(folder.glob("*.breakdown")):
            _breakdown(request)
            request.unlink()
        for request in sorted(folder.glob("*.request")):
            name = request.stem
            snapshot = tracemalloc.take_snapshot().filter_traces(
                (tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>"))
            )
            partial = folder / f"{name}.snapshot.part"
            snapshot.dump(str(partial))
            partial.rename(folder / f"{name}.snapshot")
            request.unlink()
        time.sleep(0.5)


def main() -> int:
    folder = os.environ.get("SOAK_PROFILE_DIR")
    if folder:
        if os.environ.get("SOAK_TRACE", "1") == "1":  # "late": on bench/soak.py's trace.start
            tracemalloc.start(int(os.environ.get("SOAK_TRACE_FRAMES", "8")))
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        threading.Thread(target=_watch, args=(path,), name="soak-profiler", daemon=True).start()
    from memtool.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
