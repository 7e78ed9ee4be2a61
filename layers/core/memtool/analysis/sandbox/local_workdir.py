"""A local sandbox run's working directory: its budget (bytes and entries on top of the inputs,
measured while the script runs, counting what it deleted but holds open), reading back a file the
script wrote without following a link, and removing the directory (and its tmpfs) afterwards.

A run's directory is removed in the run's ``finally``. Two ways past it: a tool call that overran
its timeout is abandoned on a daemon thread, which the interpreter stops at exit mid-run; and
``kill -9``. So the directories of runs still going are also removed at exit (``atexit``), and a
process sweeps its folder's directories older than ``ABANDONED_AFTER_SECONDS`` when it first
uses it. Before this, each such run left its tmpfs mounted under the state folder.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memtool.analysis.sandbox.local_host import _unmount


def _allocated(info: os.stat_result) -> int:
    blocks = getattr(info, "st_blocks", None)
    return int(blocks) * 512 if blocks is not None else int(info.st_size)


def workdir_usage(workdir: str, max_entries: int) -> tuple[int, int]:
    """(bytes, entries) under ``workdir``: every file, directory, link or fifo counts, nothing is followed.

    The walk stops one past ``max_entries``, so a directory of 30,000 files costs no more than the budget.
    """
    used = entries = 0
    pending = [workdir]
    while pending and entries <= max_entries:
        try:
            listing = os.scandir(pending.pop())
        except OSError:
            continue
        with listing:
            for entry in listing:
                entries += 1
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                used += _allocated(info)
                if stat.S_ISDIR(info.st_mode):
                    pending.append(entry.path)
                if entries > max_entries:
                    break
    return used, entries


def _held_deleted_bytes(pid: int) -> int:
    """Bytes of files the run's processes deleted but keep open: on disk, yet in no directory (Linux)."""
    held = 0
    pending, seen = [pid], 0
    while pending and seen < 8:  # unshare, the namespace's init, the script
        current = pending.pop()
        seen += 1
        try:
            pending += [int(child) for child in Path(f"/proc/{current}/task/{current}/children").read_text().split()]
            descriptors = os.listdir(f"/proc/{current}/fd")
        except (OSError, ValueError):
            continue
        for fd in descriptors:
            try:
                info = os.stat(f"/proc/{current}/fd/{fd}")
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and info.st_nlink == 0:
                held += _allocated(info)
    return held


@dataclass
class _Budget:
    """What one run may keep in its working directory, on top of what was there before the script started."""

    workdir: str
    max_bytes: int
    max_files: int
    base_bytes: int = 0  # the inputs and the sandbox's own folders
    base_entries: int = 0

    def start(self) -> _Budget:
        self.base_bytes, self.base_entries = workdir_usage(self.workdir, 1 << 20)
        return self

    def exceeded(self, pid: int | None) -> str | None:
        used, entries = workdir_usage(self.workdir, self.base_entries + self.max_files)
        if entries - self.base_entries > self.max_files:
            return f"it made more than {self.max_files} files"
        if pid is not None:
            used += _held_deleted_bytes(pid)
        if used - self.base_bytes > self.max_bytes:
            return f"it wrote more than {_mib(self.max_bytes)}"
        return None


def _mib(size: int) -> str:
    return f"{size / (1 << 20):g} MiB"


def _read_own_file(path: str, cap: int, owner: int | None) -> tuple[bytes | None, bool]:
    """Read a file the script wrote — never through a symlink or a hard link to a host file (we may be root)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None, False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or (owner is not None and info.st_uid != owner):
            return None, False
        if info.st_size > cap:
            return None, True
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(cap + 1)
        return (None, True) if len(data) > cap else (data, False)
    finally:
        os.close(fd)


WORKDIR_PREFIX = "memtool-sandbox-"
# A directory this old is no run's: runs are time-boxed to minutes at most.
ABANDONED_AFTER_SECONDS = 3600.0

_live_lock = threading.Lock()
_live: set[str] = set()  # this process's runs' directories, until each is discarded


def workdir_opened(workdir: str) -> None:
    """Note a run's directory, for removal at exit if the run never ends."""
    with _live_lock:
        _live.add(workdir)


@atexit.register
def _discard_live_workdirs() -> None:
    with _live_lock:
        live = sorted(_live)
        _live.clear()
    for workdir in live:
        try:
            _discard_workdir(workdir, os.path.ismount(workdir))
        except OSError:
            pass


def sweep_abandoned_workdirs(root: str, older_than_seconds: float = ABANDONED_AFTER_SECONDS) -> list[str]:
    """Remove the run directories under ``root`` last changed more than ``older_than_seconds`` ago
    (unmounting a tmpfs first): what a killed process left. Returns their paths."""
    cutoff = time.time() - older_than_seconds
    swept: list[str] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return swept
    for entry in entries:
        if not entry.name.startswith(WORKDIR_PREFIX):
            continue
        with _live_lock:
            if entry.path in _live:
                continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_mtime > cutoff:
            continue
        _discard_workdir(entry.path, os.path.ismount(entry.path))
        if not os.path.lexists(entry.path):
            swept.append(entry.path)
    return swept


def _discard_workdir(workdir: str, mounted: bool) -> None:
    """Remove a run's working directory: its tmpfs goes with the unmount (the run's processes are gone)."""
    with _live_lock:
        _live.discard(workdir)
    if mounted and _unmount(workdir):
        try:
            os.rmdir(workdir)
            return
        except OSError:
            pass
    _remove_tree(workdir)
    if mounted and os.path.ismount(workdir):
        _unmount(workdir)
        _remove_tree(workdir)


def _remove_tree(path: str) -> None:
    def make_writable(function: Callable[[str], object], target: str, _exc_info: object) -> None:
        # a script may chmod its own files read-only; we still remove them
        try:
            os.chmod(os.path.dirname(target), stat.S_IRWXU)
            os.chmod(target, stat.S_IRWXU)
            function(target)
        except OSError:
            pass

    shutil.rmtree(path, onerror=make_writable)
    if os.path.exists(path):
        shutil.rmtree(path, ignore_errors=True)
