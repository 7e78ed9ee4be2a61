"""The child side of the local process sandbox: enter a private root, drop privileges, lock down, run the script.

Executed by path as ``python -I _runner.py <config json>`` with the script on stdin. It imports only
the standard library until the audit hook is installed, so nothing the host has on ``sys.path``
runs before the policy. Order matters:

1. as PID 1 of a fresh PID namespace, fork: this process only waits and passes on how the other
   ended (``_wait_as_init``). Then read the script and config, ignore SIGXFSZ (so a write past
   RLIMIT_FSIZE raises ``OSError(EFBIG)`` instead of killing us silently);
2. when the parent started us in fresh mount and PID namespaces (``private_root``), still root:
   make every mount private, build a new root on a tmpfs — read-only binds of /usr and of the
   Python installation at their own paths, generated /etc files, /dev/null and friends, a /proc of
   the new PID namespace, the working directory read-write at its own path — then ``pivot_root``
   into it and detach the host's tree. From here no path leads to a host file, whatever the
   script does in Python or in native code;
3. as root: ``setgroups([])``, ``setgid``/``setuid`` to the sandbox uid (root ignores
   RLIMIT_NPROC, nobody does not), which drops every capability. Only without a private root,
   when the parent says the Python installation is unreadable to that uid (pyenv under /root),
   is CAP_DAC_READ_SEARCH kept. Then ``PR_SET_NO_NEW_PRIVS``;
4. preload numpy, pandas and matplotlib (Agg) as that uid;
5. install the audit hook (PEP 578) built by ``_policy``: opens outside the Python installation
   and the working directory, processes, signals, sockets, ctypes, mmap, sub-interpreters, gc
   walks, trace functions and code replacement raise ``PermissionError("sandbox: ...")``. The hook
   holds no state the script can reach or change (see ``_policy``);
6. forget the installers, put a fresh ``__main__`` module in place of this one, and ``exec`` the
   script compiled as ``<sandbox>`` in it; its exception is written to stderr with its own frames
   only (no host paths) and mapped to an exit code the parent reads.

An audit hook alone is not a security boundary (PEP 578 says so): the private root, the network
namespace, the uid drop and the rlimits set by the parent are the walls; the hook gives clear
errors and closes the doors Python opens most easily.
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
    {"ctypes", "_ctypes", "cffi", "_cffi_backend", "socket", "_socket", "ssl", "_ssl", "subprocess", "_posixsubprocess",
     "multiprocessing", "_multiprocessing", "pty", "resource", "mmap", "_xxsubinterpreters", "_xxinterpchannels",
     "_interpreters", "_interpchannels", "_interpqueues"}
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
    # the ways from Python to the interpreter's own objects (and so to the hook)
    "gc.get_objects": "walking the garbage collector's objects",
    "gc.get_referrers": "walking the garbage collector's objects",
    "gc.get_referents": "walking the garbage collector's objects",
    "sys._current_frames": "reading other frames",
    "sys.settrace": "trace functions",
    "sys.setprofile": "profile functions",
    "code.__new__": "building code objects",
    "cpython.PyInterpreterState_New": "starting a sub-interpreter",
}
_DENIED_PREFIXES = {"ctypes.": "native code through ctypes", "sys.monitoring.": "monitoring callbacks"}
# function attributes whose change rewrites what a function does: __code__ for every function (nothing
# in the analysis libraries swaps it), the defaults only for the sandbox's own (namedtuple sets them)
_FUNCTION_INTERNALS = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
# Events whose first argument is a path the script changes (must be inside the working dir).
_PATH_CHANGES = {
    "os.remove": "deleting", "os.rmdir": "deleting", "os.mkdir": "creating a directory", "os.chmod": "changing modes",
    "os.chown": "changing owners", "os.truncate": "truncating", "os.utime": "changing times", "os.chflags": "changing flags",
    "os.lchflags": "changing flags", "os.lchmod": "changing modes", "os.setxattr": "setting attributes",
    "os.removexattr": "removing attributes", "os.chdir": "changing directory", "shutil.rmtree": "deleting",
    "sqlite3.connect": "opening a database",
}
_TWO_PATH_CHANGES = {"os.rename": "renaming", "os.link": "hard-linking", "shutil.move": "moving", "os.symlink": "creating a symlink at"}
_DIR_FD_ARGS = {
    "os.remove": (1,), "os.rmdir": (1,), "os.mkdir": (2,), "os.chmod": (2,), "os.chown": (3,), "os.utime": (3,),
    "os.rename": (2, 3), "os.link": (2, 3), "os.symlink": (2,), "shutil.rmtree": (1,),
}
_FD_ALLOWED = frozenset({"os.chdir", "os.truncate", "os.chmod", "os.chown", "os.utime"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_DEVICES = (("null", 3), ("zero", 5), ("full", 7), ("random", 8), ("urandom", 9))  # char devices, major 1

# mount(2) flags and the pivot_root syscall number (glibc has no wrapper for it)
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "loongarch64": 41}



def _policy(workdir, read_roots, runner_globals):
    """Build the audit hook: a function whose decisions nothing in the script can change.

    * It reads no global and holds no closure cell: every name it uses is a positional default,
      stored in the function's ``__defaults__`` tuple (keyword-only defaults would live in a
      mutable dict), bound here. A test disassembles it and its helpers to keep it so.
    * Its tables are frozensets and tuples; it calls only C functions captured here (never
      ``os.path.realpath``, whose module the script could patch) and helpers built the same way.
    * It judges only arguments of exactly ``str``, ``bytes`` or ``int``, so no ``__fspath__``,
      ``__eq__``, ``__hash__`` or metaclass of the script runs while it decides. (``open()`` and the
      ``os`` functions pass the converted ``str``; only ``io.FileIO(path_like)`` is refused.)
    * The function object is held only by the interpreter's hook list, which no Python API lists;
      the gc walks that could find it are denied, so are ``__code__``/``__defaults__`` changes.

    Frames are another matter: ``f_back``, ``f_globals`` and ``f_locals`` raise no audit event, so a
    script holding any frame can walk down to the runner's, and a denial's traceback holds the
    hook's frame. The hook refuses ``sys._getframe`` and ``f_code``/``__code__`` on the runner's own
    frames and functions (known by their globals) for a clear error; whatever such a walk can still
    read is immutable or unused by the hook. Its own frames get a private, empty globals dict, so a
    script's ``traceback.print_exc()`` after a denial still works.
    """
    import stat
    import types

    def under(path, roots):
        # roots are "/dir/" prefixes; path is a resolved absolute str
        probe = path + "/"
        for root in roots:
            if probe.startswith(root):
                return True
        return False

    def resolve(path, _type=type, _str=str, _bytes=bytes, _getcwd=os.getcwd, _lstat=os.lstat, _readlink=os.readlink,
                _islnk=stat.S_ISLNK, _errors=(OSError, ValueError, UnicodeError)):
        """The absolute path with every symlink followed (as realpath does), or None when it cannot be judged."""
        if _type(path) is _bytes:
            try:
                path = path.decode("utf-8", "surrogateescape")
            except _errors:
                return None
        elif _type(path) is not _str:
            return None  # a str subclass or a path-like could answer differently each time it is asked
        if "\x00" in path or path == "":
            return None
        if not path.startswith("/"):
            try:
                path = _getcwd() + "/" + path
            except _errors:
                return None
        pending = path.split("/")
        pending.reverse()
        parts = []
        links = 0
        while pending:
            name = pending.pop()
            if name == "" or name == ".":
                continue
            if name == "..":
                if parts:
                    parts.pop()
                continue
            parts.append(name)
            candidate = "/" + "/".join(parts)
            try:
                mode = _lstat(candidate).st_mode
            except _errors:
                continue  # a name that does not exist (yet) is judged as written
            if _islnk(mode):
                links += 1
                if links > 40:
                    return None
                try:
                    target = _readlink(candidate)
                except _errors:
                    return None
                parts.pop()
                if target.startswith("/"):
                    parts = []
                more = target.split("/")
                more.reverse()
                pending.extend(more)
        return "/" + "/".join(parts)

    def shown(path, _type=type, _str=str, _bytes=bytes):
        if _type(path) is _str:
            return path
        if _type(path) is _bytes:
            return path.decode("utf-8", "replace")
        return "<object>"  # never repr() or a class name: either could run the script's code

    work = (os.path.realpath(workdir).rstrip("/") + "/",)
    readable = tuple(sorted({os.path.realpath(r).rstrip("/") + "/" for r in read_roots if r} | set(work)))

    def check_changes(event, verb, args, _type=type, _len=len, _str=str, _int=int, _resolve=resolve, _under=under,
                      _shown=shown, _work=work, _dir_fd_args=tuple(_DIR_FD_ARGS.items()), _fd_allowed=_FD_ALLOWED):
        """(what, why) when a path-changing event reaches outside the working directory, else (None, None)."""
        for name, indexes in _dir_fd_args:
            if name == event:
                for index in indexes:
                    dir_fd = args[index] if _len(args) > index else None
                    if _type(dir_fd) is _int and dir_fd >= 0:
                        # a dir_fd makes a relative path mean something other than what we would resolve
                        return verb + " relative to a directory descriptor", "only paths are checked"
        if event == "os.symlink":
            paths = args[1:2]  # only the link must live in the workdir: its target is judged when opened
        elif event == "os.rename" or event == "os.link" or event == "shutil.move":
            paths = args[:2]
        else:
            paths = args[:1]
        for path in paths:
            if _type(path) is _int and event in _fd_allowed:
                continue  # a descriptor was judged when it was opened
            if event == "sqlite3.connect" and _type(path) is _str and (path == ":memory:" or path == ""):
                continue
            if event == "sqlite3.connect" and _type(path) is _str and path.startswith("file:"):
                return verb + " " + path, "only plain paths inside the working directory are allowed"
            real = _resolve(path)
            if real is None:
                return verb + " " + _shown(path), "only plain str or bytes paths inside the working directory are allowed"
            if not _under(real, _work):
                return verb + " " + _shown(path), "files outside the working directory are not allowed"
        return None, None

    changes = {**_PATH_CHANGES, **_TWO_PATH_CHANGES}
    own_globals: dict[str, object] = {"__builtins__": {}}  # the hook's, and nothing else's

    def hook(event, args, _type=type, _len=len, _str=str, _int=int, _frame=types.FrameType, _function=types.FunctionType,
             _stat=os.stat, _isdir=stat.S_ISDIR, _denied=PermissionError, _errors=(OSError, ValueError),
             _resolve=resolve, _under=under, _shown=shown, _check_changes=check_changes, _work=work, _readable=readable,
             _read_files=frozenset({"/dev/null", "/dev/urandom", "/dev/random", "/dev/zero"}), _blocked=_BLOCKED_MODULES,
             _process_names=frozenset(_PROCESS_EVENTS), _process=tuple(_PROCESS_EVENTS.items()),
             _other_names=frozenset(_OTHER_DENIED), _other=tuple(_OTHER_DENIED.items()), _network=_NETWORK_EVENTS,
             _prefixes=tuple(_DENIED_PREFIXES.items()), _change_names=frozenset(changes), _changes=tuple(changes.items()),
             _write=_WRITE_FLAGS, _internals=_FUNCTION_INTERNALS, _runner=runner_globals, _own=own_globals):
        what = None
        why = "it could escape or weaken the sandbox"
        if event == "open" or event == "os.listdir" or event == "os.scandir":
            path = args[0] if _len(args) else None
            flags = args[2] if event == "open" and _len(args) > 2 else 0
            if path is None or _type(path) is _int:
                return  # no path, or a descriptor: it was judged when it was opened
            real = _resolve(path)
            writing = event == "open" and (_type(flags) is not _int or flags & _write)
            if real is None:
                what, why = "opening " + _shown(path), "only plain str or bytes paths are checked"
            elif writing:
                if real != "/dev/null" and not _under(real, _work):
                    what, why = "writing " + _shown(path), "files outside the working directory are not allowed"
            elif not (real in _read_files or _under(real, _readable)):
                verb = "opening " if event == "open" else "listing "
                what, why = verb + _shown(path), "files outside the working directory are not allowed"
            elif event == "open":
                try:
                    is_dir = _isdir(_stat(real).st_mode)
                except _errors:
                    is_dir = False
                if is_dir:
                    # a directory descriptor as dir_fd makes a later relative path mean something else
                    # than what the hook resolves (the open event does not carry dir_fd)
                    what, why = "opening the directory " + _shown(path), "directory descriptors are not allowed"
        elif event == "import":
            name = args[0] if _len(args) else None
            if _type(name) is not _str:
                what = "importing a module by a name that is not a str"
            elif name in _blocked or name.split(".")[0] in _blocked:
                what, why = "importing " + name, "this module reaches processes, the network or native code"
        elif event == "sys._getframe" or event == "object.__getattr__":
            target = args[0] if _len(args) else None
            attribute = args[1] if _len(args) > 1 else "f_code"
            if _type(target) is _frame and attribute == "f_code" and target.f_globals is _runner:
                what, why = "reading the sandbox runner's frames", "they belong to the sandbox, not to the script"
            elif _type(target) is _function and attribute == "__code__" and target.__globals__ is _runner:
                what, why = "reading the sandbox runner's code", "it belongs to the sandbox, not to the script"
        elif event == "object.__setattr__" or event == "object.__delattr__":
            target = args[0] if _len(args) else None
            attribute = args[1] if _len(args) > 1 else None
            if _type(attribute) is not _str:
                what = "changing an attribute by a name that is not a str"
            elif attribute == "__code__" or (attribute in _internals and _type(target) is _function
                                             and (target.__globals__ is _runner or target.__globals__ is _own)):
                what, why = "changing a function's code or the sandbox's defaults", "it could rewrite the sandbox's checks"
        elif event in _change_names:
            for name, verb in _changes:
                if name == event:
                    what, why = _check_changes(event, verb, args)
        elif event in _process_names:
            for name, reason in _process:
                if name == event:
                    what, why = reason, "the sandbox runs exactly one process"
        elif event in _other_names:
            for name, reason in _other:
                if name == event:
                    what = reason
        elif event.startswith(_network):
            what, why = "network access (" + event + ")", "the sandbox has no network"
        else:
            for prefix, reason in _prefixes:
                if event.startswith(prefix):
                    what, why = reason + " (" + event + ")", "it reaches the interpreter's internals"
        if what is not None:
            raise _denied("sandbox: " + what + " is not allowed: " + why)

    # the same code and defaults, with globals of its own: nothing the script reaches is its namespace
    # (and a file name that names no host path in the script's tracebacks)
    code = hook.__code__.replace(co_filename="<sandbox policy>")
    return types.FunctionType(code, own_globals, "sandbox_policy", hook.__defaults__, None)


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


def _wait_as_init() -> None:
    """As PID 1 of the sandbox's PID namespace, leave the work to a child and pass on how it ended.

    PID 1 of a namespace ignores every signal it has no handler for — SIGXCPU from RLIMIT_CPU too —
    and unshare cannot relay a SIGKILL, so the script never runs as PID 1: this process forks (still
    root, so RLIMIT_NPROC does not apply), waits, and exits with the child's status, or 128 + the
    signal that killed it (the parent maps that back). When it ends, the kernel kills the namespace.
    """
    child = os.fork()
    if child == 0:
        return
    os.close(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _, status = os.waitpid(child, 0)
    os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.waitstatus_to_exitcode(status))


def _enter_private_root(mount_point: str, workdir: str, read_roots: list[str], uid: int, gid: int, own_proc: bool) -> None:
    """Pivot into a new root that holds the interpreter, the working directory and nothing of the host.

    Runs as root in the mount and PID namespaces ``unshare`` made for this run alone, so no mount
    here is seen by the host, and all of them go when the run's two processes end.
    """
    import ctypes
    import platform

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]

    def encoded(text: str | None) -> bytes | None:
        return None if text is None else os.fsencode(text)

    def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
        if libc.mount(encoded(source), encoded(target), encoded(fstype), flags, encoded(data)) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"mount {source or fstype or ''} on {target}: {os.strerror(code)}")

    new_root = os.path.realpath(mount_point)
    inside = lambda path: new_root + path  # noqa: E731 - paths here are absolute and resolved

    def bind(source: str, flags: int) -> None:
        os.makedirs(inside(source), mode=0o755, exist_ok=True)
        mount(source, inside(source), None, _MS_BIND)
        mount(None, inside(source), None, _MS_REMOUNT | _MS_BIND | flags)  # a bind takes new flags only on remount

    os.umask(0o022)
    mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing below propagates back to the host
    mount("tmpfs", new_root, "tmpfs", _MS_NOSUID, "mode=0755,size=8m")
    bound: list[str] = []
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            os.symlink(os.readlink(top), inside(top))
        elif os.path.isdir(top):
            bind(top, _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
            bound.append(top + "/")
    for root in sorted({os.path.realpath(r) for r in read_roots if r and os.path.isdir(r)}, key=len):
        if not any((root + "/").startswith(done) for done in bound):
            bind(root, _MS_RDONLY | _MS_NOSUID | _MS_NODEV)  # the Python installation, at its own path
            bound.append(root + "/")
    work = os.path.realpath(workdir)
    bind(work, _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)

    os.mkdir(inside("/etc"))
    _write(inside("/etc/passwd"), f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}:sandbox:{work}:/usr/sbin/nologin\n")
    _write(inside("/etc/group"), f"root:x:0:\nsandbox:x:{gid}:\n")
    for name in ("ld.so.cache", "localtime"):  # what the loader and the time functions read; copies, not binds
        try:
            with open(f"/etc/{name}", "rb") as source:
                _write(inside(f"/etc/{name}"), source.read())
        except OSError:
            pass
    os.mkdir(inside("/dev"))
    for name, minor in _DEVICES:
        os.mknod(inside(f"/dev/{name}"), 0o666 | 0o020000, os.makedev(1, minor))
        os.chmod(inside(f"/dev/{name}"), 0o666)
    links = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"))
    for name, target in links:
        os.symlink(target, inside(f"/dev/{name}"))
    os.mkdir(inside("/proc"))

    os.chdir(new_root)
    number = _SYS_PIVOT_ROOT.get(platform.machine())
    if number is not None and libc.syscall(ctypes.c_long(number), b".", b".") == 0:
        if libc.umount2(b".", _MNT_DETACH) != 0:  # the host's tree, now stacked on ours, goes away
            raise OSError(ctypes.get_errno(), "cannot detach the host's root")
    else:
        os.chroot(".")  # no pivot_root here: the host's tree stays mounted, out of reach without CAP_SYS_CHROOT
    os.chdir("/")
    if own_proc:  # a PID namespace of our own: its /proc shows this namespace's two processes only
        mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    mount(None, "/", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID)
    os.chdir(work)


def _write(path: str, data: str | bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data.encode() if isinstance(data, str) else data)


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
        os.setuid(uid)  # without KEEPCAPS every capability goes with it
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


def _report(exc: BaseException, workdir: str, script_globals: dict, _isinstance=isinstance, _type=type, _str=str, _getattr=getattr) -> int:
    """Write the script's exception and map it to an exit code (with builtins bound before the script could patch them)."""
    import traceback

    # the script's own frames only (its globals): no host path, and never the runner's frames
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_globals is script_globals:
            frames.append(traceback.FrameSummary(frame.f_code.co_filename, tb.tb_lineno, frame.f_code.co_name))
        tb = tb.tb_next
    lines = ["Traceback (script frames only):\n", *traceback.format_list(frames)] if frames else []
    summary = _scrub(f"{_type(exc).__name__}: {exc}", workdir)
    sys.stderr.write("".join(lines) + summary + "\n" + ERROR_PREFIX + summary.replace("\n", " ") + "\n")
    if _isinstance(exc, PermissionError) and _str(exc).startswith("sandbox:"):
        return EXIT_FORBIDDEN
    if _isinstance(exc, MemoryError):
        return EXIT_MEMORY
    if _isinstance(exc, OSError) and _getattr(exc, "errno", None) == errno.EFBIG:
        return EXIT_FILE_TOO_LARGE
    return EXIT_ERROR


