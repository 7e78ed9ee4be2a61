"""What this machine offers the local process sandbox, probed once per process: ``unshare`` and a
network namespace, the folders the sandbox's interpreter imports from and whether another uid can
read them, the Landlock ABI and seccomp (tried in a throwaway runner), and mounting a tmpfs for a
run's working directory, with the libc calls (``mount``, ``umount2``) these need.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import platform
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from memtool.analysis.sandbox import _runner

RUNNER_PATH = Path(_runner.__file__).resolve()
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MNT_DETACH = 2, 4, 8, 2
_TMPFS_SOURCE = b"memtool-sandbox"  # how the runs' tmpfs mounts show in /proc/mounts
_PAGE = 4096


@functools.cache
def _unshare() -> str | None:
    return shutil.which("unshare") or ("/usr/bin/unshare" if os.path.exists("/usr/bin/unshare") else None)


@functools.cache
def network_namespace_prefix() -> tuple[str, ...]:
    """``unshare --net --`` when it works on this machine (root, or unprivileged user namespaces), else ()."""
    unshare = _unshare()
    if unshare is None:
        return ()
    for prefix in ((unshare, "--net", "--"), (unshare, "--net", "--map-root-user", "--")):
        if prefix[-2] == "--map-root-user" and os.geteuid() == 0:
            continue
        try:
            probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10, env={})
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0:
            return prefix
    return ()


# work root -> whether a tmpfs can be mounted there; probed once per process
_TMPFS_WORKS: dict[str, bool] = {}


def _tree_readable_by_others(path: str, *, read: bool = True) -> bool:
    """Whether a uid other than the owner can reach ``path`` (every ancestor searchable) and, with ``read``, read it."""
    current = os.path.realpath(path)
    try:
        if read and not os.stat(current).st_mode & stat.S_IROTH:
            return False
    except OSError:
        return False
    while True:
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return False
        if not mode & stat.S_IXOTH and stat.S_ISDIR(mode):
            return False
        parent = os.path.dirname(current)
        if parent == current:
            return True
        current = parent


_IMPORT_PATHS = """
import json, site, sys, sysconfig
paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path, *site.getsitepackages()]
paths += [sysconfig.get_paths().get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")]
print(json.dumps(paths))
"""


@functools.cache
def interpreter_paths(python: str) -> tuple[str, ...]:
    """Every existing folder the sandbox's interpreter imports from, as the runner sees them (``-I``).

    A venv's ``sys.prefix`` holds only its site-packages: the standard library is under
    ``sys.base_prefix`` (pyenv: under /root, mode 0700), and ``-I`` drops the host's PYTHONPATH.
    Asked of the interpreter itself, once, since ``python`` need not be the one running memtool.
    """
    try:
        answer = subprocess.run([python, "-I", "-c", _IMPORT_PATHS], capture_output=True, timeout=30, env={}, check=True)
        paths = json.loads(answer.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path]
    return tuple(sorted({os.path.realpath(p) for p in paths if p and os.path.isabs(p) and os.path.exists(p)}))


@functools.cache
def _libc() -> object:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


@functools.cache
def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers (0: none, or not Linux)."""
    if not sys.platform.startswith("linux"):
        return 0
    import ctypes

    try:
        version = _libc().syscall(  # type: ignore[attr-defined]
            ctypes.c_long(_runner._SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(1)
        )
    except (OSError, AttributeError):
        return 0
    return max(0, int(version))


@functools.cache
def seccomp_available() -> bool:
    """Whether the runner can install its seccomp filter here (Linux with seccomp, a known architecture)."""
    if not sys.platform.startswith("linux") or platform.machine() not in _runner._SECCOMP_ARCHES:
        return False
    try:
        return int(_libc().prctl(21, 0, 0, 0, 0)) >= 0  # type: ignore[attr-defined]  # PR_GET_SECCOMP
    except (OSError, AttributeError):
        return False


@functools.cache
def kernel_filters(python: str) -> tuple[int, bool]:
    """(the Landlock ABI, seccomp) that really install here, tried once in a throwaway runner process."""
    wanted = {"landlock": landlock_abi(), "seccomp": seccomp_available()}
    if not any(wanted.values()):
        return 0, False
    try:
        answer = subprocess.run(
            [python, "-I", str(RUNNER_PATH), "--probe", json.dumps(wanted)], capture_output=True, timeout=30, env={}, check=True
        )
        took = json.loads(answer.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return 0, False
    return (wanted["landlock"] if took.get("landlock") else 0), bool(took.get("seccomp"))


def _mount_tmpfs(path: str, size: int, inodes: int, owner: int) -> bool:
    options = f"size={size},nr_inodes={inodes},mode=0700,uid={owner},gid={owner}"
    libc = _libc()
    return bool(
        libc.mount(_TMPFS_SOURCE, os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, options.encode()) == 0  # type: ignore[attr-defined]
    )


def _unmount(path: str) -> bool:
    return bool(_libc().umount2(os.fsencode(path), _MNT_DETACH) == 0)  # type: ignore[attr-defined]


def _tmpfs_works(work_root: str) -> bool:
    """Whether this process may mount a tmpfs in the work root (root with CAP_SYS_ADMIN on Linux), probed once."""
    if work_root not in _TMPFS_WORKS:
        works = False
        if sys.platform.startswith("linux") and hasattr(os, "geteuid") and os.geteuid() == 0:
            try:
                probe = tempfile.mkdtemp(prefix="memtool-probe-", dir=work_root)
            except OSError:
                probe = None
            if probe is not None:
                try:
                    works = _mount_tmpfs(probe, _PAGE * 4, 8, os.geteuid()) and _unmount(probe)
                except OSError:
                    works = False
                finally:
                    try:
                        os.rmdir(probe)
                    except OSError:
                        works = False
        _TMPFS_WORKS[work_root] = works
    return _TMPFS_WORKS[work_root]


def _errno() -> int:
    import ctypes

    return ctypes.get_errno() or errno.EPERM
