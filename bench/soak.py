"""Soak the local runtime as a user would: thousands of asks and writes over HTTP, measured.

Starts `memtool serve` as a child process (the default SQLite store, the real HTTP server,
AskFlow on moto's engine, the demo warehouse; through ``bench/soak_server.py``, which can hold a
heap profiler), then:

1. **Memory under load.** Sends ``--asks`` asks and ``--writes`` memory writes, interleaved, from
   ``--clients`` concurrent clients. The asks vary as a team's would: ``--tenants`` tenants,
   ``--users`` users spread over them, each user's session replaced every ``--turns`` asks (so
   per-user and per-session state is exercised, not one hot session). The server's RSS
   (``/proc/<pid>/status`` VmRSS, with RssAnon beside it) is read after start, after a warm-up of
   200 asks, at every 1,000 asks, and at the end. The target is growth below 40 MB from 1,000 to
   5,000 asks.
2. **Write latency against store size.** Measures the p50 of ``--probe`` single-client writes
   when the store holds about 100 memories and again at ``--large`` (three rounds each, on a
   server whose indexer has caught up; the median round counts); the target is a ratio within 1.5×.
3. **Correctness while soaking.** Counts 5xx answers and connection errors (target: 0), and
   checks at the end that the indexer delivered everything (no lag, no dead letters).

``--profile`` starts ``tracemalloc`` inside the server and takes a snapshot at each of
``--snapshots`` asks (default 500 and 2,000); the report gets the top lines that grew between the
first and the last (``Snapshot.compare_to(..., "lineno")``), with the top 30 and the callers of
the top 10 in ``--profile-out``. Profiling slows the server several-fold, and its own traces
count in the RSS: take RSS figures from a run without it.

    python bench/soak.py [--asks 5000 --writes 2000 --clients 8] [--out bench/results/soak.md]
    python bench/soak.py --asks 2000 --writes 0 --profile --profile-out bench/results/soak_profile.md
    python bench/soak.py --asks 2000 --profile --trace-from 1000 --snapshots 1000,2000   # traces only the second half

Not a test: figures vary with the machine, so the README reports them with how they were taken.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = [
    "上个月各渠道的净收入",
    "net revenue by channel last month",
    "top 5 cities by net revenue last month",
    "今年每月的退款率",
    "上个月净收入是多少",
    "gross revenue by month in 2025",
    "上个月上海的订单数",
    "净收入怎么算？",
    # the deep route: the Map, the sandbox and the ML tools under the same load
    "为什么9月武汉的净收入下降了",
    "2026年6月退款为什么异常高",
]


def request(port: int, method: str, path: str, body: Any = None, *, tenant: str, user: str) -> tuple[int, Any, float]:
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        payload = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        connection.request(
            method,
            path,
            body=payload,
            headers={"X-Memtool-Tenant": tenant, "X-Memtool-User": user, "Content-Type": "application/json"},
        )
        response = connection.getresponse()
        raw = response.read()
        return response.status, (json.loads(raw) if raw else None), (time.perf_counter() - started) * 1000
    finally:
        connection.close()


def rss_mb(pid: int) -> float:
    return _status_mb(pid, "VmRSS")


def anon_mb(pid: int) -> float:
    """The anonymous part of the RSS (the heap): file pages (SQLite's, DuckDB's, mapped libraries) excluded."""
    return _status_mb(pid, "RssAnon")


def _status_mb(pid: int, field_name: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field_name}")


@dataclass
class Tally:
    statuses: dict[int, int] = field(default_factory=dict)
    connection_errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, status: int | None) -> None:
        with self.lock:
            if status is None:
                self.connection_errors += 1
            else:
                self.statuses[status] = self.statuses.get(status, 0) + 1

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)


def start_server(home: Path, port: int, env: dict[str, str], wrap: str = "") -> subprocess.Popen[bytes]:
    """Start bench/soak_server.py; ``wrap`` is a command line that runs the script instead of this
    interpreter (a native heap profiler: ``python -m memray run --native -o FILE``)."""
    runner = shlex.split(wrap) if wrap else [sys.executable]
    process = subprocess.Popen(
        [*runner, str(ROOT / "bench" / "soak_server.py"), "serve", "--port", str(port), "--home", str(home)],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 600  # the first start builds the demo warehouse
    while time.monotonic() < deadline:
        try:
            if request(port, "GET", "/health", tenant="bench", user="bench")[0] == 200:
                return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("memtool serve did not start")


def settle(port: int, timeout: float = 300) -> None:
    """Wait until the indexer has delivered everything: a probe measures writes, not a backlog."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not request(port, "GET", "/health", tenant="bench", user="bench")[1]["indexer"]["pending"]:
            return
        time.sleep(0.2)


