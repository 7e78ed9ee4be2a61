"""Escape attempts against the local process sandbox: each must fail safely, say why, and leave the host unchanged.

Every test runs a real script in a real child process (no fakes): the walls under test are the
kernel's (private root in mount and PID namespaces, netns, uid drop, rlimits) and the runner's
audit-hook policy. Each script first records its working directory in result.json, so a test can
prove afterwards that the directory is gone and that no process of that run survived.

Only the analysis test pays for the default preload (matplotlib.pyplot, ~1 s a run); the others
preload nothing or only what they attack, so the file runs in well under 25 s on 2 cores.
"""

from __future__ import annotations

import dis
import json
import os
import sys
import types
import uuid
from pathlib import Path

import pytest
from memtool.analysis.sandbox import _runner
from memtool.analysis.sandbox.local import LocalProcessSandbox
from memtool.analysis.sandbox.port import SandboxRun

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the local process sandbox needs a POSIX host")

RECORD_CWD = "import json, os\njson.dump({'cwd': os.getcwd()}, open('result.json', 'w'))\n"
LIGHT: tuple[str, ...] = ()  # nothing pre-imported: these scripts need no library


@pytest.fixture(scope="module")
def sandbox() -> LocalProcessSandbox:
    return LocalProcessSandbox(cpu_seconds=10, preload=LIGHT)


@pytest.fixture(scope="module")
def with_subprocess() -> LocalProcessSandbox:
    """subprocess and socket already imported before the hook, as matplotlib's import does in production."""
    return LocalProcessSandbox(cpu_seconds=10, preload=("subprocess", "socket"))


@pytest.fixture(scope="module", params=["private-root", "hook-only"])
def either_sandbox(request: pytest.FixtureRequest) -> LocalProcessSandbox:
    """The sandbox as it runs here, and as it degrades without mount namespaces (the hook is then the file wall)."""
    return LocalProcessSandbox(cpu_seconds=10, preload=LIGHT, use_private_root=request.param == "private-root")


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
    found, frontier = set(), {pid}
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


def test_a_normal_analysis_reads_data_and_returns_a_result_and_a_chart() -> None:
    sandbox = LocalProcessSandbox(cpu_seconds=10)  # the default preload: numpy, pandas, matplotlib
    data = {"columns": ["month", "revenue"], "rows": [[1, 10.0], [2, 12.5], [3, 15.0]]}
    script = """
import numpy as np, pandas as pd
import matplotlib.pyplot as plt
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
        "os.symlink('/etc/passwd', 'innocent.txt')\nprint(open('innocent.txt').read())",
        "print(os.read(os.open('/etc/passwd', os.O_RDONLY), 4096))",
    ],
    ids=["direct", "proc-self-root", "symlink-in-workdir", "os-open"],
)
def test_host_files_cannot_be_read(either_sandbox: LocalProcessSandbox, attempt: str) -> None:
    run = _run(either_sandbox, attempt)

    _forbidden(run, "/etc/passwd" if "symlink" not in attempt else "innocent.txt", "outside the working directory")
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
    assert set(environ) <= {"HOME", "MPLBACKEND", "MPLCONFIGDIR", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONDONTWRITEBYTECODE", "LANG", "LC_ALL"}
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


def test_the_policy_is_not_a_class_in_main(either_sandbox: LocalProcessSandbox) -> None:
    """The reviewer's first attack: patch the policy class found in ``__main__``."""
    attack = "import sys\nsys.modules['__main__']._Policy.__call__ = lambda s, e, a: None"
    run = _run(either_sandbox, _read_shadow_after(attack))

    assert _still_walled(run) == "AttributeError: module '__main__' has no attribute '_Policy'"


def test_main_is_the_scripts_own_module(either_sandbox: LocalProcessSandbox) -> None:
    script = """
import sys
main = sys.modules['__main__']
json.dump({'cwd': os.getcwd(), 'own': main.__dict__ is globals(),
           'names': sorted(k for k in vars(main) if not k.startswith('__'))}, open('result.json', 'w'))
"""
    run = _run(either_sandbox, script)

    assert run.ok, run.error
    assert run.result["own"] is True and run.result["names"] == ["json", "main", "os", "sys"]  # type: ignore[index]


