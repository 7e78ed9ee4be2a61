"""The child side of the local process sandbox: preload, lock down, drop privileges, run the script.

Executed by path as ``python -I _runner.py <config json>`` with the script on stdin. It imports only
the standard library until the audit hook is installed, so nothing the host has on ``sys.path``
runs before the policy. Order matters:

1. read the script and config, ``chdir`` to the working directory, ignore SIGXFSZ (so a write past
   RLIMIT_FSIZE raises ``OSError(EFBIG)`` instead of killing us silently);
2. preload numpy, pandas and matplotlib (Agg) while every file is still readable;
3. as root: ``setgroups([])``, ``setgid``/``setuid`` to the sandbox uid (root ignores
   RLIMIT_NPROC, nobody does not), keeping CAP_DAC_READ_SEARCH only when the parent says the
   Python installation is unreadable to that uid; then ``PR_SET_NO_NEW_PRIVS``. This uses ctypes
   calls, which the policy forbids, so it happens just before the hook;
4. install the audit hook (PEP 578) — from here on, opens outside the Python installation and the
   working directory, processes, signals, sockets, ctypes, mmap and blocked imports raise
   ``PermissionError("sandbox: ...")``;
5. ``exec`` the script compiled as ``<sandbox>``; its exception is written to stderr with
   frames of ``<sandbox>`` only (no host paths) and mapped to an exit code the parent reads.

An audit hook alone is not a security boundary (PEP 578 says so): the network namespace, the
uid drop and the rlimits set by the parent are the walls; the hook gives clear errors and closes
the doors Python opens most easily.
"""

import errno
import json
import os
import signal
import sys

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_SYSTEM_EXIT = 2
EXIT_FORBIDDEN = 3
EXIT_MEMORY = 4
EXIT_FILE_TOO_LARGE = 5
EXIT_SETUP = 70
ERROR_PREFIX = "sandbox-error: "

