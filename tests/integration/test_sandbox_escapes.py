"""Escape attempts against the local process sandbox: each must fail safely, say why, and leave the host unchanged.

Every test runs a real script in a real child process (no fakes): the walls under test are the
kernel's (netns, uid drop, rlimits) and the runner's audit-hook policy. Each script first records
its working directory in result.json, so a test can prove afterwards that the directory is gone
and that no process of that run survived.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from memtool.analysis.sandbox.local import LocalProcessSandbox
from memtool.analysis.sandbox.port import SandboxRun

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the local process sandbox needs a POSIX host")

RECORD_CWD = "import json, os\njson.dump({'cwd': os.getcwd()}, open('result.json', 'w'))\n"


@pytest.fixture(scope="module")
def sandbox() -> LocalProcessSandbox:
    return LocalProcessSandbox(cpu_seconds=10)


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


def test_a_normal_analysis_reads_data_and_returns_a_result_and_a_chart(sandbox: LocalProcessSandbox) -> None:
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
def test_host_files_cannot_be_read(sandbox: LocalProcessSandbox, attempt: str) -> None:
    run = _run(sandbox, attempt)

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


def test_sockets_are_refused(sandbox: LocalProcessSandbox) -> None:
    run = _run(sandbox, "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)")

    _forbidden(run, "network", "no network")


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


def test_subclass_walks_to_popen_are_refused(sandbox: LocalProcessSandbox) -> None:
    canary = Path("/tmp") / f"memtool-canary-{uuid.uuid4()}"
    script = f"""
popen = [c for c in object.__subclasses__() if c.__name__ == 'Popen'][0]
popen(['/usr/bin/touch', '{canary}'])
"""
    run = _run(sandbox, script)

    _forbidden(run, "starting a subprocess")
    assert not canary.exists()


def test_posixsubprocess_fork_exec_cannot_start_a_process(sandbox: LocalProcessSandbox) -> None:
    """_posixsubprocess.fork_exec raises no audit event; RLIMIT_NPROC=0 (after the uid drop) stops it."""
    canary = Path("/tmp") / f"memtool-canary-{uuid.uuid4()}"
    script = f"""
import sys
fork_exec = sys.modules['_posixsubprocess'].fork_exec  # loaded by matplotlib's import of subprocess
# CPython 3.11's signature, as subprocess.Popen calls it
errors_read, errors_write = os.pipe()
args = ([b'/usr/bin/touch', b'{canary}'], [b'/usr/bin/touch'], True, (), None, None,
        -1, -1, -1, -1, -1, -1, errors_read, errors_write, False, False, -1, None, None, None, -1, None, False)
for _ in range(50):
    fork_exec(*args)
"""
    run = _run(sandbox, script)

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
    run = _run(sandbox, "import time\nwhile True:\n    time.sleep(0.1)", timeout=3.0)

    assert run.ok is False and run.error_kind == "timeout"
    assert run.error == "the script ran longer than 3 s (wall clock) and was stopped"
    assert 3000 <= run.duration_ms < 8000


def test_a_busy_loop_is_stopped_by_the_cpu_limit() -> None:
    # the CPU clock starts with the interpreter, so 3 s leaves ~1.5 s for the loop itself
    sandbox = LocalProcessSandbox(cpu_seconds=3)
    run = _run(sandbox, "while True:\n    pass", timeout=30.0)

    assert run.ok is False and run.error_kind == "cpu_limit"
    assert run.error == "the script used more than 3 s of CPU time and was stopped"
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
