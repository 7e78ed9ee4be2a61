"""The local process sandbox: one untrusted script in a separate, locked-down Python process.

Isolation level L2, the embedded default (E2B's microVM is the stronger level). The walls:

* a fresh process ``python -I _runner.py``: an empty environment (only fixed variables), a
  temporary working directory that is always removed, its own session (so the whole process
  group is killed on the wall-clock timeout);
* rlimits set in the child before exec: CPU seconds, address space (memory), file size, no core
  dumps, and RLIMIT_NPROC = 0 — no new process or thread at all;
* as root, when a one-time probe shows it works here: mount, PID and network namespaces of its
  own (``unshare --mount --pid --fork --kill-child --net``). The runner pivots into a private root
  that holds /usr, the Python installation (read-only) and the working directory, and nothing
  else of the host: no /root, /home, /tmp, /var, /work, no host /etc or /proc. Its /proc shows
  itself only; the network has no interface but a down loopback. This is the file wall: it holds
  even if the script gets past the audit hook, in Python or in native code;
* as root, the runner drops to ``nobody`` (root ignores RLIMIT_NPROC) with no capability left.
  Without the private root, a Python installed under /root (pyenv) is unreadable to nobody, so
  CAP_DAC_READ_SEARCH is kept then, and the isolation string says so;
* without the private root, where the kernel has Landlock: the runner restricts itself to reading
  the interpreter's import paths and writing the working directory. This is the file wall of the
  fallback (an unprivileged user, a container without mount namespaces): sqlite's ATTACH or
  VACUUM INTO, a C extension's open, all meet it;
* on Linux in both modes, a seccomp filter: no mknod/mkfifo, hard link, symlink or io_uring;
* the working directory lives in a folder of memtool's own state (``<home>/sandbox``; the temp
  folder when that is not writable, as in Lambda) and has a budget: bytes and files
  (``MEMTOOL_SANDBOX_WORKDIR_MB``, ``MEMTOOL_SANDBOX_WORKDIR_FILES``). As root it is a tmpfs of
  exactly that size and inode count, mounted for the run; everywhere, the parent measures it while
  the script runs (and what the script deleted but holds open) and stops the run past the budget
  with a clear error. RLIMIT_FSIZE caps each file;
* an audit-hook policy in the runner (see ``_runner.py``) for clear errors on files outside the
  working directory, sqlite database files, ATTACH, links, processes, sockets, ctypes, mmap,
  sub-interpreters and the interpreter's internals; the script can neither reach nor change it.

On macOS or in Lambda (no ``unshare``, not root) the sandbox degrades to what is available and
``SandboxRun.isolation`` says exactly which walls were up, e.g. here
``local-process(mountns,pidns,netns,setuid,seccomp,tmpfs,rlimits,audit)``, and without the namespaces
``local-process(netns,setuid+dac_read_search,landlock,seccomp,tmpfs,rlimits,audit)``; on macOS
``local-process(budget,rlimits,audit)``, where sqlite connections are refused (nothing below the hook
would stop ATTACH).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memtool.analysis.sandbox import _runner
from memtool.analysis.sandbox.local_host import (
    _PAGE,
    RUNNER_PATH,
    _errno,
    _mount_tmpfs,
    _tmpfs_works,
    _tree_readable_by_others,
    _unshare,
    interpreter_paths,
    kernel_filters,
    landlock_abi,
    network_namespace_prefix,
    seccomp_available,
)
from memtool.analysis.sandbox.local_workdir import (
    WORKDIR_PREFIX,
    _Budget,
    _discard_workdir,
    _mib,
    _read_own_file,
    _remove_tree,
    sweep_abandoned_workdirs,
    workdir_opened,
    workdir_usage,
)
from memtool.analysis.sandbox.port import (
    MAX_RESULT_BYTES,
    MAX_RETURNED_FILE_BYTES,
    MAX_RETURNED_FILES,
    RESULT_FILE,
    STREAM_CAP_BYTES,
    SandboxErrorKind,
    SandboxFile,
    SandboxRun,
    SandboxUnavailable,
    cap_text,
    check_input_names,
    content_type_of,
)
from memtool.settings import get_settings

NOBODY = 65534
DEFAULT_PRELOAD = ("numpy", "pandas", "matplotlib", "matplotlib.pyplot")
MPL_DIR = ".mpl"
_READ_CHUNK = 64 * 1024
_TAIL_BYTES = 4096
_VERDICT = _runner.ERROR_PREFIX.encode()
_LOOK_EVERY = 0.025  # seconds between two looks at the run: its wall clock, its output, its working directory


# (python, uid, network) -> whether a private root works here; probed once per process
_PRIVATE_ROOT_WORKS: dict[tuple[str, int, bool], bool] = {}


@dataclass
class _Stream:
    """One of the child's output pipes, read with a cap so a flood neither fills memory nor hangs us."""

    keep: int
    kill_after: int
    head: bytearray
    tail: bytes = b""  # the last few KB: the runner's verdict line is the last thing it writes
    total: int = 0
    flooded: bool = False

    def drain(self, fd: int, on_flood: threading.Event) -> None:
        while True:
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except OSError:
                return
            if not chunk:
                return
            self.total += len(chunk)
            room = self.keep - len(self.head)
            if room > 0:
                self.head += chunk[:room]
            self.tail = (self.tail + chunk)[-_TAIL_BYTES:]
            if self.total > self.kill_after and not self.flooded:
                self.flooded = True
                on_flood.set()

    def text(self) -> str:
        # the verdict line is for us; the script's own output is what the caller reads
        head = b"".join(line for line in bytes(self.head).splitlines(keepends=True) if not line.startswith(_VERDICT))
        return cap_text(head, self.keep, dropped=self.total - len(self.head))


