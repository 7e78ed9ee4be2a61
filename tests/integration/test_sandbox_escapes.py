"""Escape attempts against the local process sandbox: each must fail safely, say why, and leave the host unchanged.

Every test runs a real script in a real child process (no fakes): the walls under test are the
kernel's (private root in mount and PID namespaces, or Landlock without them; seccomp, netns, uid
drop, rlimits, the working directory's tmpfs or budget) and the runner's audit-hook policy. Each
script first records its working directory in result.json, so a test can prove afterwards that the
directory is gone and that no process of that run survived.

The suite runs in both modes: ``namespace`` (the private root, where this machine allows it) and
``fallback`` (forced: no mount namespace, as on macOS, in Lambda or for an unprivileged user; the
hook, Landlock and seccomp are then the walls). The fallback is where the hostile review found its
escapes: sqlite's ATTACH and VACUUM INTO, mkfifo and mknod, a working directory without a budget,
and a venv whose standard library lives under a private sys.base_prefix (this venv's own case:
/tmp/mtv from a pyenv Python under /root, mode 0700, with scripts run as nobody).

Only the analysis test pays for the default preload (matplotlib.pyplot, ~1 s a run); the others
preload nothing or only what they attack, so the file runs in well under a minute on 2 cores.
"""

from __future__ import annotations

import dis
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import sys
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memtool.analysis.sandbox import _runner
from memtool.analysis.sandbox.local import LocalProcessSandbox, interpreter_paths, kernel_filters, workdir_usage
from memtool.analysis.sandbox.port import SandboxRun

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the local process sandbox needs a POSIX host")

RECORD_CWD = "import json, os\njson.dump({'cwd': os.getcwd()}, open('result.json', 'w'))\n"
LIGHT: tuple[str, ...] = ()  # nothing pre-imported: these scripts need no library


def _in_mode(mode: str, **options: object) -> LocalProcessSandbox:
    options.setdefault("cpu_seconds", 10)
    built = LocalProcessSandbox(use_private_root=mode == "namespace", **options)  # type: ignore[arg-type]
    if mode == "namespace" and "mountns" not in built.isolation():
        pytest.skip("no private root here (needs root and unshare --mount --pid)")
    assert mode == "namespace" or "mountns" not in built.isolation()
    return built


@pytest.fixture(scope="module", params=["namespace", "fallback"])
def mode(request: pytest.FixtureRequest) -> str:
    """The sandbox as it runs here, and as it degrades without mount namespaces (the fallback, forced)."""
    return str(request.param)


@pytest.fixture(scope="module")
def sandbox(mode: str) -> LocalProcessSandbox:
    return _in_mode(mode, preload=LIGHT)


@pytest.fixture(scope="module")
def with_subprocess(mode: str) -> LocalProcessSandbox:
    """subprocess and socket already imported before the hook, as matplotlib's import does in production."""
    return _in_mode(mode, preload=("subprocess", "socket"))


@pytest.fixture(scope="module")
def kernel_only() -> LocalProcessSandbox:
    """No audit hook at all: what the kernel walls hold on their own."""
    bare = LocalProcessSandbox(cpu_seconds=10, preload=(), _audit_hook=False)
    if "mountns" not in bare.isolation():
        pytest.skip("no private root here (needs root and unshare --mount --pid)")
    return bare


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _run(sandbox: LocalProcessSandbox, attempt: str, *, timeout: float = 15.0, files: dict[str, bytes] | None = None) -> SandboxRun:
    before = _descendants(os.getpid())
    run = sandbox.run(RECORD_CWD + attempt, files=files or {}, timeout_seconds=timeout)
    assert isinstance(run.result, dict), f"the script did not start: {run.error} / {run.stderr}"
    workdir = run.result["cwd"]
    assert not os.path.exists(workdir), "the working directory outlived the run"
    assert _processes_mentioning(workdir) == [], "a process of the run survived it"
    assert _descendants(os.getpid()) <= before, "the run left child processes behind"
    return run


def _forbidden(run: SandboxRun, *fragments: str) -> None:
    assert run.ok is False
    assert run.error_kind == "forbidden", (run.error_kind, run.error, run.stderr)
    assert run.error is not None and run.error.startswith("PermissionError: sandbox: ")
    for fragment in fragments:
        assert fragment in run.error


def test_a_normal_analysis_reads_data_and_returns_a_result_and_a_chart(mode: str) -> None:
    """Landlock, seccomp and the tmpfs take nothing an analysis needs: numpy, pandas, a chart, a lazy import."""
    sandbox = _in_mode(mode)  # the default preload: numpy, pandas, matplotlib
    data = {"columns": ["month", "revenue"], "rows": [[1, 10.0], [2, 12.5], [3, 15.0]]}
    script = """
import numpy as np, pandas as pd
import matplotlib.pyplot as plt
import statistics, tempfile  # lazy imports from the standard library, under sys.base_prefix
with tempfile.TemporaryFile() as scratch:  # TMPDIR: the working directory
    scratch.write(b"x")
data = json.load(open("data.json"))
frame = pd.DataFrame(data["rows"], columns=data["columns"])
slope = float(np.polyfit(frame["month"], frame["revenue"], 1)[0])
figure, axes = plt.subplots()
axes.plot(frame["month"], frame["revenue"])
axes.set_title("revenue")
figure.savefig("chart.png")
json.dump({"cwd": os.getcwd(), "slope": slope, "rows": len(frame)}, open("result.json", "w"))
print("fitted")
"""
    run = _run(sandbox, script, files={"data.json": json.dumps(data).encode()})

    assert run.ok, (run.error, run.stderr)
    assert run.result is not None and run.result["slope"] == pytest.approx(2.5) and run.result["rows"] == 3
    assert run.stdout == "fitted\n"
    assert [f.name for f in run.files] == ["chart.png"]  # neither data.json nor result.json nor .mpl
    chart = run.files[0]
    assert chart.content_type == "image/png" and chart.data[:8] == b"\x89PNG\r\n\x1a\n" and chart.size == len(chart.data)
    assert run.isolation.startswith("local-process(") and "rlimits" in run.isolation and "audit" in run.isolation


