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
5. without a private root, where the kernel has Landlock (Linux 5.13+): restrict this process to
   reading the interpreter's import paths and to writing the working directory (``_restrict_files``).
   It stands in for the private root as the file wall that native code meets too — sqlite's ATTACH
   and VACUUM INTO, which open files no audit event sees, among them;
6. on Linux in both modes, a seccomp filter (``_forbid_syscalls``): no mknod/mkfifo, hard link,
   symlink or io_uring from here on. ``os.mkfifo`` and ``os.mknod`` raise no audit event, and a
   fresh ``posix`` module (``_imp.create_builtin``) brings them back past any Python-level removal;
7. install the audit hook (PEP 578) built by ``_policy``: opens outside the Python installation
   and the working directory, sqlite database files, links, processes, signals, sockets, ctypes,
   mmap, sub-interpreters, gc walks, trace functions and code replacement raise
   ``PermissionError("sandbox: ...")``. The hook holds no state the script can reach or change (see
   ``_policy``). ``sqlite3.connect`` hands out connections that refuse ATTACH and VACUUM INTO, and
   ``os.mkfifo``/``os.mknod`` refuse with the same kind of error (``_refuse_special_files``);
8. forget the installers, put a fresh ``__main__`` module in place of this one, and ``exec`` the
   script compiled as ``<sandbox>`` in it; its exception is written to stderr with its own frames
   only (no host paths) and mapped to an exit code the parent reads.