@pytest.mark.parametrize("walk", ["get_objects()", "get_referrers(open)", "get_referents(sys.modules)"])
def test_gc_walks_to_the_policy_are_refused(either_sandbox: LocalProcessSandbox, walk: str) -> None:
    """The reviewer's second attack: find the policy among gc's objects and widen its read roots."""
    attack = f"""
import gc, sys
for found in gc.{walk}:
    if type(found).__name__ == '_Policy' or callable(found) and 'policy' in getattr(found, '__name__', ''):
        found.read_roots.append('/')
"""
    run = _run(either_sandbox, attack)

    _forbidden(run, "walking the garbage collector's objects")


def test_a_frame_walk_from_a_denial_finds_nothing_to_change(either_sandbox: LocalProcessSandbox) -> None:
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
    run = _run(either_sandbox, _read_shadow_after(attack))

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
def test_ways_to_the_interpreters_internals_are_refused(either_sandbox: LocalProcessSandbox, attack: str, refusal: str) -> None:
    run = _run(either_sandbox, attack)

    _forbidden(run, refusal)


def test_patching_what_the_old_policy_called_changes_nothing(either_sandbox: LocalProcessSandbox) -> None:
    attack = """
import builtins, posixpath
posixpath.realpath = os.path.realpath = lambda path, strict=False: '/usr/lib/' + str(path)
os.fsdecode = lambda path: 'data.json'
builtins.isinstance = lambda obj, kind: False
"""
    run = _run(either_sandbox, _read_shadow_after(attack))

    assert _still_walled(run) == "done"


def test_a_path_that_lies_the_second_time_it_is_asked_is_refused(either_sandbox: LocalProcessSandbox) -> None:
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
    run = _run(either_sandbox, attack)

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


def test_the_isolation_string_names_the_walls(sandbox: LocalProcessSandbox) -> None:
    walls = sandbox.isolation().removeprefix("local-process(").removesuffix(")").split(",")
    degraded = LocalProcessSandbox(preload=LIGHT, use_private_root=False).isolation()

    assert walls[-2:] == ["rlimits", "audit"]
    if os.geteuid() == 0 and "mountns" in walls:
        assert walls[:3] == ["mountns", "pidns", "netns"] and "setuid" in walls  # no capability kept
        assert "mountns" not in degraded
    assert "audit" not in LocalProcessSandbox(preload=(), _audit_hook=False).isolation()


def test_without_the_hook_the_host_is_absent(kernel_only: LocalProcessSandbox, tmp_path: Path) -> None:
    """No audit hook: the private root alone keeps host files and other tenants' state out of sight."""
    canary = tmp_path / f"tenant-state-{uuid.uuid4()}.sqlite3"
    canary.write_text("another tenant's memory")
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
    'seen': {{p: seen(p) for p in ['/etc/shadow', {str(canary)!r}, {str(tmp_path)!r}, '/work', '/home', '/var', '/root/.bashrc', {os.getcwd()!r}]}},
    'root': listing('/'), 'etc': listing('/etc'), 'home_of_root': listing('/root'), 'tmp': listing('/tmp'),
    'processes': sorted(p for p in os.listdir('/proc') if p.isdigit()),
    'uid': status['Uid'].split(), 'caps': status['CapEff'].strip(),
    'umount': libc.umount2(b'/usr', 2), 'mount_errno': ctypes.get_errno(),
}}, open('result.json', 'w'))
"""
    run = _run(kernel_only, script)

    assert run.ok, (run.error, run.stderr)
    seen = run.result  # type: ignore[assignment]
    assert not any(seen["seen"].values()), seen["seen"]
    python_top = Path(sys.prefix).resolve().parts[1]  # /root here (pyenv): only the path down to the installation
    assert set(seen["root"]) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr", python_top}
    assert set(seen["etc"]) <= {"passwd", "group", "ld.so.cache", "localtime"}
    assert seen["home_of_root"] in ([".pyenv"], "No such file or directory") and seen["home_of_root"] != sorted(os.listdir("/root"))
    assert seen["tmp"] == [os.path.basename(seen["cwd"])]
    assert seen["processes"] == ["1", "2"]  # the namespace's init and the script: no host process
    assert seen["uid"] == ["65534"] * 4 and int(seen["caps"], 16) == 0
    assert seen["umount"] == -1 and seen["mount_errno"] == 1  # EPERM: the private root cannot be undone