@pytest.mark.parametrize(
    "attempt",
    [
        "print(open('/etc/passwd').read())",
        "print(open('/proc/self/root/etc/passwd').read())",
        "print(os.read(os.open('/etc/passwd', os.O_RDONLY), 4096))",
    ],
    ids=["direct", "proc-self-root", "os-open"],
)
def test_host_files_cannot_be_read(sandbox: LocalProcessSandbox, attempt: str) -> None:
    run = _run(sandbox, attempt)

    _forbidden(run, "/etc/passwd", "outside the working directory")
    assert "root:" not in run.stdout


def test_a_symlink_to_a_host_file_cannot_be_made(sandbox: LocalProcessSandbox) -> None:
    run = _run(sandbox, "os.symlink('/etc/passwd', 'innocent.txt')\nprint(open('innocent.txt').read())")

    _forbidden(run, "creating symlinks")
    assert "root:" not in run.stdout


def test_the_hosts_environment_is_not_visible(sandbox: LocalProcessSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    canary = f"canary-{uuid.uuid4()}"
    monkeypatch.setenv("MEMTOOL_SANDBOX_CANARY", canary)
    script = """
json.dump({"cwd": os.getcwd(), "environ": dict(os.environ)}, open("result.json", "w"))
print(open(f"/proc/{int(open('data.json').read())}/environ").read())
"""
    run = _run(sandbox, script, files={"data.json": str(os.getpid()).encode()})

    environ = run.result["environ"]  # type: ignore[index]
    assert canary not in json.dumps(environ) and "MEMTOOL_SANDBOX_CANARY" not in environ
    assert set(environ) <= {"HOME", "TMPDIR", "MPLBACKEND", "MPLCONFIGDIR", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                            "PYTHONDONTWRITEBYTECODE", "LANG", "LC_ALL"}
    assert environ["TMPDIR"] == environ["HOME"] == run.result["cwd"]  # type: ignore[index]  # temp files stay in the budget
    _forbidden(run, f"/proc/{os.getpid()}/environ")
    assert canary not in run.stdout


def test_sockets_are_refused(sandbox: LocalProcessSandbox, with_subprocess: LocalProcessSandbox) -> None:
    attempt = "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)"

    _forbidden(_run(sandbox, attempt), "importing socket", "reaches processes, the network")
    _forbidden(_run(with_subprocess, attempt), "network", "no network")


def test_the_script_runs_in_its_own_network_namespace(sandbox: LocalProcessSandbox) -> None:
    """Even without the hook there is no route: the child is in a network namespace of its own
    (readlink is not an audited event, so the script can report it)."""
    if "netns" not in sandbox.isolation():
        pytest.skip("unshare --net is not available on this machine")
    script = "json.dump({'cwd': os.getcwd(), 'netns': os.readlink('/proc/self/ns/net')}, open('result.json', 'w'))"
    run = _run(sandbox, script)

    assert run.ok, run.error
    assert run.result["netns"].startswith("net:[") and run.result["netns"] != os.readlink("/proc/self/ns/net")  # type: ignore[index]


def test_subclass_walks_to_os_system_are_refused(sandbox: LocalProcessSandbox, tmp_path: Path) -> None:
    canary = Path("/tmp") / f"memtool-canary-{uuid.uuid4()}"
    script = f"""
wrap_close = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0]
wrap_close.__init__.__globals__['system']('touch {canary}')
"""
    run = _run(sandbox, script)

    _forbidden(run, "running a shell command")
    assert not canary.exists()


def test_subclass_walks_to_popen_are_refused(with_subprocess: LocalProcessSandbox) -> None:
    canary = Path("/tmp") / f"memtool-canary-{uuid.uuid4()}"
    script = f"""
popen = [c for c in object.__subclasses__() if c.__name__ == 'Popen'][0]
popen(['/usr/bin/touch', '{canary}'])
"""
    run = _run(with_subprocess, script)

    _forbidden(run, "starting a subprocess")
    assert not canary.exists()


def test_posixsubprocess_fork_exec_cannot_start_a_process(with_subprocess: LocalProcessSandbox) -> None:
    """_posixsubprocess.fork_exec raises no audit event; RLIMIT_NPROC=0 (after the uid drop) stops it."""
    canary = Path("/tmp") / f"memtool-canary-{uuid.uuid4()}"
    script = f"""
import sys
fork_exec = sys.modules['_posixsubprocess'].fork_exec
# CPython 3.11's signature, as subprocess.Popen calls it
errors_read, errors_write = os.pipe()
args = ([b'/usr/bin/touch', b'{canary}'], [b'/usr/bin/touch'], True, (), None, None,
        -1, -1, -1, -1, -1, -1, errors_read, errors_write, False, False, -1, None, None, None, -1, None, False)
for _ in range(50):
    fork_exec(*args)
"""
    run = _run(with_subprocess, script)

    assert run.ok is False and run.error_kind == "exit", (run.error_kind, run.error)
    assert run.error is not None and "BlockingIOError" in run.error and "Resource temporarily unavailable" in run.error
    assert not canary.exists()


def test_a_fork_bomb_is_refused(sandbox: LocalProcessSandbox) -> None:
    run = _run(sandbox, "while True:\n    os.fork()")

    _forbidden(run, "forking a process")


def test_threads_cannot_be_started(sandbox: LocalProcessSandbox) -> None:
    run = _run(sandbox, "import threading\nthreading.Thread(target=print).start()")

    assert run.ok is False and run.error_kind == "exit"
    assert run.error == "RuntimeError: can't start new thread"


def test_a_memory_bomb_hits_the_memory_limit(sandbox: LocalProcessSandbox) -> None:
    run = _run(sandbox, "hoard = []\nwhile True:\n    hoard.append(bytearray(64 << 20))")

    assert run.ok is False and run.error_kind == "memory_limit", (run.error_kind, run.error)
    assert run.error is not None and "out of memory (limit 1024 MiB)" in run.error


def test_a_sleeping_loop_is_stopped_by_the_wall_clock(sandbox: LocalProcessSandbox) -> None:
    run = _run(sandbox, "import time\nwhile True:\n    time.sleep(0.1)", timeout=1.5)

    assert run.ok is False and run.error_kind == "timeout"
    assert run.error == "the script ran longer than 1.5 s (wall clock) and was stopped"
    assert 1500 <= run.duration_ms < 6500


def test_a_busy_loop_is_stopped_by_the_cpu_limit() -> None:
    # the CPU clock starts with the interpreter; with nothing preloaded the loop gets most of the 2 s
    sandbox = LocalProcessSandbox(cpu_seconds=2, preload=LIGHT)
    run = _run(sandbox, "while True:\n    pass", timeout=30.0)

    assert run.ok is False and run.error_kind == "cpu_limit"
    assert run.error == "the script used more than 2 s of CPU time and was stopped"
    assert run.duration_ms < 20_000


def test_writing_outside_the_working_directory_is_refused(sandbox: LocalProcessSandbox) -> None:
    canary = Path("/tmp") / f"memtool-canary-{uuid.uuid4()}"
    run = _run(sandbox, f"open('{canary}', 'w').write('escaped')")

    _forbidden(run, f"writing {canary}", "outside the working directory")
    assert not canary.exists()


def test_renaming_into_the_host_is_refused(sandbox: LocalProcessSandbox) -> None:
    canary = Path("/tmp") / f"memtool-canary-{uuid.uuid4()}"
    run = _run(sandbox, f"open('x', 'w').write('escaped')\nos.rename('x', '{canary}')")

    _forbidden(run, "renaming", "outside the working directory")
    assert not canary.exists()


def test_a_flood_of_stdout_is_cut_and_stopped(sandbox: LocalProcessSandbox) -> None:
    run = _run(sandbox, "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)")

    assert run.ok is False and run.error_kind == "output_limit"
    assert run.error is not None and "printed more than" in run.error
    kept, marker = run.stdout.split("…[truncated ")
    assert kept == "x" * 65536 and marker.endswith(" bytes]") and int(marker.split()[0]) > 0


def test_a_huge_file_hits_the_file_size_limit(sandbox: LocalProcessSandbox) -> None:
    run = _run(sandbox, "with open('big.bin', 'wb') as f:\n    f.write(b'0' * (64 << 20))")

    assert run.ok is False and run.error_kind == "output_limit", (run.error_kind, run.error)
    assert run.error is not None and "larger than 16777216 bytes" in run.error and "File too large" in run.error
    assert all(f.size <= 16 << 20 for f in run.files)


# -- the policy cannot be reached or switched off from the script ----------------------------------


def _read_shadow_after(attack: str) -> str:
    """The attack, whose outcome goes to result.json, then a read of /etc/shadow that must still fail."""
    return f"""
try:
{chr(10).join('    ' + line for line in attack.strip().splitlines())}
    outcome = 'done'
except Exception as exc:
    outcome = f'{{type(exc).__name__}}: {{exc}}'
json.dump({{'cwd': os.getcwd(), 'attack': outcome}}, open('result.json', 'w'))
print(open('/etc/shadow').read())
"""


def _still_walled(run: SandboxRun) -> str:
    _forbidden(run, "opening /etc/shadow", "outside the working directory")
    assert "root:" not in run.stdout
    return str(run.result["attack"])  # type: ignore[index]


def test_the_policy_is_not_a_class_in_main(sandbox: LocalProcessSandbox) -> None:
    """The reviewer's first attack: patch the policy class found in ``__main__``."""
    attack = "import sys\nsys.modules['__main__']._Policy.__call__ = lambda s, e, a: None"
    run = _run(sandbox, _read_shadow_after(attack))

    assert _still_walled(run) == "AttributeError: module '__main__' has no attribute '_Policy'"


def test_main_is_the_scripts_own_module(sandbox: LocalProcessSandbox) -> None:
    script = """
import sys
main = sys.modules['__main__']
json.dump({'cwd': os.getcwd(), 'own': main.__dict__ is globals(),
           'names': sorted(k for k in vars(main) if not k.startswith('__'))}, open('result.json', 'w'))
"""
    run = _run(sandbox, script)

    assert run.ok, run.error
    assert run.result["own"] is True and run.result["names"] == ["json", "main", "os", "sys"]  # type: ignore[index]


@pytest.mark.parametrize("walk", ["get_objects()", "get_referrers(open)", "get_referents(sys.modules)"])
def test_gc_walks_to_the_policy_are_refused(sandbox: LocalProcessSandbox, walk: str) -> None:
    """The reviewer's second attack: find the policy among gc's objects and widen its read roots."""
    attack = f"""
import gc, sys
for found in gc.{walk}:
    if type(found).__name__ == '_Policy' or callable(found) and 'policy' in getattr(found, '__name__', ''):
        found.read_roots.append('/')
"""
    run = _run(sandbox, attack)

    _forbidden(run, "walking the garbage collector's objects")


def test_a_frame_walk_from_a_denial_finds_nothing_to_change(sandbox: LocalProcessSandbox) -> None:
    """From a denial's traceback to the hook's frame, then down f_back to the runner's: everything
    mutable found there is widened, and /etc/shadow stays closed."""
    attack = """
def widen(namespace):
    for value in list(namespace.values()):
        if isinstance(value, list):
            value.append('/')
        elif isinstance(value, set):
            value.add('/')
        elif isinstance(value, dict) and value is not namespace:
            value['read_roots'] = ['/']
    namespace['read_roots'] = ['/']
try:
    open('/etc/passwd')
except PermissionError as exc:
    tb = exc.__traceback__
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
hook = frames[-1]
assert sorted(hook.f_globals) == ['__builtins__'], sorted(hook.f_globals)  # the hook's globals are its own, empty
walked = 0
frame = frames[0]
while frame is not None:
    widen(frame.f_locals)
    frame = frame.f_back
    walked += 1
assert walked >= 2  # the script's frame and the runner's below it
widen(hook.f_locals)
widen(hook.f_globals)
"""
    run = _run(sandbox, _read_shadow_after(attack))

    assert _still_walled(run) == "done"


@pytest.mark.parametrize(
    ("attack", "refusal"),
    [
        ("import sys\nsys._getframe(1)", "reading the sandbox runner's frames"),
        ("import sys\nsys._getframe(0).f_back.f_code", "reading the sandbox runner's frames"),
        ("import sys\nsys._current_frames()", "reading other frames"),
        ("import sys\nsys.settrace(lambda *a: None)", "trace functions"),
        ("import sys\nsys.setprofile(lambda *a: None)", "profile functions"),
        ("import _xxsubinterpreters as i\ni.run_string(i.create(), 'open(\"/etc/shadow\")')", "importing _xxsubinterpreters"),
        ("import os\nos.path.realpath.__code__ = (lambda path, strict=False: '/usr').__code__", "changing a function's code"),
        ("import types\ntypes.CodeType.replace(compile('1', 's', 'eval'), co_consts=(2,))", "building code objects"),
        ("fd = os.open('.', os.O_RDONLY)\nos.open('../../etc/shadow', os.O_RDONLY, dir_fd=fd)", "opening the directory ."),
    ],
    ids=["getframe-runner", "f_back-f_code", "current-frames", "settrace", "setprofile", "subinterpreter", "replace-code",
         "new-code", "dir-fd"],
)
def test_ways_to_the_interpreters_internals_are_refused(sandbox: LocalProcessSandbox, attack: str, refusal: str) -> None:
    run = _run(sandbox, attack)

    _forbidden(run, refusal)


def test_patching_what_the_old_policy_called_changes_nothing(sandbox: LocalProcessSandbox) -> None:
    attack = """
import builtins, posixpath
posixpath.realpath = os.path.realpath = lambda path, strict=False: '/usr/lib/' + str(path)
os.fsdecode = lambda path: 'data.json'
builtins.isinstance = lambda obj, kind: False
"""
    run = _run(sandbox, _read_shadow_after(attack))

    assert _still_walled(run) == "done"


def test_a_path_that_lies_the_second_time_it_is_asked_is_refused(sandbox: LocalProcessSandbox) -> None:
    """io.FileIO hands the hook the path object after it converted it: a checker that asked again would be lied to."""
    attack = """
import io
class Liar:
    asked = 0
    def __fspath__(self):
        Liar.asked += 1
        return '/etc/shadow' if Liar.asked == 1 else 'result.json'
print(io.FileIO(Liar()).read())
"""
    run = _run(sandbox, attack)

    _forbidden(run, "opening <object>", "only plain str or bytes paths")
    assert "root:" not in run.stdout


def test_the_policy_reads_no_global_and_holds_nothing_mutable() -> None:
    """What makes the two tests above hold: the hook and its helpers take everything as tuple defaults."""
    runner_globals: dict[str, object] = {}
    hook = _runner._policy("/tmp/work", ["/usr"], runner_globals)
    helpers = [value for value in hook.__defaults__ if isinstance(value, types.FunctionType)]
    assert len(helpers) == 4  # resolve, under, shown, check_changes
    forbidden_ops = {"LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF", "STORE_GLOBAL", "LOAD_CLOSURE"}
    for function in [hook, *helpers]:
        assert function.__closure__ is None and function.__kwdefaults__ is None, function
        used = {i.opname for i in dis.get_instructions(function.__code__)}
        assert not used & forbidden_ops, (function, used & forbidden_ops)
        assert not [c for c in function.__code__.co_consts if isinstance(c, types.CodeType)], function  # no nested code
        for value in function.__defaults__ or ():
            if value is runner_globals or value is hook.__globals__:
                continue  # compared by identity only
            assert isinstance(value, (str, int, tuple, frozenset, type, types.BuiltinFunctionType, types.FunctionType)), value
    assert hook.__globals__ == {"__builtins__": {}}


# -- the kernel walls on their own -----------------------------------------------------------------


def _walls(sandbox: LocalProcessSandbox) -> list[str]:
    return sandbox.isolation().removeprefix("local-process(").removesuffix(")").split(",")


def test_the_isolation_string_names_the_walls(sandbox: LocalProcessSandbox, mode: str) -> None:
    walls = _walls(sandbox)

    assert walls[-2:] == ["rlimits", "audit"]
    landlock, seccomp = kernel_filters(sandbox.python)
    assert ("seccomp" in walls) == seccomp
    assert walls[-3] in ("tmpfs", "budget")
    if mode == "namespace":
        assert walls[:3] == ["mountns", "pidns", "netns"] and "setuid" in walls  # no capability kept
        assert "landlock" not in walls  # the private root is the file wall
    else:
        assert "mountns" not in walls and ("landlock" in walls) == (landlock > 0)
    assert "audit" not in LocalProcessSandbox(preload=(), _audit_hook=False).isolation()
    bare = _walls(LocalProcessSandbox(preload=(), use_private_root=False, use_landlock=False, use_seccomp=False, use_workdir_mount=False))
    assert "landlock" not in bare and "seccomp" not in bare and bare[-3:] == ["budget", "rlimits", "audit"]


def test_without_the_hook_the_host_is_absent(kernel_only: LocalProcessSandbox, tmp_path: Path) -> None:
    """No audit hook: the private root alone keeps host files and other tenants' state out of sight."""
    canary = tmp_path / f"tenant-state-{uuid.uuid4()}.sqlite3"
    canary.write_text("another tenant's memory")
    state = Path(kernel_only.state_home)
    repository = Path(__file__).resolve().parents[2]
    hidden = ["/etc/shadow", str(canary), str(tmp_path), "/home", "/var", "/root/.bashrc", str(repository / "pyproject.toml"),
              str(repository / ".git"), str(state / "state")]
    other_run = Path(kernel_only.work_root) / f"memtool-sandbox-other-{uuid.uuid4().hex[:8]}"
    other_run.mkdir()  # another run's working directory, next to this one's
    script = f"""
import ctypes
def seen(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return exc.strerror
status = dict(line.split(':\\t', 1) for line in open('/proc/self/status').read().splitlines() if ':\\t' in line)
libc = ctypes.CDLL(None, use_errno=True)
json.dump({{
    'cwd': os.getcwd(),
    'seen': {{p: seen(p) for p in {hidden!r}}},
    'root': listing('/'), 'etc': listing('/etc'), 'home_of_root': listing('/root'), 'siblings': listing(os.path.dirname(os.getcwd())),
    'processes': sorted(p for p in os.listdir('/proc') if p.isdigit()),
    'uid': status['Uid'].split(), 'caps': status['CapEff'].strip(),
    'umount': libc.umount2(b'/usr', 2), 'mount_errno': ctypes.get_errno(),
}}, open('result.json', 'w'))
"""
    try:
        run = _run(kernel_only, script)
    finally:
        other_run.rmdir()

    assert run.ok, (run.error, run.stderr)
    seen = run.result
    assert isinstance(seen, dict)
    assert not any(seen["seen"].values()), seen["seen"]
    # only the paths down to the interpreter's folders (/root/.pyenv, /tmp/mtv) and to the working directory
    tops = {Path(p).parts[1] for p in [*interpreter_paths(kernel_only.python), kernel_only.work_root]}
    assert set(seen["root"]) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "usr", *tops}
    assert set(seen["etc"]) <= {"passwd", "group", "ld.so.cache", "localtime"}
    assert seen["home_of_root"] in ([".pyenv"], "No such file or directory") and seen["home_of_root"] != sorted(os.listdir("/root"))
    assert seen["siblings"] == [os.path.basename(seen["cwd"])]  # no other run's working directory
    assert seen["processes"] == ["1", "2"]  # the namespace's init and the script: no host process
    assert seen["uid"] == ["65534"] * 4 and int(seen["caps"], 16) == 0
    assert seen["umount"] == -1 and seen["mount_errno"] == 1  # EPERM: the private root cannot be undone


