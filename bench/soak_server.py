"""`memtool serve` with a heap profiler inside: what bench/soak.py starts in ``--profile`` mode.

Runs ``memtool.cli serve`` unchanged, with ``tracemalloc`` started first (``SOAK_TRACE_FRAMES``
frames per allocation, default 8) and a watcher thread: when ``<SOAK_PROFILE_DIR>/<name>.request``
appears, it writes ``<name>.snapshot`` (a ``tracemalloc.Snapshot`` dump, filtered to drop the
profiler's own frames) and removes the request. The soak compares two snapshots by line
(``Snapshot.compare_to(..., "lineno")``) to name what grew.

    SOAK_PROFILE_DIR=/tmp/prof python bench/soak_server.py serve --port 3000 --home /tmp/h
"""

from __future__ import annotations

import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path


def _watch(folder: Path) -> None:
    while True:
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
        tracemalloc.start(int(os.environ.get("SOAK_TRACE_FRAMES", "8")))
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        threading.Thread(target=_watch, args=(path,), name="soak-profiler", daemon=True).start()
    from memtool.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