def write_p50(port: int, tenant: str, count: int, rounds: int = 3) -> float:
    """The median of ``rounds`` p50s of ``count`` sequential writes, each round on a settled server."""
    p50s = []
    for _ in range(rounds):
        settle(port)
        p50s.append(_write_p50(port, tenant, count))
    return statistics.median(p50s)


def _write_p50(port: int, tenant: str, count: int) -> float:
    timings = []
    for n in range(count):
        body = {"kind": "episodic", "content": f"probe write {n} {uuid.uuid4().hex[:8]}"}
        status, _, elapsed = request(port, "POST", "/memories", body, tenant=tenant, user="probe")
        assert status == 201, status
        timings.append(elapsed)
    return statistics.median(timings)


def fill(port: int, tenant: str, count: int, clients: int) -> None:
    def one(n: int) -> None:
        body = {"kind": "episodic", "content": f"filler {n} {uuid.uuid4().hex}"}
        status, _, _ = request(port, "POST", "/memories", body, tenant=tenant, user=f"u{n % 50}")
        assert status == 201, status

    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(one, range(count)))


class Profiler:
    """Asks the server's profiler (bench/soak_server.py) for tracemalloc snapshots and compares them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.taken: dict[int, Path] = {}
        self.threads: list[threading.Thread] = []

    def snapshot(self, asks: int) -> None:
        """Request one in the background: the load goes on while the server writes it."""
        (self.folder / f"asks-{asks}.request").write_text("")
        thread = threading.Thread(target=self._await, args=(asks,), daemon=True)
        thread.start()
        self.threads.append(thread)

    def _await(self, asks: int) -> None:
        path = self.folder / f"asks-{asks}.snapshot"
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and not path.exists():
            time.sleep(0.5)
        if path.exists():
            self.taken[asks] = path

    def report(self, top: int = 30, callers: int = 10) -> tuple[list[str], list[str]]:
        """The top lines that grew from the first snapshot to the last: (a top-10 table, the full detail)."""
        import tracemalloc

        for thread in self.threads:
            thread.join(timeout=900)
        if len(self.taken) < 2:
            return ["(fewer than two snapshots were taken)"], []
        first_at, last_at = min(self.taken), max(self.taken)
        first = tracemalloc.Snapshot.load(str(self.taken[first_at]))
        last = tracemalloc.Snapshot.load(str(self.taken[last_at]))
        by_line = last.compare_to(first, "lineno")
        total_first = sum(stat.size for stat in first.statistics("filename"))
        total_last = sum(stat.size for stat in last.statistics("filename"))
        heading = f"tracemalloc, asks {first_at:,} → {last_at:,}: traced heap {total_first / 2**20:.1f} → {total_last / 2**20:.1f} MB"

        def row(stat: Any) -> str:
            frame = stat.traceback[0]
            return (
                f"| `{_short(frame.filename)}:{frame.lineno}` | {stat.size_diff / 2**10:+,.0f} KiB | {stat.count_diff:+,} |"
                f" {stat.size / 2**10:,.0f} KiB |"
            )

        table = ["| line | grew | blocks | held at the end |", "|---|---:|---:|---:|"]
        summary = [heading, "", *table, *(row(stat) for stat in by_line[:10])]
        detail = [f"## {heading}", "", "### Top 30 by line", "", *table, *(row(stat) for stat in by_line[:top])]
        detail += ["", f"### Callers of the top {callers} (by traceback)", ""]
        by_trace = {stat.traceback: stat for stat in last.compare_to(first, "traceback")}
        for stat in by_line[:callers]:
            frame = stat.traceback[0]
            # the tracebacks that end on this line, the biggest growth first
            stacks = sorted(
                (s for tb, s in by_trace.items() if tb[-1].filename == frame.filename and tb[-1].lineno == frame.lineno),
                key=lambda s: -s.size_diff,
            )[:2]
            detail.append(f"- `{_short(frame.filename)}:{frame.lineno}` ({stat.size_diff / 2**10:+,.0f} KiB)")
            for found in stacks:
                chain = " ← ".join(f"{_short(f.filename)}:{f.lineno}" for f in reversed(found.traceback))
                detail.append(f"  - {found.size_diff / 2**10:+,.0f} KiB: {chain}")
        return summary, detail


def _take_breakdown(folder: Path, asks: int, into: dict[int, dict[str, Any]]) -> None:
    """Ask the server (bench/soak_server.py) where its memory sits, and wait for the answer."""
    (folder / f"asks-{asks}.breakdown").write_text("")
    answer = folder / f"asks-{asks}.json"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not answer.exists():
        time.sleep(0.2)
    if answer.exists():
        into[asks] = json.loads(answer.read_text())


BREAKDOWN_ROWS = [
    ("VmRSS", lambda b: float(b["status"]["VmRSS"].split()[0]) / 1024),
    ("RssAnon", lambda b: float(b["status"]["RssAnon"].split()[0]) / 1024),
    ("smaps: brk heap", lambda b: b["smaps_mb"].get("heap", 0.0)),
    ("smaps: anonymous maps", lambda b: b["smaps_mb"].get("anonymous", 0.0)),
    ("smaps: files", lambda b: b["smaps_mb"].get("file", 0.0)),
    ("glibc: arenas (sbrk + arena maps)", lambda b: b["glibc"]["arena_mb"]),
    ("glibc: in use", lambda b: b["glibc"]["in_use_mb"]),
    ("glibc: free in arenas", lambda b: b["glibc"]["free_mb"]),
    ("glibc: mmapped blocks", lambda b: b["glibc"]["mmapped_mb"]),
    ("jemalloc (DuckDB): allocated", lambda b: b["jemalloc"].get("allocated_mb", 0.0)),
    ("jemalloc (DuckDB): resident", lambda b: b["jemalloc"].get("resident_mb", 0.0)),
    ("Python: allocated blocks (thousands)", lambda b: b["python_blocks"] / 1000),
    ("index: live documents (thousands)", lambda b: b["index"]["documents"] / 1000),
    ("index: slots (thousands)", lambda b: b["index"]["slots"] / 1000),
    ("index: arrays", lambda b: b["index"]["arrays_mb"]),
]


def breakdown_table(breakdowns: dict[int, dict[str, Any]]) -> list[str]:
    """One row per figure (MB unless named), one column per mark, and the growth first to last."""
    marks = sorted(breakdowns)
    lines = [
        "| figure | " + " | ".join(f"{m:,} asks" for m in marks) + " | growth |",
        "|---|" + "---:|" * (len(marks) + 1),
    ]
    for name, read in BREAKDOWN_ROWS:
        try:
            values = [read(breakdowns[m]) for m in marks]
        except (KeyError, TypeError, ValueError):
            continue
        lines.append(f"| {name} | " + " | ".join(f"{v:.1f}" for v in values) + f" | {values[-1] - values[0]:+.1f} |")
    return lines


def _short(filename: str) -> str:
    for marker in ("site-packages/", "/memtool/", "lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1] if marker != "/memtool/" else "memtool/" + filename.split(marker, 1)[1]
    return filename


def ask_marks(asks: int) -> list[int]:
    """Where the load reads RSS: after a 200-ask warm-up, at every 1,000 asks, and at the end."""
    return sorted({m for m in (200, *range(1000, asks + 1, 1000), asks) if 0 < m <= asks})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--asks", type=int, default=5000)
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--tenants", type=int, default=3, help="tenants the asks and writes are spread over")
    parser.add_argument("--users", type=int, default=60, help="users, spread over the tenants")
    parser.add_argument("--turns", type=int, default=5, help="asks per session before the user starts a new one")
    parser.add_argument("--probe", type=int, default=60, help="writes per latency probe round (3 rounds)")
    parser.add_argument("--large", type=int, default=10_000, help="store size of the second latency probe")
    parser.add_argument("--scale", type=float, default=1.0, help="demo warehouse scale")
    parser.add_argument("--profile", action="store_true", help="tracemalloc in the server; snapshots at --snapshots asks")
    parser.add_argument("--snapshots", default="500,2000", help="asks at which the profiler takes a snapshot")
    parser.add_argument(
        "--breakdown", action="store_true", help="at every RSS mark, where the server's memory sits (no tracemalloc unless --profile)"
    )
    parser.add_argument(
        "--trace-from", type=int, default=0, help="with --profile: start tracemalloc only at this many asks (the load runs at full speed before it)"
    )
    parser.add_argument("--profile-out", type=Path, help="the profile's top 30 and its callers (markdown)")
    parser.add_argument(
        "--wrap", default="", help="run the server script under this command (a native profiler: 'python -m memray run --native -o F')"
    )
    parser.add_argument("--skip-probes", action="store_true", help="only the load (no write-latency probes)")
    parser.add_argument("--out", type=Path, help="write the report (markdown) here too")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="memtool-soak-"))
    port = int(os.environ.get("SOAK_PORT", "0")) or _free_port()
    env = {"MEMTOOL_WAREHOUSE_SCALE": str(args.scale), "MEMTOOL_TODAY": date.today().isoformat()}
    profiler: Profiler | None = None
    breakdowns: dict[int, dict[str, Any]] = {}
    breakdown_dir = home / "profile"
    if args.breakdown:
        breakdown_dir.mkdir(parents=True, exist_ok=True)
        env["SOAK_PROFILE_DIR"] = str(breakdown_dir)
        env["SOAK_TRACE"] = "1" if args.profile else "0"
    if args.profile:
        profiler = Profiler(home / "profile")
        profiler.folder.mkdir(parents=True, exist_ok=True)
        env["SOAK_PROFILE_DIR"] = str(profiler.folder)
        env["SOAK_TRACE"] = "late" if args.trace_from else "1"
    snapshot_at = {int(n) for n in args.snapshots.split(",") if n.strip()} if profiler else set()
    print(f"starting memtool serve on port {port} (home {home}) …", flush=True)
    wall_started = time.time()
    server = start_server(home, port, env, args.wrap)
    lines: list[str] = []
    small = large = float("nan")
    marks = ask_marks(args.asks)
    at_mark: dict[int, tuple[float, float, float]] = {}  # asks -> (RSS, RssAnon, seconds into the load)
    try:
        started_rss = rss_mb(server.pid)
        probe_tenant = f"probe-{uuid.uuid4().hex[:6]}"
        if not args.skip_probes:
            # ---- latency against store size ---------------------------------------------
            # The first probe's rounds write 3 × probe memories: fill so that they are centred on 100.
            fill(port, probe_tenant, max(0, 100 - (3 * args.probe) // 2), args.clients)
            small = write_p50(port, probe_tenant, args.probe)
            print(f"write p50 at ~100 memories: {small:.2f} ms", flush=True)

        # ---- load: asks and writes, interleaved ----------------------------------------
        tally = Tally()
        samples: list[tuple[int, float]] = []
        done = asks_done = 0
        done_lock = threading.Lock()
        total = args.asks + args.writes
        # Interleaved evenly: operation i is an ask when the running share of asks steps up.
        operations = ["ask" if (i + 1) * args.asks // total > i * args.asks // total else "write" for i in range(total)]
        run = uuid.uuid4().hex[:6]
        tenants = [f"soak{t}-{run}" for t in range(max(1, args.tenants))]
        asks_of: dict[int, int] = {}  # user -> asks sent, for its session number
        load_started = time.perf_counter()

        def operate(index_op: tuple[int, str]) -> None:
            nonlocal done, asks_done
            index, op = index_op
            user_number = index % max(1, args.users)
            tenant, user = tenants[user_number % len(tenants)], f"u{user_number}"
            try:
                if op == "ask":
                    with done_lock:
                        turn = asks_of[user_number] = asks_of.get(user_number, -1) + 1
                    session = f"s-{user}-{turn // max(1, args.turns)}"
                    question = QUESTIONS[(index + turn) % len(QUESTIONS)]
                    status, _, _ = request(port, "POST", "/ask", {"question": question, "session_id": session}, tenant=tenant, user=user)
                else:
                    body = {"kind": "episodic", "content": f"soak note {index} {uuid.uuid4().hex[:10]}"}
                    status, _, _ = request(port, "POST", "/memories", body, tenant=tenant, user=user)
            except OSError:
                status = None
            tally.add(status)
            with done_lock:
                done += 1
                if op == "ask":
                    asks_done += 1
                    if asks_done in marks:
                        at_mark[asks_done] = (rss_mb(server.pid), anon_mb(server.pid), time.perf_counter() - load_started)
                        print(f"  {asks_done:>6} asks ({done:,} operations), RSS {at_mark[asks_done][0]:.0f} MB", flush=True)
                        if args.breakdown:
                            threading.Thread(target=_take_breakdown, args=(breakdown_dir, asks_done, breakdowns), daemon=True).start()
                    if profiler is not None and args.trace_from and asks_done == args.trace_from:
                        (profiler.folder / "trace.start").write_text("")
                    if profiler is not None and asks_done in snapshot_at:
                        profiler.snapshot(asks_done)
                if done % 500 == 0:
                    samples.append((done, rss_mb(server.pid)))

        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            list(pool.map(operate, enumerate(operations)))
        load_seconds = time.perf_counter() - load_started
        end_rss = rss_mb(server.pid)
        profile_summary, profile_detail = profiler.report() if profiler is not None else ([], [])

        if not args.skip_probes:
            # ---- latency at the large size ----------------------------------------------
            have = 100 + args.writes + args.asks  # every ask also writes an episode (and a working turn)
            if have < args.large:
                fill(port, probe_tenant, args.large - have, args.clients)
            large = write_p50(port, probe_tenant, args.probe)
            print(f"write p50 at ~{args.large:,} memories: {large:.2f} ms", flush=True)

        deadline = time.monotonic() + 120
        health: dict[str, Any] = {}
        while time.monotonic() < deadline:
            health = request(port, "GET", "/health", tenant="bench", user="bench")[1]
            if not health["indexer"]["pending"]:
                break
            time.sleep(0.5)
        final_rss = rss_mb(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=120)

    load_average = os.getloadavg()
    indexer = health.get("indexer", {})
    first, last = (1000, args.asks) if args.asks >= 1000 else (marks[0], marks[-1])
    growth = at_mark[last][0] - at_mark[first][0] if first in at_mark and last in at_mark else float("nan")
    growth_anon = at_mark[last][1] - at_mark[first][1] if first in at_mark and last in at_mark else float("nan")
    per_thousand = growth / max(1, last - first) * 1000
    lines += [
        "# Local runtime soak",
        "",
        f"`python bench/soak.py --asks {args.asks} --writes {args.writes} --clients {args.clients} --tenants {args.tenants}"
        f" --users {args.users} --turns {args.turns}{' --profile' if profiler else ''}` on "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {date.today()}: "
        "`memtool serve` in a child process (SQLite store, demo warehouse at scale "
        f"{args.scale}), loaded over HTTP from {args.clients} concurrent clients: {len(QUESTIONS)} questions (the deep "
        f"route's two among them), {args.users} users over {args.tenants} tenants, a new session every {args.turns} asks "
        f"per user, writes interleaved; RSS (VmRSS, RssAnon) read from /proc. Wall time {time.time() - wall_started:.0f} s; "
        f"load average at the end {load_average[0]:.1f} / {load_average[1]:.1f} / {load_average[2]:.1f} (1 / 5 / 15 min; "
        "the cores are shared).",
        "",
        "| figure | value | target |",
        "|---|---|---|",
        f"| operations | {args.asks:,} asks + {args.writes:,} writes in {load_seconds:.0f} s | |",
        f"| RSS after start | {started_rss:.0f} MB | |",
        *(
            f"| RSS at {asks:,} asks ({seconds:.0f} s into the load) | {rss:.0f} MB (anonymous {anon:.0f} MB) | |"
            for asks, (rss, anon, seconds) in sorted(at_mark.items())
        ),
        f"| **RSS growth from {first:,} to {last:,} asks** | **{growth:.0f} MB** (anonymous {growth_anon:.0f} MB; "
        f"{per_thousand:.1f} MB per 1,000 asks) | < 40 MB |",
        f"| RSS at the end of the load / after filling to {args.large:,} memories | {end_rss:.0f} MB / {final_rss:.0f} MB | |",
    ]
    if not args.skip_probes:
        lines += [
            f"| write p50 at ~100 memories | {small:.2f} ms | |",
            f"| write p50 at ~{args.large:,} memories | {large:.2f} ms | |",
            f"| ratio | {large / small:.2f}× | ≤ 1.5× |",
        ]
    lines += [
        f"| 5xx answers / connection errors | {tally.server_errors} / {tally.connection_errors} | 0 / 0 |",
        f"| statuses | {json.dumps(dict(sorted(tally.statuses.items())))} | |",
        f"| indexer at the end | pending {indexer.get('pending')}, dead letters {indexer.get('dead_letters')},"
        f" delivered {indexer.get('delivered')} | 0 pending, 0 dead |",
        "",
        "RSS samples (operations → MB): " + ", ".join(f"{n}→{mb:.0f}" for n, mb in samples),
    ]
    if profile_summary:
        lines += ["", "## Heap profile (`--profile`)", "", *profile_summary]
    if breakdowns:
        lines += ["", "## Where the memory sits (`--breakdown`)", "", *breakdown_table(breakdowns)]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report, encoding="utf-8")
    if args.profile_out and profile_detail:
        args.profile_out.parent.mkdir(parents=True, exist_ok=True)
        args.profile_out.write_text("# Local runtime soak: heap profile\n\n" + "\n".join(profile_detail) + "\n", encoding="utf-8")
    return 0


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