An audit hook alone is not a security boundary (PEP 578 says so): the private root or Landlock,
seccomp, the network namespace, the uid drop and the rlimits set by the parent are the walls; the
hook gives clear errors and closes the doors Python opens most easily. Where no kernel file wall
holds (macOS, kernels without Landlock), sqlite connections are refused altogether: ATTACH would
otherwise read any file the sandbox uid can, the runtime's own state database included.
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
EXIT_DISK_FULL = 6
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
    # a link makes a host file look like one of the working directory's (or a path outside it one of ours)
    "os.link": "hard-linking files",
    "os.symlink": "creating symlinks",
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
}
_TWO_PATH_CHANGES = {"os.rename": "renaming", "shutil.move": "moving"}
_DIR_FD_ARGS = {
    "os.remove": (1,), "os.rmdir": (1,), "os.mkdir": (2,), "os.chmod": (2,), "os.chown": (3,), "os.utime": (3,),
    "os.rename": (2, 3), "shutil.rmtree": (1,),
}
_FD_ALLOWED = frozenset({"os.chdir", "os.truncate", "os.chmod", "os.chown", "os.utime"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_DEVICES = (("null", 3), ("zero", 5), ("full", 7), ("random", 8), ("urandom", 9))  # char devices, major 1

# mount(2) flags and the pivot_root syscall number (glibc has no wrapper for it)
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "loongarch64": 41}

# Landlock (linux/landlock.h): the syscalls have one number on every architecture
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LL_EXECUTE, _LL_WRITE_FILE, _LL_READ_FILE, _LL_READ_DIR = 1, 2, 4, 8
_LL_MAKE_CHAR, _LL_MAKE_SOCK, _LL_MAKE_FIFO, _LL_MAKE_BLOCK, _LL_MAKE_SYM = 64, 512, 1024, 2048, 4096
_LL_REFER, _LL_TRUNCATE, _LL_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_LL_FILE_RIGHTS = _LL_EXECUTE | _LL_WRITE_FILE | _LL_READ_FILE | _LL_TRUNCATE | _LL_IOCTL_DEV  # what a rule on a file may grant
# what C code outside the interpreter reads on its own: the shared libraries a lazily imported extension
# links (libsqlite3, libffi ...) and the loader's cache, the time zone, the CPU count
_LL_SYSTEM_READS = ("/lib", "/lib32", "/lib64", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache",
                    "/etc/localtime", "/sys/devices/system/cpu")

# seccomp: the audit architecture and the syscalls no script needs that make files no path check sees
# (mknod/mkfifo, hard links, symlinks) or do file operations no filter sees (io_uring)
_SECCOMP_ARCHES = {
    "x86_64": (0xC000003E, (86, 88, 133, 259, 265, 266, 425)),  # link symlink mknod mknodat linkat symlinkat io_uring_setup
    "aarch64": (0xC00000B7, (33, 36, 37, 425)),  # mknodat symlinkat linkat io_uring_setup
}
_X32_SYSCALL_BIT = 0x40000000
_SQLITE_ATTACH, _SQLITE_PRAGMA, _SQLITE_DENY, _SQLITE_OK = 24, 19, 1, 0
_SQLITE_NOT_AUTHORIZED = (
    "sandbox: sqlite refused the statement: ATTACH, VACUUM INTO and the store-directory pragmas "
    "are not allowed: they open files outside the working directory"
)



def _policy(workdir, read_roots, runner_globals, memory_databases=False):
    """Build the audit hook: a function whose decisions nothing in the script can change.

    ``memory_databases``: whether ``sqlite3.connect(':memory:')`` is allowed — only where a kernel
    file wall (the private root, Landlock) stops what sqlite's SQL opens on its own. Database files
    are refused everywhere.

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
        paths = args[:2] if event == "os.rename" or event == "shutil.move" else args[:1]
        for path in paths:
            if _type(path) is _int and event in _fd_allowed:
                continue  # a descriptor was judged when it was opened
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
             _write=_WRITE_FLAGS, _internals=_FUNCTION_INTERNALS, _runner=runner_globals, _own=own_globals,
             _memory_databases=bool(memory_databases)):
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
        elif event == "sqlite3.connect":
            database = args[0] if _len(args) else None
            if not _memory_databases:
                what, why = "opening a sqlite database", ("no kernel file wall holds here (mount namespace or Landlock), "
                                                          "so sqlite's ATTACH and VACUUM INTO could open any file")
            elif not (_type(database) is _str and database == ":memory:"):
                # "" is a temporary file in the host's temp dir; a file (or a file: URI) gives sqlite a
                # journal, a WAL and ATTACH of its own, all opened where no audit event sees them
                what, why = "opening the sqlite database " + _shown(database), "only sqlite3.connect(':memory:') is allowed"
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


def _read_roots(hidden: list[str]) -> list[str]:
    """Every folder the interpreter imports from, resolved: what the script may read (and, in a
    private root, what is bound into it).

    A venv's ``sys.prefix`` holds only its site-packages; the standard library is under
    ``sys.base_prefix`` (pyenv: under /root), and an editable install adds its own ``sys.path``
    entry. A folder that holds one of the ``hidden`` ones (memtool's state, the sandbox's working
    directories) is left out, whatever put it on ``sys.path``: the state database must never be
    readable because a project root was importable.
    """
    import site
    import sysconfig

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path}
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
    private = [os.path.realpath(h).rstrip("/") + "/" for h in hidden if h]
    kept = set()
    for root in roots:
        if not root or not os.path.isabs(root):
            continue
        real = os.path.realpath(root).rstrip("/") + "/"
        if real == "/" or any(h.startswith(real) or real.startswith(h) for h in private):
            continue  # the whole host, or a folder that holds memtool's state
        if os.path.exists(real):  # a zip on sys.path is a file
            kept.add(real.rstrip("/"))
    return sorted(kept)


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


def _restrict_files(workdir: str, read_roots: list[str], abi: int) -> None:
    """Landlock: from here this process reads only the import paths and writes only the working directory.

    The kernel's answer to what the audit hook cannot see: a file sqlite opens for ATTACH or VACUUM
    INTO, an open in a C extension, a fifo made by a fresh ``posix`` module. ``abi`` is the Landlock
    version the parent found; every access right that version knows is handled, so whatever no rule
    grants is denied: no file outside these folders, no execve, no device node, fifo, socket file
    or symlink even inside the working directory. From ABI 4 TCP bind and connect are denied too
    (no rule grants a port), from ABI 6 signals and abstract unix sockets outside this process.
    """
    import ctypes
    import stat
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    handled = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    handled |= (_LL_REFER if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0) | (_LL_IOCTL_DEV if abi >= 5 else 0)
    network = 0b11 if abi >= 4 else 0  # BIND_TCP, CONNECT_TCP
    scoped = 0b11 if abi >= 6 else 0  # ABSTRACT_UNIX_SOCKET, SIGNAL
    size = 8 if abi < 4 else 16 if abi < 6 else 24  # the ruleset_attr this ABI knows
    attr = ctypes.create_string_buffer(struct.pack("=QQQ", handled, network, scoped), 24)
    ruleset = libc.syscall(ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), attr, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    read = _LL_READ_FILE | _LL_READ_DIR
    write = handled & ~(_LL_EXECUTE | _LL_MAKE_CHAR | _LL_MAKE_BLOCK | _LL_MAKE_FIFO | _LL_MAKE_SOCK | _LL_MAKE_SYM | _LL_IOCTL_DEV)

    def allow(path: str, access: int) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                access &= _LL_FILE_RIGHTS
            rule = ctypes.create_string_buffer(struct.pack("=Qi", access & handled, fd), 12)  # packed path_beneath_attr
            if libc.syscall(ctypes.c_long(_SYS_LANDLOCK_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(1), rule, ctypes.c_uint32(0)) != 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
        finally:
            os.close(fd)

    try:
        for root in read_roots:
            allow(root, read)
        for path in _LL_SYSTEM_READS:
            allow(path, read)
        allow("/dev/null", _LL_READ_FILE | _LL_WRITE_FILE | _LL_TRUNCATE)
        for name in ("zero", "random", "urandom"):
            allow(f"/dev/{name}", _LL_READ_FILE)
        allow(workdir, write)
        if libc.syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)


def _forbid_syscalls(machine: str) -> None:
    """seccomp: mknod/mkfifo, hard links, symlinks and io_uring answer EPERM from here on.

    A classic BPF filter: a foreign architecture (i386 calls from an x86_64 process, the x32 ABI) is
    refused outright, the listed syscalls answer EPERM, everything else is allowed. Needs
    ``PR_SET_NO_NEW_PRIVS``, set when privileges were dropped.
    """
    import ctypes
    import struct

    arch, numbers = _SECCOMP_ARCHES[machine]
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, ..JGE.., BPF_RET|BPF_K
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EPERM  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
    checks = ([(jge, _X32_SYSCALL_BIT)] if machine == "x86_64" else []) + [(jeq, number) for number in numbers]
    program = [(ld_abs, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, deny), (ld_abs, 0, 0, 0)]
    deny_at = len(program) + len(checks) + 1
    for code, value in checks:
        program.append((code, deny_at - len(program) - 1, 0, value))
    program += [(ret, 0, 0, allow), (ret, 0, 0, deny)]
    filters = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *instruction) for instruction in program))

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Program(len(program), ctypes.cast(filters, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


def _sqlite_guard() -> None:
    """``sqlite3.connect`` hands out connections whose authorizer refuses ATTACH and VACUUM INTO.

    Only for the clear error on the common path: the audit event ``sqlite3.connect/handle`` fires
    before the connection can take an authorizer, so a script that builds a ``Connection`` itself
    or calls ``set_authorizer(None)`` gets past this. What stops it then is the kernel file wall
    (private root or Landlock); without one the hook refuses every connection (see ``_policy``).
    ATTACH of ``''`` or ``':memory:'`` stays allowed: plain VACUUM attaches a temporary database.
    """
    import types

    try:
        import sqlite3
    except ImportError:
        return

    def authorize(action, name, _detail, _database, _trigger, _type=type, _str=str, _attach=_SQLITE_ATTACH,
                  _pragma=_SQLITE_PRAGMA, _deny=_SQLITE_DENY, _ok=_SQLITE_OK, _temporary=("", ":memory:"),
                  _store_dirs=("temp_store_directory", "data_store_directory")):
        if action == _attach:
            return _ok if _type(name) is _str and name in _temporary else _deny
        if action == _pragma and _type(name) is _str and name.lower() in _store_dirs:
            return _deny
        return _ok

    # its names come from ``guarded`` below, a namespace of its own (any signature of sqlite3.connect passes through)
    def connect(*args, **kwargs):
        connection = _connect(*args, **kwargs)  # noqa: F821
        _set_authorizer(connection, _authorize)  # noqa: F821
        return connection

    guarded: dict[str, object] = {"__builtins__": {}}
    authorizer = types.FunctionType(authorize.__code__.replace(co_filename="<sandbox policy>"), guarded, "sandbox_authorizer",
                                    authorize.__defaults__, None)
    guarded.update(_connect=sqlite3.connect, _set_authorizer=sqlite3.Connection.set_authorizer, _authorize=authorizer)
    wrapper = types.FunctionType(connect.__code__.replace(co_filename="<sandbox policy>"), guarded, "connect", None, None)
    wrapper.__doc__ = sqlite3.connect.__doc__
    sqlite3.connect = sqlite3.dbapi2.connect = wrapper


def _refuse_special_files() -> None:
    """``os.mkfifo`` and ``os.mknod`` raise no audit event: in ``os`` and ``posix`` they refuse instead.

    A clear error only; the seccomp filter is what holds (a fresh ``posix`` module has the originals).
    """
    import posix
    import types

    def refuse(*_args, **_kwargs):  # its two names come from a namespace of its own, below
        raise _denied(_message)  # noqa: F821

    for name, what in (("mkfifo", "creating a fifo"), ("mknod", "creating a device or special file")):
        namespace = {"__builtins__": {}, "_denied": PermissionError,
                     "_message": f"sandbox: {what} is not allowed: it makes a file no path check sees"}
        refusal = types.FunctionType(refuse.__code__.replace(co_filename="<sandbox policy>"), namespace, name, None, None)
        for module in (os, posix):
            if hasattr(module, name):
                setattr(module, name, refusal)


def _probe_filters(wanted: dict) -> None:
    """``_runner.py --probe``: install the kernel filters in this throwaway process and say which took.

    The parent asks once before it promises them in the isolation string: a kernel may answer the
    version query and still refuse a filter (a container's own seccomp profile, an LSM stack).
    """
    import ctypes
    import platform
    import tempfile

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, as in a real run
    took = {"seccomp": False, "landlock": False}
    if wanted.get("seccomp"):
        try:
            _forbid_syscalls(platform.machine())
            took["seccomp"] = True
        except (OSError, KeyError):
            pass
    if wanted.get("landlock", 0):
        try:
            _restrict_files(tempfile.gettempdir(), _read_roots([]), int(wanted["landlock"]))
            took["landlock"] = True
        except OSError:
            pass
    sys.stdout.write(json.dumps(took))


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
    # the sqlite authorizer's refusal reaches the script as sqlite's own words: say whose it is
    refused_by_sqlite = _type(exc).__module__ == "sqlite3" and _str(exc) in ("not authorized", "authorization denied")
    if refused_by_sqlite:
        summary = f"PermissionError: {_SQLITE_NOT_AUTHORIZED}"
    sys.stderr.write("".join(lines) + summary + "\n" + ERROR_PREFIX + summary.replace("\n", " ") + "\n")
    if refused_by_sqlite or (_isinstance(exc, PermissionError) and _str(exc).startswith("sandbox:")):
        return EXIT_FORBIDDEN
    if _isinstance(exc, MemoryError):
        return EXIT_MEMORY
    if _isinstance(exc, OSError) and _getattr(exc, "errno", None) == errno.EFBIG:
        return EXIT_FILE_TOO_LARGE
    if _isinstance(exc, OSError) and _getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
        return EXIT_DISK_FULL  # the working directory's tmpfs is full: its byte or file budget is spent
    return EXIT_ERROR


# what the script must not find in this module's globals once it runs
_INSTALLERS = ("_policy", "_read_roots", "_wait_as_init", "_enter_private_root", "_write", "_preload", "_drop_privileges",
               "_restrict_files", "_forbid_syscalls", "_sqlite_guard", "_refuse_special_files", "_probe_filters", "_INSTALLERS")


def main() -> None:
    if sys.argv[1] == "--probe":
        _probe_filters(json.loads(sys.argv[2]))
        return
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
        hidden = config.get("hidden", [])
        if config.get("private_root"):
            _enter_private_root(
                config["private_root"],
                workdir,
                _read_roots(hidden),
                max(config.get("uid", -1), 0),
                max(config.get("gid", -1), 0),
                own_pid_namespace,
            )
        # The drop uses ctypes calls the policy forbids, so it comes first; no script code runs between.
        _drop_privileges(config.get("uid", -1), config.get("gid", -1), config.get("keep_read_search", False))
        _preload(config.get("preload", []))
        read_roots = _read_roots(hidden)  # after the preload: matplotlib's data folder is one
        if config.get("audit", True):
            _sqlite_guard()  # imports sqlite3 while its library is still readable
        if config.get("landlock", 0):
            _restrict_files(workdir, read_roots, config["landlock"])
        if config.get("seccomp"):
            import platform

            _forbid_syscalls(platform.machine())
        if config.get("audit", True):
            _refuse_special_files()
            file_wall = bool(config.get("private_root") or config.get("landlock", 0))
            sys.addaudithook(_policy(workdir, read_roots, globals(), memory_databases=file_wall))
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