# -- the fallback's review: the interpreter's own paths, sqlite, special files, the disk ------------


def test_the_interpreters_own_import_paths_stay_readable(sandbox: LocalProcessSandbox) -> None:
    """The review's venv: sys.prefix (/tmp/mtv) is readable by nobody, the standard library under
    sys.base_prefix (/root/.pyenv, mode 0700) is not. Scripts run as nobody must still import it lazily."""
    script = """
import sys, sysconfig, statistics, fractions, textwrap, zoneinfo
json.dump({'cwd': os.getcwd(), 'uid': os.getuid(), 'base': sys.base_prefix, 'stdlib': sysconfig.get_paths()['stdlib'],
           'source': len(open(sysconfig.__file__).read()), 'median': statistics.median([1, 5, 9])}, open('result.json', 'w'))
"""
    run = _run(sandbox, script)

    assert run.ok, (run.error, run.stderr)
    assert run.result["median"] == 5 and run.result["source"] > 0  # type: ignore[index]
    assert run.result["base"] == sys.base_prefix  # type: ignore[index]
    if os.geteuid() == 0:
        assert run.result["uid"] == 65534  # type: ignore[index]  # the script ran as nobody, not as us


def test_the_readability_check_covers_sys_base_prefix() -> None:
    """The check that decides the one read capability asks the interpreter for every folder it imports from."""
    paths = interpreter_paths(sys.executable)
    assert os.path.realpath(sys.base_prefix) in paths and os.path.realpath(sys.prefix) in paths
    stdlib = os.path.dirname(os.path.realpath(os.__file__))
    assert stdlib in paths
    fallback = LocalProcessSandbox(preload=LIGHT, use_private_root=False)
    private = not all(os.stat(p).st_mode & stat.S_IXOTH for p in Path(sys.base_prefix).resolve().parents if p != Path("/"))
    if os.geteuid() == 0 and private:  # this venv: /tmp/mtv is readable, its base under /root is not
        assert "setuid+dac_read_search" in fallback.isolation()