# what the script must not find in this module's globals once it runs
_INSTALLERS = ("_policy", "_read_roots", "_wait_as_init", "_enter_private_root", "_write", "_preload", "_drop_privileges", "_INSTALLERS")


def main() -> None:
    config = json.loads(sys.argv[1])
    own_pid_namespace = os.getpid() == 1
    if own_pid_namespace:
        _wait_as_init()
    code = sys.stdin.read()
    sys.stdin.close()
    workdir = config["workdir"]
    os.chdir(workdir)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        import linecache
        import traceback  # loaded now, while every file is readable, so reporting never fails later
        import types

        del traceback
        compiled = compile(code, "<sandbox>", "exec")
        linecache.cache["<sandbox>"] = (len(code), None, code.splitlines(True), "<sandbox>")
        if config.get("private_root"):
            _enter_private_root(
                config["private_root"],
                workdir,
                _read_roots([]),
                max(config.get("uid", -1), 0),
                max(config.get("gid", -1), 0),
                own_pid_namespace,
            )
        # The drop uses ctypes calls the policy forbids, so it comes first; no script code runs between.
        _drop_privileges(config.get("uid", -1), config.get("gid", -1), config.get("keep_read_search", False))
        _preload(config.get("preload", []))
        if config.get("audit", True):
            sys.addaudithook(_policy(workdir, _read_roots([]), globals()))
        script = types.ModuleType("__main__")
        script.__dict__["__builtins__"] = __builtins__
        runner = sys.modules["__main__"]  # kept alive: its functions report the outcome
        sys.modules["__main__"] = script
        for name in _INSTALLERS:
            globals().pop(name, None)
    except SyntaxError as exc:
        sys.stderr.write(f"{ERROR_PREFIX}SyntaxError: {exc.msg} (line {exc.lineno})\n")
        sys.stderr.flush()
        os._exit(EXIT_ERROR)
    except BaseException as exc:  # noqa: BLE001 - the sandbox could not be set up; the parent says so
        sys.stderr.write(f"{ERROR_PREFIX}sandbox setup failed: {type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
        os._exit(EXIT_SETUP)
    del config, code
    status = EXIT_OK
    try:
        exec(compiled, script.__dict__)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            sys.stderr.write(f"{ERROR_PREFIX}the script exited with status {exc.code}\n")
            status = EXIT_SYSTEM_EXIT
    except BaseException as exc:  # noqa: BLE001 - every script failure becomes a report, never a crash
        try:
            status = _report(exc, workdir, script.__dict__)
        except MemoryError:
            status = EXIT_MEMORY
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a full disk or closed pipe must not change the verdict
            if status == EXIT_OK:
                status = EXIT_FILE_TOO_LARGE
    del runner
    # os._exit: no atexit handlers of the script's libraries run after the verdict
    os._exit(status)


if __name__ == "__main__":
    main()
