"""The local sandbox's working directories do not outlive their runs: removed at exit while a run
is abandoned on a daemon thread, and swept when a later process finds what a killed one left
(layers/core/memtool/analysis/sandbox/local_workdir.py says why)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from memtool.analysis.sandbox.local_host import _mount_tmpfs, _tmpfs_works, _unmount
from memtool.analysis.sandbox.local_workdir import WORKDIR_PREFIX, sweep_abandoned_workdirs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the local sandbox's walls are Linux's")


def mounts_under(root: Path) -> list[str]:
    prefix = os.path.realpath(root) + os.sep
    with open("/proc/mounts") as mounts:
        return [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]


def aged(path: Path, seconds: float) -> Path:
    then = time.time() - seconds
    os.utime(path, (then, then))
    return path


def test_the_sweep_removes_old_run_directories_and_their_mounts_only(tmp_path: Path) -> None:
    root = tmp_path / "sandbox"
    root.mkdir()
    old = root / f"{WORKDIR_PREFIX}old"
    (old / "deep").mkdir(parents=True)
    (old / "deep" / "out.csv").write_text("a,b\n")
    aged(old, 7200)
    recent = root / f"{WORKDIR_PREFIX}running"
    recent.mkdir()
    (recent / "in.csv").write_text("x\n")
    foreign = root / "someone-else"
    foreign.mkdir()
    aged(foreign, 7200)
    mounted = None
    if _tmpfs_works(str(root)):
        mounted = root / f"{WORKDIR_PREFIX}mounted"
        mounted.mkdir()
        assert _mount_tmpfs(str(mounted), 1 << 20, 16, os.geteuid())
        (mounted / "chart.png").write_bytes(b"\x89PNG")
        aged(mounted, 7200)
    try:
        swept = sweep_abandoned_workdirs(str(root))
        expected = {str(old)} | ({str(mounted)} if mounted else set())
        assert set(swept) == expected
        assert not old.exists()
        assert recent.is_dir() and (recent / "in.csv").read_text() == "x\n"  # a run may still use it
        assert foreign.is_dir()  # not a run's directory
        assert mounts_under(root) == []
        if mounted:
            assert not mounted.exists()
    finally:
        for path in mounts_under(root):
            _unmount(path)


def test_a_run_abandoned_on_a_daemon_thread_leaves_nothing_at_exit(tmp_path: Path) -> None:
    root = tmp_path / "sandbox"
    script = textwrap.dedent(f"""
        import os, sys, threading, time
        from memtool.analysis.sandbox.local import LocalProcessSandbox
        sandbox = LocalProcessSandbox(work_root={str(root)!r}, preload=())
        worker = threading.Thread(
            target=lambda: sandbox.run("import time\\ntime.sleep(4)", files={{"in.csv": b"a\\n1\\n"}}, timeout_seconds=20),
            daemon=True,
        )
        worker.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            runs = [n for n in os.listdir({str(root)!r}) if n.startswith({WORKDIR_PREFIX!r})] if os.path.isdir({str(root)!r}) else []
            if runs and os.path.exists(os.path.join({str(root)!r}, runs[0], "in.csv")):
                print("running", runs[0], os.path.ismount(os.path.join({str(root)!r}, runs[0])), flush=True)
                sys.exit(0)  # the run is still going: the interpreter stops its daemon thread
            time.sleep(0.05)
        sys.exit("the run never started")
    """)
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "MEMTOOL_HOME": str(tmp_path / "home")},
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("running "), done.stdout
        left = [name for name in os.listdir(root) if name.startswith(WORKDIR_PREFIX)]
        assert left == []
        assert mounts_under(root) == []
    finally:
        for path in mounts_under(root):  # only if the run was left behind
            _unmount(path)