def test_a_folder_on_sys_path_that_holds_memtools_state_is_not_readable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An editable install of a project whose root holds .memtool would put the state database on sys.path."""
    project = tmp_path / "project"
    (project / ".memtool" / "state").mkdir(parents=True)
    library = tmp_path / "library"
    library.mkdir()
    monkeypatch.setattr(sys, "path", [str(project), str(library), *sys.path])

    roots = _runner._read_roots([str(project / ".memtool")])

    assert str(project) not in roots and "/" not in roots
    assert str(library) in roots and os.path.realpath(sys.base_prefix) in roots


@pytest.fixture
def host_folder() -> Iterator[Path]:
    """A folder of the host, world-readable like a runtime's state folder: nobody could read it without the walls."""
    folder = Path("/tmp") / f"memtool-host-{uuid.uuid4().hex[:12]}"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def state_database(host_folder: Path) -> Path:
    """A real runtime state database with a stored memory in it."""
    (host_folder / "state").mkdir(mode=0o755)
    path = host_folder / "state" / "memtool.sqlite3"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE memories (tenant TEXT, content TEXT)")
        connection.execute("INSERT INTO memories VALUES ('acme', 'SECRET-7f3a: the CFO approves discounts over 30%')")
    connection.close()
    path.chmod(0o644)
    return path