class LocalProcessSandbox:
    """Runs a script in a separate Python process behind namespaces or Landlock, seccomp, rlimits, a uid drop,
    a working-directory budget and an audit hook."""

    name = "local-process"

    def __init__(
        self,
        *,
        cpu_seconds: int = 30,
        memory_bytes: int = 1 << 30,
        file_size_bytes: int = 16 << 20,
        output_bytes: int = STREAM_CAP_BYTES,
        output_kill_bytes: int = 4 << 20,
        max_files: int = MAX_RETURNED_FILES,
        max_files_bytes: int = MAX_RETURNED_FILE_BYTES,
        max_result_bytes: int = MAX_RESULT_BYTES,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        python: str | None = None,
        sandbox_uid: int = NOBODY,
        use_network_namespace: bool = True,
        use_private_root: bool = True,
        use_landlock: bool = True,
        use_seccomp: bool = True,
        use_workdir_mount: bool = True,
        workdir_bytes: int | None = None,
        workdir_files: int | None = None,
        work_root: str | os.PathLike[str] | None = None,
        _audit_hook: bool = True,
    ) -> None:
        """``workdir_bytes``/``workdir_files``: the working directory's budget (default: the settings');
        ``work_root``: the folder the working directories are made in (default ``<home>/sandbox``).
        ``_audit_hook=False`` is for tests only: it proves what the kernel walls hold on their own."""
        settings = get_settings()
        self.cpu_seconds = max(1, int(cpu_seconds))
        self.memory_bytes = memory_bytes
        self.workdir_bytes = workdir_bytes if workdir_bytes is not None else settings.sandbox_workdir_mb << 20
        self.workdir_files = workdir_files if workdir_files is not None else settings.sandbox_workdir_files
        self.file_size_bytes = min(file_size_bytes, self.workdir_bytes)  # no single file past the whole budget
        self.output_bytes = output_bytes
        self.output_kill_bytes = max(output_kill_bytes, output_bytes)
        self.max_files = max_files
        self.max_files_bytes = max_files_bytes
        self.max_result_bytes = max_result_bytes
        self.preload = tuple(preload)
        self.python = python or sys.executable
        self.sandbox_uid = sandbox_uid
        self.use_network_namespace = use_network_namespace
        self.use_private_root = use_private_root
        self.use_landlock = use_landlock
        self.use_seccomp = use_seccomp
        self.use_workdir_mount = use_workdir_mount
        self.state_home = os.path.realpath(settings.home)
        self._work_root_wanted = os.fspath(work_root) if work_root is not None else os.path.join(self.state_home, "sandbox")
        self._audit_hook = _audit_hook
        if not self.python or not os.path.exists(self.python):
            raise SandboxUnavailable(f"no Python interpreter to start the sandbox with ({self.python!r})")

    # -- what this machine offers --------------------------------------------------------------

    @property
    def drops_privileges(self) -> bool:
        return hasattr(os, "geteuid") and os.geteuid() == 0 and self.sandbox_uid >= 0

    @functools.cached_property
    def _private_root(self) -> bool:
        """Whether runs get their own mount and PID namespaces and a private root (probed once)."""
        if not (self.use_private_root and self.drops_privileges and sys.platform.startswith("linux") and _unshare()):
            return False
        key = (self.python, self.sandbox_uid, self.use_network_namespace)
        if key not in _PRIVATE_ROOT_WORKS:
            _PRIVATE_ROOT_WORKS[key] = self._probe_private_root()
        return _PRIVATE_ROOT_WORKS[key]

    def _probe_private_root(self) -> bool:
        # The real thing on an empty script: unshare, the pivot, the drop and the hook must all work.
        try:
            workdir = tempfile.mkdtemp(prefix="memtool-sandbox-", dir=self.work_root)
        except (OSError, SandboxUnavailable):
            return False
        try:
            self._prepare(workdir, {})
            outcome = self._execute(workdir, "", 30.0, private_root=True, preload=(), budget=None)
            return outcome.returncode == 0 and not outcome.killed_by_us
        except (OSError, SandboxUnavailable):
            return False
        finally:
            _remove_tree(workdir)

    @functools.cached_property
    def _interpreter_unreadable(self) -> bool:
        """Whether the sandbox uid cannot read some folder the interpreter imports from (sys.base_prefix too)."""
        return not all(_tree_readable_by_others(path) for path in interpreter_paths(self.python))

    def _needs_read_search(self, private_root: bool) -> bool:
        # A Python installed under /root (pyenv; a venv under /tmp made from it keeps its standard
        # library there) is unreadable to nobody; without CAP_DAC_READ_SEARCH every lazy import in the
        # script would fail. In a private root its path is world-traversable, so only without one is
        # the one read capability kept, and Landlock or the hook are then what keeps host files out.
        return self.drops_privileges and not private_root and self._interpreter_unreadable

    @functools.cached_property
    def _keep_read_search(self) -> bool:
        return self._needs_read_search(self._private_root)

    @functools.cached_property
    def work_root(self) -> str:
        """The folder of memtool's state the working directories are made in.

        ``<home>/sandbox`` (mode 0711: the sandbox uid passes through, nobody lists it), or the temp
        folder's ``memtool-sandbox-<uid>`` when that cannot be made (Lambda's package is read-only) or,
        without a private root or a read capability, the sandbox uid could not reach it.
        """
        wanted = [self._work_root_wanted, os.path.join(tempfile.gettempdir(), f"memtool-sandbox-{os.geteuid()}")]
        for candidate in dict.fromkeys(wanted):
            try:
                os.makedirs(candidate, mode=0o711, exist_ok=True)
                info = os.lstat(candidate)
                if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                    continue  # a symlink, or another user's folder
                os.chmod(candidate, 0o711)
            except OSError:
                continue
            real = os.path.realpath(candidate)
            # without a private root nor the read capability (kept only for an unreadable interpreter)
            # the sandbox uid walks the host's path to its working directory itself
            if self.drops_privileges and not self._interpreter_unreadable and not _tree_readable_by_others(real, read=False):
                continue
            sweep_abandoned_workdirs(real)  # what a killed process left there
            return real
        raise SandboxUnavailable(f"no folder for the sandbox's working directories (tried {', '.join(wanted)})")

    @functools.cached_property
    def _workdir_mount(self) -> bool:
        return self.use_workdir_mount and _tmpfs_works(self.work_root)

    @property
    def _landlock(self) -> int:
        """The Landlock ABI the runner restricts itself with: only without a private root (it is the file wall then)."""
        return kernel_filters(self.python)[0] if self.use_landlock and not self._private_root else 0

    @property
    def _seccomp(self) -> bool:
        return self.use_seccomp and kernel_filters(self.python)[1]

    def _netns(self) -> tuple[str, ...]:
        return network_namespace_prefix() if self.use_network_namespace and sys.platform.startswith("linux") else ()

    def _namespaces(self, private_root: bool) -> tuple[str, ...]:
        if not private_root:
            return self._netns()
        # --fork: the runner starts as PID 1 of the new PID namespace (it forks the script's process
        # and waits, see _runner._wait_as_init); when it ends, the kernel kills whatever is left in it.
        # --kill-child: it ends with unshare. unshare makes the new mount tree private itself.
        network = ("--net",) if self.use_network_namespace else ()
        return (str(_unshare()), *network, "--mount", "--pid", "--fork", "--kill-child", "--")

    def isolation(self) -> str:
        walls = []
        if self._private_root:
            walls += ["mountns", "pidns"]
            if self.use_network_namespace:
                walls.append("netns")
        elif self._netns():
            walls.append("netns")
        if self.drops_privileges:
            walls.append("setuid+dac_read_search" if self._keep_read_search else "setuid")
        if self._landlock:
            walls.append("landlock")
        if self._seccomp:
            walls.append("seccomp")
        walls.append("tmpfs" if self._workdir_mount else "budget")
        walls.append("rlimits")
        if self._audit_hook:
            walls.append("audit")
        return f"local-process({','.join(walls)})"

    # -- one run ---------------------------------------------------------------------------------

    def run(self, code: str, *, files: dict[str, bytes], timeout_seconds: float = 30.0, charts: bool = True) -> SandboxRun:
        check_input_names(files)
        started = time.monotonic()
        isolation = self.isolation()
        try:
            workdir = tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=self.work_root)
        except OSError as exc:
            raise SandboxUnavailable(f"cannot create the sandbox's working directory: {exc}") from exc
        workdir_opened(workdir)
        mounted = False
        try:
            mounted = self._mount_workdir(workdir, files)
            self._prepare(workdir, files)
            # a tmpfs is the budget itself (ENOSPC); otherwise the parent measures the directory while the script runs
            budget = None if mounted else _Budget(workdir, self.workdir_bytes, self.workdir_files).start()
            # matplotlib's import is most of a run's start-up: a script that draws nothing skips it.
            preload = self.preload if charts else tuple(p for p in self.preload if not p.startswith("matplotlib"))
            outcome = self._execute(workdir, code, timeout_seconds, private_root=self._private_root, preload=preload, budget=budget)
            return self._collect(workdir, files, outcome, started, isolation, timeout_seconds)
        finally:
            _discard_workdir(workdir, mounted)

    def _mount_workdir(self, workdir: str, files: dict[str, bytes]) -> bool:
        """A tmpfs of exactly the budget (plus the inputs) on the working directory, where this process may mount."""
        if not self._workdir_mount:
            return False
        inputs = sum(-(-len(data) // _PAGE) * _PAGE for data in files.values())
        size = self.workdir_bytes + inputs + 16 * _PAGE  # the .mpl folder's font cache
        inodes = self.workdir_files + len(files) + 4  # the root, .mpl and its cache
        owner = self.sandbox_uid if self.drops_privileges else os.geteuid()
        try:
            if _mount_tmpfs(workdir, size, inodes, owner):
                return True
        except OSError:
            pass
        raise SandboxUnavailable(f"cannot mount the working directory's tmpfs: {os.strerror(_errno())}")

    def _prepare(self, workdir: str, files: dict[str, bytes]) -> None:
        os.mkdir(os.path.join(workdir, MPL_DIR))
        for name, data in files.items():
            Path(workdir, name).write_bytes(data)
        if self.drops_privileges:
            for root, dirs, names in os.walk(workdir):
                for entry in [root, *(os.path.join(root, n) for n in dirs + names)]:
                    os.chown(entry, self.sandbox_uid, self.sandbox_uid)

    def _environment(self, workdir: str) -> dict[str, str]:
        # Built from nothing: no host variable (credentials, tokens) can reach the script. TMPDIR: the
        # temporary files of tempfile and of sqlite (sorts, temp tables) stay in the budgeted workdir.
        return {
            "HOME": workdir,
            "TMPDIR": workdir,
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": os.path.join(workdir, MPL_DIR),
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
        }

    def _limits(self) -> None:
        """Runs in the child between fork and exec: only async-signal-safe-ish calls, no imports."""
        import resource

        wanted = [
            (resource.RLIMIT_CPU, (self.cpu_seconds, self.cpu_seconds + 1)),  # SIGXCPU, then SIGKILL
            (resource.RLIMIT_FSIZE, (self.file_size_bytes, self.file_size_bytes)),
            (resource.RLIMIT_CORE, (0, 0)),
            (resource.RLIMIT_NPROC, (0, 0)),
        ]
        if hasattr(resource, "RLIMIT_AS"):
            wanted.append((resource.RLIMIT_AS, (self.memory_bytes, self.memory_bytes)))
        for limit, value in wanted:
            try:
                resource.setrlimit(limit, value)
            except (ValueError, OSError):
                pass  # macOS rejects some (RLIMIT_AS); the isolation string does not claim more than rlimits

    def _execute(
        self, workdir: str, code: str, timeout_seconds: float, *, private_root: bool, preload: Sequence[str], budget: _Budget | None
    ) -> _Outcome:
        mount_point = None
        if private_root:
            try:  # an empty directory the runner mounts its new root on, in its own mount namespace only
                mount_point = tempfile.mkdtemp(prefix="memtool-sandbox-root-")
            except OSError as exc:
                raise SandboxUnavailable(f"cannot create the sandbox's root mount point: {exc}") from exc
        try:
            return self._spawn(workdir, code, timeout_seconds, private_root, mount_point, preload, budget)
        finally:
            if mount_point is not None:
                try:
                    os.rmdir(mount_point)
                except OSError:
                    pass

    def _spawn(
        self,
        workdir: str,
        code: str,
        timeout_seconds: float,
        private_root: bool,
        mount_point: str | None,
        preload: Sequence[str],
        budget: _Budget | None,
    ) -> _Outcome:
        config = {
            "workdir": workdir,
            "preload": list(preload),
            "uid": self.sandbox_uid if self.drops_privileges else -1,
            "gid": self.sandbox_uid if self.drops_privileges else -1,
            "keep_read_search": self._needs_read_search(private_root),
            "private_root": mount_point,
            "landlock": 0 if private_root else self._landlock,
            "seccomp": self._seccomp,
            "hidden": [self.state_home, self.work_root],
            "audit": self._audit_hook,
        }
        argv = [*self._namespaces(private_root), self.python, "-I", str(RUNNER_PATH), json.dumps(config)]
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=workdir,
                env=self._environment(workdir),
                start_new_session=True,
                preexec_fn=self._limits,
                close_fds=True,
            )
        except OSError as exc:
            raise SandboxUnavailable(f"cannot start the sandbox process: {exc}") from exc
        flood = threading.Event()
        assert process.stdout is not None and process.stderr is not None and process.stdin is not None
        out = _Stream(self.output_bytes, self.output_kill_bytes, bytearray())
        err = _Stream(self.output_bytes, self.output_kill_bytes, bytearray())
        readers = [
            threading.Thread(target=out.drain, args=(process.stdout.fileno(), flood), daemon=True),
            threading.Thread(target=err.drain, args=(process.stderr.fileno(), flood), daemon=True),
        ]
        for reader in readers:
            reader.start()
        try:
            process.stdin.write(code.encode("utf-8"))
            process.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the child died before reading; its exit status says why
        deadline = time.monotonic() + timeout_seconds
        timed_out = False
        over_budget: str | None = None
        while process.poll() is None:
            if flood.wait(timeout=min(_LOOK_EVERY, max(0.0, deadline - time.monotonic()))):
                break
            if budget is not None and process.poll() is None:
                over_budget = budget.exceeded(process.pid)
                if over_budget is not None:
                    break
            if time.monotonic() >= deadline:
                timed_out = True
                break
        killed_by_us = process.poll() is None
        if killed_by_us:
            _kill_group(process)
        returncode = process.wait()
        if budget is not None and over_budget is None and not killed_by_us:
            over_budget = budget.exceeded(None)  # what a quick script left between two looks
        if private_root and 128 < returncode < 128 + signal.NSIG:
            returncode = 128 - returncode  # the namespace's init reports the script's death by signal as 128 + signal
        for reader in readers:
            reader.join(timeout=5)
        process.stdout.close()
        process.stderr.close()
        return _Outcome(
            returncode, out, err, timed_out and killed_by_us, (out.flooded or err.flooded) and killed_by_us, killed_by_us, over_budget
        )

    # -- what came back --------------------------------------------------------------------------

    def _collect(
        self, workdir: str, inputs: dict[str, bytes], outcome: _Outcome, started: float, isolation: str, timeout_seconds: float
    ) -> SandboxRun:
        stderr_notes: list[str] = []
        kind, error = self._verdict(outcome, timeout_seconds)
        result, result_error = self._read_result(workdir)
        if result_error and kind is None:
            kind, error = "output_limit", result_error
        files = self._read_files(workdir, set(inputs), stderr_notes)
        stderr = outcome.err.text()
        if stderr_notes:
            stderr = (stderr + ("\n" if stderr and not stderr.endswith("\n") else "") + "\n".join(stderr_notes)).strip("\n")
        return SandboxRun(
            ok=kind is None,
            result=result,
            stdout=outcome.out.text(),
            stderr=stderr,
            files=files,
            error=error,
            error_kind=kind,
            duration_ms=(time.monotonic() - started) * 1000.0,
            isolation=isolation,
        )

    def _verdict(self, outcome: _Outcome, timeout_seconds: float) -> tuple[SandboxErrorKind | None, str | None]:
        code = outcome.returncode
        message = _error_line(outcome.err.tail if outcome.err.total > len(outcome.err.head) else bytes(outcome.err.head))
        if outcome.timed_out:
            return "timeout", f"the script ran longer than {timeout_seconds:g} s (wall clock) and was stopped"
        if outcome.flooded:
            return "output_limit", f"the script printed more than {self.output_kill_bytes} bytes and was stopped"
        if code == _runner.EXIT_DISK_FULL:  # the tmpfs said so before the parent looked
            return "output_limit", f"the script filled its working directory's budget ({self._budget_text()}): {message or 'No space left'}"
        if outcome.over_budget is not None:
            budget = self._budget_text()
            return "output_limit", f"the script outgrew its working directory's budget ({budget}): {outcome.over_budget}, and was stopped"
        if code == 0:
            return None, None
        if code == -signal.SIGXCPU or (code == -signal.SIGKILL and not outcome.killed_by_us):
            return "cpu_limit", f"the script used more than {self.cpu_seconds} s of CPU time and was stopped"
        if code == -getattr(signal, "SIGXFSZ", 25):
            return "output_limit", f"the script wrote a file larger than {self.file_size_bytes} bytes"
        if code < 0:
            return "exit", f"the script was killed by signal {signal.Signals(-code).name}"
        if code == _runner.EXIT_FORBIDDEN:
            return "forbidden", message or "the script tried something the sandbox does not allow"
        if code == _runner.EXIT_MEMORY:
            return "memory_limit", f"the script ran out of memory (limit {self.memory_bytes // (1 << 20)} MiB): {message or 'MemoryError'}"
        if code == _runner.EXIT_FILE_TOO_LARGE:
            return "output_limit", f"the script wrote a file larger than {self.file_size_bytes} bytes: {message or 'File too large'}"
        if code == _runner.EXIT_SETUP:
            return "unavailable", message or "the sandbox could not be set up"
        return "exit", message or f"the script exited with status {code}"

    def _budget_text(self) -> str:
        return f"{_mib(self.workdir_bytes)}, {self.workdir_files} files"

    def _read_result(self, workdir: str) -> tuple[object | None, str | None]:
        data, too_big = _read_own_file(os.path.join(workdir, RESULT_FILE), self.max_result_bytes, self._owner())
        if too_big:
            return None, f"result.json is larger than {self.max_result_bytes} bytes"
        if data is None:
            return None, None
        try:
            return json.loads(data), None
        except ValueError:
            return None, None

    def _owner(self) -> int | None:
        return self.sandbox_uid if self.drops_privileges else None

    def _read_files(self, workdir: str, inputs: set[str], notes: list[str]) -> list[SandboxFile]:
        found: list[SandboxFile] = []
        skipped = 0
        budget = self.max_files_bytes
        for root, dirs, names in os.walk(workdir, followlinks=False):
            relative_root = os.path.relpath(root, workdir)
            if relative_root == ".":
                dirs[:] = [d for d in dirs if d != MPL_DIR]
            dirs.sort()
            for name in sorted(names):
                relative = name if relative_root == "." else f"{relative_root}/{name}".replace(os.sep, "/")
                if relative in inputs or relative == RESULT_FILE:
                    continue
                if len(found) >= self.max_files:
                    skipped += 1
                    continue
                data, too_big = _read_own_file(os.path.join(root, name), budget, self._owner())
                if data is None:
                    skipped += int(too_big)
                    continue
                budget -= len(data)
                found.append(SandboxFile(name=relative, content_type=content_type_of(name), size=len(data), data=data))
        if skipped:
            notes.append(f"sandbox: {skipped} file(s) not returned (limits: {self.max_files} files, {self.max_files_bytes} bytes)")
        return found


@dataclass
class _Outcome:
    returncode: int
    out: _Stream
    err: _Stream
    timed_out: bool
    flooded: bool
    killed_by_us: bool
    over_budget: str | None = None  # why the working directory outgrew its budget


def _error_line(stderr_head: bytes) -> str | None:
    lines = [line for line in stderr_head.decode("utf-8", errors="replace").splitlines() if line.startswith(_runner.ERROR_PREFIX)]
    return lines[-1][len(_runner.ERROR_PREFIX) :].strip() if lines else None


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    for kill in (lambda: os.killpg(process.pid, signal.SIGKILL), process.kill):
        try:
            kill()
        except (ProcessLookupError, PermissionError, OSError):
            pass


# The probes and the working directory's helpers live beside this module; callers read them from here.
__all__ = [
    "DEFAULT_PRELOAD",
    "MPL_DIR",
    "NOBODY",
    "RUNNER_PATH",
    "LocalProcessSandbox",
    "interpreter_paths",
    "kernel_filters",
    "landlock_abi",
    "network_namespace_prefix",
    "seccomp_available",
    "workdir_usage",
]