_BLOCKED_MODULES = frozenset(
    {"ctypes", "_ctypes", "socket", "_socket", "ssl", "_ssl", "subprocess", "_posixsubprocess", "multiprocessing",
     "_multiprocessing", "pty", "resource", "mmap"}
)
_NETWORK_EVENTS = ("socket.", "urllib.", "http.client.", "ftplib.", "smtplib.", "imaplib.", "nntplib.", "poplib.", "telnetlib.")
_PROCESS_EVENTS = {
    "os.system": "running a shell command",
    "os.exec": "replacing the process (exec)",
    "os.spawn": "starting a process (spawn)",
    "os.posix_spawn": "starting a process (posix_spawn)",
    "os.fork": "forking a process",
    "os.forkpty": "forking a process",
    "subprocess.Popen": "starting a subprocess",
    "pty.spawn": "starting a process on a pty",
    "os.kill": "sending signals",
    "os.killpg": "sending signals",
    "signal.pthread_kill": "sending signals",
    "os.startfile": "starting a program",
    "webbrowser.open": "opening a browser",
}
_OTHER_DENIED = {
    "mmap.__new__": "memory-mapping files",
    "sys.addaudithook": "adding audit hooks",
    "resource.setrlimit": "changing resource limits",
    "resource.prlimit": "changing resource limits",
    "fcntl.ioctl": "ioctl on file descriptors",
    "sqlite3.enable_load_extension": "loading sqlite extensions",
    "sqlite3.load_extension": "loading sqlite extensions",
    "_posixsubprocess.fork_exec": "starting a subprocess",
}
# Events whose first argument is a path the script changes (must be inside the working dir).
_PATH_CHANGES = {
    "os.remove": "deleting", "os.rmdir": "deleting", "os.mkdir": "creating a directory", "os.chmod": "changing modes",
    "os.chown": "changing owners", "os.truncate": "truncating", "os.utime": "changing times", "os.chflags": "changing flags",
    "os.lchflags": "changing flags", "os.lchmod": "changing modes", "os.setxattr": "setting attributes",
    "os.removexattr": "removing attributes", "os.chdir": "changing directory", "shutil.rmtree": "deleting",
    "sqlite3.connect": "opening a database",
}
_TWO_PATH_CHANGES = {"os.rename": "renaming", "os.link": "hard-linking", "shutil.move": "moving"}
_DIR_FD_ARGS = {
    "os.remove": (1,), "os.rmdir": (1,), "os.mkdir": (2,), "os.chmod": (2,), "os.chown": (3,), "os.utime": (3,),
    "os.rename": (2, 3), "os.link": (2, 3), "os.symlink": (2,), "shutil.rmtree": (1,),
}
_FD_ALLOWED = {"os.chdir", "os.truncate", "os.chmod", "os.chown", "os.utime"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class _Policy:
    def __init__(self, workdir: str, read_roots: list[str]) -> None:
        self.workdir = os.path.realpath(workdir)
        self.read_roots = [os.path.realpath(root) for root in read_roots if root]
        self.read_files = {"/dev/null", "/dev/urandom", "/dev/random"}

    @staticmethod
    def _under(path: str, root: str) -> bool:
        return path == root or path.startswith(root.rstrip("/") + "/")

    def _resolve(self, path: object) -> str:
        # realpath follows every symlink (/proc/self/root, links made in the workdir) before we judge.
        return os.path.realpath(os.fsdecode(path))  # type: ignore[arg-type]

    def in_workdir(self, path: object) -> bool:
        return self._under(self._resolve(path), self.workdir)

    def readable(self, real: str) -> bool:
        return real in self.read_files or self._under(real, self.workdir) or any(self._under(real, r) for r in self.read_roots)

    def __call__(self, event: str, args: tuple) -> None:
        if event == "open":
            self._open(args)
        elif event in ("os.listdir", "os.scandir"):
            path = args[0] if args else None
            if path is None or isinstance(path, int):
                return
            real = self._resolve(path)
            if not self.readable(real):
                _deny(f"listing {_shown(path)}", "directories outside the working directory are not allowed")
        elif event == "import":
            name = args[0] if args else ""
            top = str(name).split(".")[0]
            if name in _BLOCKED_MODULES or top in _BLOCKED_MODULES:
                _deny(f"importing {name}", "this module reaches processes, the network or native code")
        elif event in _PROCESS_EVENTS:
            _deny(_PROCESS_EVENTS[event], "the sandbox runs exactly one process")
        elif event.startswith(_NETWORK_EVENTS):
            _deny(f"network access ({event})", "the sandbox has no network")
        elif event.startswith("ctypes."):
            _deny(f"native code through ctypes ({event})", "foreign function calls are not allowed")
        elif event in _OTHER_DENIED:
            _deny(_OTHER_DENIED[event], "it could escape or weaken the sandbox")
        elif event in _PATH_CHANGES:
            self._path_change(event, _PATH_CHANGES[event], args[:1], args)
        elif event in _TWO_PATH_CHANGES:
            self._path_change(event, _TWO_PATH_CHANGES[event], args[:2], args)
        elif event == "os.symlink":
            # only the link must live in the workdir: what it points to is judged when it is opened
            self._path_change(event, "creating a symlink at", args[1:2], args)

    def _open(self, args: tuple) -> None:
        path, _mode, flags = (tuple(args) + (None, None, None))[:3]
        if path is None or isinstance(path, int):
            return  # an already-open descriptor: it was judged when opened
        real = self._resolve(path)
        writing = bool(isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writing:
            if not (self._under(real, self.workdir) or real == "/dev/null"):
                _deny(f"writing {_shown(path)}", "files outside the working directory are not allowed")
            return
        if not self.readable(real):
            _deny(f"opening {_shown(path)}", "files outside the working directory are not allowed")
        if os.path.isdir(real) and not self._under(real, self.workdir):
            _deny(f"opening the directory {_shown(path)}", "directory descriptors outside the working directory are not allowed")

    def _path_change(self, event: str, what: str, paths: tuple, args: tuple) -> None:
        for index in _DIR_FD_ARGS.get(event, ()):
            dir_fd = args[index] if len(args) > index else None
            if isinstance(dir_fd, int) and dir_fd >= 0:
                # a dir_fd makes a relative path mean something other than what we would resolve
                _deny(f"{what} relative to a directory descriptor", "only paths are checked")
        for path in paths:
            if isinstance(path, int) and event in _FD_ALLOWED:
                continue  # a descriptor was judged when it was opened
            if event == "sqlite3.connect" and isinstance(path, str) and (path == ":memory:" or path == ""):
                continue
            if not isinstance(path, (str, bytes, os.PathLike)) or (event == "sqlite3.connect" and str(path).startswith("file:")):
                _deny(f"{what} {_shown(path)}", "only plain paths inside the working directory are allowed")
            if not self.in_workdir(path):
                _deny(f"{what} {_shown(path)}", "files outside the working directory are not allowed")


def _shown(path: object) -> str:
    try:
        return os.fsdecode(path)  # type: ignore[arg-type]
    except TypeError:
        return repr(path)


def _deny(what: str, why: str) -> None:
    raise PermissionError(f"sandbox: {what} is not allowed: {why}")


def _read_roots(extra: list[str]) -> list[str]:
    import site
    import sysconfig

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *extra}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        roots.add(sysconfig.get_paths().get(key, ""))
    try:
        roots.update(site.getsitepackages())
    except AttributeError:
        pass
    matplotlib = sys.modules.get("matplotlib")
    if matplotlib is not None:
        roots.add(matplotlib.get_data_path())
    roots.add("/usr/share/zoneinfo")
    return sorted(r for r in roots if r)


def _preload(names: list[str]) -> None:
    for name in names:
        try:
            if name == "matplotlib":
                import matplotlib

                matplotlib.use("Agg")
            else:
                __import__(name)
        except Exception:  # noqa: BLE001 - a missing library only means the script cannot use it
            pass


def _drop_privileges(uid: int, gid: int, keep_read_search: bool) -> None:
    libc = None
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    if uid >= 0 and os.geteuid() == 0:
        if keep_read_search and libc is not None:
            libc.prctl(8, 1, 0, 0, 0)  # PR_SET_KEEPCAPS: permitted caps survive setuid
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        if keep_read_search and libc is not None:
            import ctypes

            class Header(ctypes.Structure):
                _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

            class Data(ctypes.Structure):
                _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

            read_search = 1 << 2  # CAP_DAC_READ_SEARCH: read the Python installation under /root
            header = Header(0x20080522, 0)
            data = (Data * 2)(Data(read_search, read_search, 0), Data(0, 0, 0))
            if libc.capset(ctypes.byref(header), data) != 0:
                raise OSError(ctypes.get_errno(), "capset failed")
        if os.getuid() != uid or os.geteuid() != uid:
            raise OSError("setuid did not take")
    if libc is not None:
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: no setuid binary can raise us again


def _scrub(text: str, workdir: str) -> str:
    for root, shown in ((workdir, "."), (os.path.realpath(workdir), "."), (sys.prefix, "<python>"), (sys.base_prefix, "<python>")):
        text = text.replace(root, shown)
    return text


def _report(exc: BaseException, workdir: str) -> int:
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<sandbox>"]
    lines = ["Traceback (script frames only):\n", *traceback.format_list(frames)] if frames else []
    summary = _scrub(f"{type(exc).__name__}: {exc}", workdir)
    sys.stderr.write("".join(lines) + summary + "\n" + ERROR_PREFIX + summary.replace("\n", " ") + "\n")
    if isinstance(exc, PermissionError) and str(exc).startswith("sandbox:"):
        return EXIT_FORBIDDEN
    if isinstance(exc, MemoryError):
        return EXIT_MEMORY
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return EXIT_FILE_TOO_LARGE
    return EXIT_ERROR


def main() -> None:
    config = json.loads(sys.argv[1])
    code = sys.stdin.read()
    sys.stdin.close()
    workdir = config["workdir"]
    os.chdir(workdir)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        _preload(config.get("preload", []))
        import linecache
        import traceback  # loaded now, while every file is readable, so reporting never fails later

        del traceback

        compiled = compile(code, "<sandbox>", "exec")
        linecache.cache["<sandbox>"] = (len(code), None, code.splitlines(True), "<sandbox>")
        policy = _Policy(workdir, _read_roots(config.get("read_roots", [])))
        # The drop uses ctypes calls the policy forbids, so it comes first; no script code runs between.
        _drop_privileges(config.get("uid", -1), config.get("gid", -1), config.get("keep_read_search", False))
        sys.addaudithook(policy)
    except SyntaxError as exc:
        sys.stderr.write(f"{ERROR_PREFIX}SyntaxError: {exc.msg} (line {exc.lineno})\n")
        sys.stderr.flush()
        os._exit(EXIT_ERROR)
    except BaseException as exc:  # noqa: BLE001 - the sandbox could not be set up; the parent says so
        sys.stderr.write(f"{ERROR_PREFIX}sandbox setup failed: {type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
        os._exit(EXIT_SETUP)
    del config
    status = EXIT_OK
    try:
        exec(compiled, {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as exc:
        if exc.code not in (None, 0):
            sys.stderr.write(f"{ERROR_PREFIX}the script exited with status {exc.code}\n")
            status = EXIT_SYSTEM_EXIT
    except BaseException as exc:  # noqa: BLE001 - every script failure becomes a report, never a crash
        try:
            status = _report(exc, workdir)
        except MemoryError:
            status = EXIT_MEMORY
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a full disk or closed pipe must not change the verdict
            if status == EXIT_OK:
                status = EXIT_FILE_TOO_LARGE
    # os._exit: no atexit handlers of the script's libraries run after the verdict
    os._exit(status)


if __name__ == "__main__":
    main()