def _fingerprint(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir" for p in folder.rglob("*")}


@pytest.mark.parametrize(
    "database",
    ["{outside}", "analysis.db", "", "file:{outside}?mode=rwc"],
    ids=["file-outside", "file-in-workdir", "temporary-file", "uri"],
)
def test_sqlite_database_files_are_refused(sandbox: LocalProcessSandbox, host_folder: Path, database: str) -> None:
    outside = host_folder / "made-by-the-script.sqlite3"
    run = _run(sandbox, f"import sqlite3\nsqlite3.connect({database.format(outside=outside)!r}, uri=True).execute('CREATE TABLE t (x)')")

    _forbidden(run, "opening the sqlite database", "only sqlite3.connect(':memory:') is allowed")
    assert list(host_folder.iterdir()) == []  # nothing was created, not even a journal


_ATTACH_ATTACKS = {
    "attach": "connection = sqlite3.connect(':memory:')\nconnection.execute(\"ATTACH {state!r} AS stolen\")",
    "attach-read-only-uri": "connection = sqlite3.connect(':memory:', uri=True)\n"
    "connection.execute(\"ATTACH 'file:{state}?mode=ro' AS stolen\")",
    # past the authorizer: only the kernel's file wall (private root, Landlock) is left
    "attach-without-the-authorizer": "connection = sqlite3.connect(':memory:')\nconnection.set_authorizer(None)\n"
    "connection.execute(\"ATTACH {state!r} AS stolen\")",
    "attach-from-a-bare-connection": "connection = sqlite3.Connection(':memory:')\nconnection.execute(\"ATTACH {state!r} AS stolen\")",
}


@pytest.mark.parametrize("attack", list(_ATTACH_ATTACKS), ids=list(_ATTACH_ATTACKS))
def test_attaching_the_runtimes_state_database_reads_nothing(sandbox: LocalProcessSandbox, state_database: Path, attack: str) -> None:
    before = _fingerprint(state_database.parent)
    script = "import sqlite3\n" + _ATTACH_ATTACKS[attack].format(state=str(state_database)) + """
rows = connection.execute('SELECT content FROM stolen.memories').fetchall()
print(rows)
json.dump({'cwd': os.getcwd(), 'rows': rows}, open('result.json', 'w'))
"""
    run = _run(sandbox, script)

    assert run.ok is False
    assert "SECRET-7f3a" not in run.stdout + run.stderr + json.dumps(run.result)
    if "authorizer" in attack or "bare" in attack:
        assert run.error_kind == "exit" and run.error is not None and "unable to open database" in run.error, run.error
    else:
        _forbidden(run, "sqlite refused the statement", "ATTACH, VACUUM INTO")
    assert _fingerprint(state_database.parent) == before  # no journal, no WAL, no change


@pytest.mark.parametrize("past_the_authorizer", [False, True], ids=["vacuum-into", "vacuum-into-without-the-authorizer"])
def test_vacuum_into_a_path_outside_is_refused(sandbox: LocalProcessSandbox, host_folder: Path, past_the_authorizer: bool) -> None:
    copy = host_folder / "copy.sqlite3"
    script = f"""
import sqlite3
connection = sqlite3.connect(':memory:')
connection.execute('CREATE TABLE t (x)')
connection.execute('VACUUM')  # a plain VACUUM attaches a temporary database of its own: allowed
{'connection.set_authorizer(None)' if past_the_authorizer else ''}
connection.execute("VACUUM INTO {str(copy)!r}")
"""
    run = _run(sandbox, script)

    if past_the_authorizer:
        assert run.error_kind == "exit" and run.error is not None and "unable to open database" in run.error, run.error
    else:
        _forbidden(run, "sqlite refused the statement")
    assert not copy.exists() and list(host_folder.iterdir()) == []


def test_the_state_database_cannot_be_read_as_a_file(sandbox: LocalProcessSandbox, state_database: Path) -> None:
    run = _run(sandbox, f"print(open({str(state_database)!r}, 'rb').read())")

    _forbidden(run, f"opening {state_database}", "outside the working directory")
    assert b"SECRET-7f3a" in state_database.read_bytes() and "SECRET-7f3a" not in run.stdout


def test_without_the_hook_landlock_keeps_the_fallback_in_its_folder(state_database: Path) -> None:
    """No audit hook and no private root: what Landlock and seccomp hold on their own, in native code too
    (sqlite's C opens the file for ATTACH; a fresh posix module's mkfifo is a bare syscall)."""
    bare = LocalProcessSandbox(cpu_seconds=10, preload=(), use_private_root=False, _audit_hook=False)
    if "landlock" not in bare.isolation():
        pytest.skip("no Landlock on this kernel")
    host = state_database.parent
    script = f"""
import sqlite3
def attempt(action):
    try:
        action()
        return 'done'
    except Exception as exc:
        return type(exc).__name__ + ': ' + str(exc)
def attach():
    connection = sqlite3.connect(':memory:')
    connection.execute("ATTACH {str(state_database)!r} AS stolen")
    return connection.execute('SELECT content FROM stolen.memories').fetchall()
json.dump({{'cwd': os.getcwd(), 'read': attempt(lambda: open({str(state_database)!r}, 'rb').read()),
           'attach': attempt(attach), 'write': attempt(lambda: open({str(host / 'planted')!r}, 'w')),
           'vacuum': attempt(lambda: sqlite3.connect(':memory:').execute("VACUUM INTO {str(host / 'copy.db')!r}")),
           'fifo': attempt(lambda: os.mkfifo({str(host / 'fifo')!r})), 'passwd': attempt(lambda: open('/etc/passwd').read()),
           'stdlib': attempt(lambda: __import__('statistics')), 'own': attempt(lambda: open('mine.txt', 'w').write('x'))}},
          open('result.json', 'w'))
"""
    before = _fingerprint(host)
    run = _run(bare, script)

    assert run.ok, (run.error, run.stderr)
    outcome = run.result
    assert isinstance(outcome, dict)
    assert outcome["read"].startswith("PermissionError: [Errno 13]") and outcome["passwd"].startswith("PermissionError")
    assert outcome["attach"] == "OperationalError: unable to open database: " + str(state_database)
    assert outcome["write"].startswith("PermissionError") and outcome["vacuum"].startswith("OperationalError")
    assert outcome["fifo"].startswith("PermissionError: [Errno 1] Operation not permitted")  # seccomp's EPERM
    assert outcome["stdlib"] == "done" and outcome["own"] == "done"
    assert _fingerprint(host) == before


def test_without_a_kernel_file_wall_sqlite_is_refused(host_folder: Path, state_database: Path) -> None:
    """macOS, or a kernel without Landlock: nothing below the hook would stop ATTACH, so no connection at all."""
    bare = LocalProcessSandbox(cpu_seconds=10, preload=LIGHT, use_private_root=False, use_landlock=False)
    run = _run(bare, f"import sqlite3\nsqlite3.connect(':memory:').execute(\"ATTACH {str(state_database)!r} AS stolen\")")

    _forbidden(run, "opening a sqlite database", "no kernel file wall holds here")
    assert "SECRET-7f3a" not in run.stdout + run.stderr


_SPECIAL_FILES = {
    "mkfifo": ("os.mkfifo({target!r})", "creating a fifo"),
    "mknod": ("os.mknod({target!r})", "creating a device or special file"),
    "mkfifo-in-workdir": ("os.mkfifo('pipe')", "creating a fifo"),
    "hard-link": ("open('mine', 'w').close()\nos.link('mine', {target!r})", "hard-linking files"),
    "symlink": ("os.symlink('/etc/shadow', {target!r})", "creating symlinks"),
}


@pytest.mark.parametrize("attempt", list(_SPECIAL_FILES), ids=list(_SPECIAL_FILES))
def test_special_files_and_links_cannot_be_made(sandbox: LocalProcessSandbox, host_folder: Path, attempt: str) -> None:
    target = host_folder / "made-by-the-script"
    code, refusal = _SPECIAL_FILES[attempt]
    run = _run(sandbox, code.format(target=str(target)))

    _forbidden(run, refusal)
    assert not os.path.lexists(target) and list(host_folder.iterdir()) == []


@pytest.mark.parametrize("call", ["mkfifo({target!r})", "mknod({target!r})", "mkfifo('pipe')", "link('/etc/hostname', {target!r})"])
def test_a_fresh_posix_module_meets_the_seccomp_filter(sandbox: LocalProcessSandbox, host_folder: Path, call: str) -> None:
    """``_imp.create_builtin`` makes a new posix module with the originals back, and mkfifo/mknod raise no audit
    event: only the kernel says no (seccomp; Landlock or the private root besides)."""
    if "seccomp" not in sandbox.isolation():
        pytest.skip("no seccomp here")
    target = host_folder / "made-by-the-script"
    script = f"""
import _imp
posix = _imp.create_builtin(type('Spec', (), {{'name': 'posix', 'origin': None}})())
assert posix is not os and posix.mkfifo is not os.mkfifo
posix.{call.format(target=str(target))}
"""
    run = _run(sandbox, script)

    assert run.ok is False and run.error is not None
    assert "Operation not permitted" in run.error or "sandbox: hard-linking files" in run.error, run.error
    assert not os.path.lexists(target) and list(host_folder.iterdir()) == []


# -- the working directory's budget --------------------------------------------------------------------

BUDGET_BYTES = 32 << 20
BUDGET_FILES = 300


@pytest.fixture(params=["tmpfs", "budget"])
def budgeted(mode: str, request: pytest.FixtureRequest) -> Iterator[tuple[LocalProcessSandbox, Path]]:
    """A small budget in a work root of this test's own, so the test can measure the whole host folder."""
    probe = LocalProcessSandbox(preload=LIGHT)
    root = Path(probe.work_root) / f"test-budget-{uuid.uuid4().hex[:12]}"
    root.mkdir(mode=0o711)
    root.chmod(0o711)
    try:
        built = _in_mode(mode, preload=LIGHT, work_root=root, workdir_bytes=BUDGET_BYTES, workdir_files=BUDGET_FILES,
                         use_workdir_mount=request.param == "tmpfs", cpu_seconds=30)
        if request.param == "tmpfs" and "tmpfs" not in built.isolation():
            pytest.skip("no tmpfs mount here (needs root with CAP_SYS_ADMIN)")
        yield built, root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _peak_usage(root: Path, run: Callable[[], SandboxRun]) -> tuple[SandboxRun, int, int]:
    """Run while sampling the host folder's bytes and entries every few milliseconds: (run, peak bytes, peak entries)."""
    peak = [0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            used, entries = workdir_usage(str(root), 1 << 20)
            peak[0], peak[1] = max(peak[0], used), max(peak[1], entries)
            time.sleep(0.003)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = run()
    finally:
        done.set()
        sampler.join()
    return result, peak[0], peak[1]


def _progress(run: SandboxRun) -> int:
    return int(run.stdout.split()[-1]) if run.stdout.split() else 0


def test_writing_600_mib_is_stopped_by_the_budget(budgeted: tuple[LocalProcessSandbox, Path]) -> None:
    sandbox, root = budgeted
    script = """
for chunk in range(600):
    with open(f'chunk-{chunk}.bin', 'wb') as f:
        f.write(b'x' * (1 << 20))
    print(chunk, flush=True)
"""
    run, peak_bytes, _ = _peak_usage(root, lambda: _run(sandbox, script, timeout=30))

    assert run.ok is False and run.error_kind == "output_limit", (run.error_kind, run.error)
    assert run.error is not None and "working directory's budget (32 MiB, 300 files)" in run.error
    assert ("No space left on device" if "tmpfs" in sandbox.isolation() else "it wrote more than 32 MiB, and was stopped") in run.error
    # of 600: far short of the goal (the watcher looks every 25 ms; on a loaded 2-core CI machine a look
    # can come a few hundred MiB late, which the peak check below bounds on disk)
    assert _progress(run) < 450
    bound = BUDGET_BYTES + (1 << 20) if "tmpfs" in sandbox.isolation() else 4 * BUDGET_BYTES  # the kernel's cap, or a few looks late
    assert peak_bytes <= bound, peak_bytes >> 20
    assert list(root.iterdir()) == []  # the host folder is empty again
    assert sum(f.size for f in run.files) <= 16 << 20  # what came back stays within the returned-files cap


def test_making_30000_files_is_stopped_by_the_budget(budgeted: tuple[LocalProcessSandbox, Path]) -> None:
    sandbox, root = budgeted
    script = """
os.mkdir('deep')
for number in range(30000):
    open(f'deep/{number}', 'w').close()
    if number % 50 == 0:
        print(number, flush=True)
"""
    run, _, peak_entries = _peak_usage(root, lambda: _run(sandbox, script, timeout=30))

    assert run.ok is False and run.error_kind == "output_limit", (run.error_kind, run.error)
    assert run.error is not None and "working directory's budget (32 MiB, 300 files)" in run.error
    assert ("No space left on device" if "tmpfs" in sandbox.isolation() else "it made more than 300 files, and was stopped") in run.error
    assert _progress(run) < 30000 // 4
    bound = BUDGET_FILES + 8 if "tmpfs" in sandbox.isolation() else 10 * BUDGET_FILES
    assert peak_entries <= bound, peak_entries
    assert list(root.iterdir()) == []


def test_a_deleted_file_held_open_still_counts(budgeted: tuple[LocalProcessSandbox, Path]) -> None:
    """Unlinked but open, a file is on the disk and in no directory: the watcher reads the run's descriptors."""
    sandbox, root = budgeted
    script = """
held = []
for number in range(60):
    handle = open(f'ghost-{number}', 'wb')
    os.remove(f'ghost-{number}')
    handle.write(b'x' * (8 << 20))
    handle.flush()
    held.append(handle)
    print(number, flush=True)
"""
    run, peak_bytes, _ = _peak_usage(root, lambda: _run(sandbox, script, timeout=30))

    assert run.ok is False and run.error_kind == "output_limit", (run.error_kind, run.error)
    assert run.error is not None and "working directory's budget" in run.error
    assert _progress(run) < 20  # of 60 files of 8 MiB
    assert list(root.iterdir()) == []
