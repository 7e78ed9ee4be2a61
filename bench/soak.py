"""Soak the local runtime as a user would: thousands of asks and writes over HTTP, measured.

Starts `memtool serve` as a child process (the default SQLite store, the real HTTP server,
AskFlow on moto's engine, the demo warehouse), then:

1. **Memory under load.** Sends ``--asks`` asks and ``--writes`` memory writes, interleaved, from
   ``--clients`` concurrent clients, sampling the server's RSS (``/proc/<pid>/status``) as it
   goes. Reports RSS after start, after a warm-up, and at the end; the target is growth below
   150 MB over 2,000 asks and 5,000 writes.
2. **Write latency against store size.** Measures the p50 of ``--probe`` single-client writes
   when the store holds about 100 memories and again at 10,000 (three rounds each, on a server
   whose indexer has caught up; the median round counts); the target is a ratio within 1.5×.
3. **Correctness while soaking.** Counts 5xx answers and connection errors (target: 0), and
   checks at the end that the indexer delivered everything (no lag, no dead letters).

    python bench/soak.py [--asks 2000 --writes 5000 --clients 8] [--out bench/results/soak.md]

Not a test: figures vary with the machine, so the README reports them with how they were taken.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
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
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


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


def start_server(home: Path, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-m", "memtool.cli", "serve", "--port", str(port), "--home", str(home)],
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
    return statistics.median(_write_p50(port, tenant, count) for _ in range(rounds) if settle(port) is None)


def _write_p50(port: int, tenant: str, count: int) -> float:
    timings = []
    for n in range(count):
        status, _, elapsed = request(
            port, "POST", "/memories", {"kind": "episodic", "content": f"probe write {n} {uuid.uuid4().hex[:8]}"}, tenant=tenant, user="probe"
        )
        assert status == 201, status
        timings.append(elapsed)
    return statistics.median(timings)


def fill(port: int, tenant: str, count: int, clients: int) -> None:
    def one(n: int) -> None:
        status, _, _ = request(port, "POST", "/memories", {"kind": "episodic", "content": f"filler {n} {uuid.uuid4().hex}"}, tenant=tenant, user=f"u{n % 50}")
        assert status == 201, status

    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(one, range(count)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--asks", type=int, default=2000)
    parser.add_argument("--writes", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--probe", type=int, default=60, help="writes per latency probe round (3 rounds)")
    parser.add_argument("--large", type=int, default=10_000, help="store size of the second latency probe")
    parser.add_argument("--scale", type=float, default=1.0, help="demo warehouse scale")
    parser.add_argument("--out", type=Path, help="write the report (markdown) here too")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="memtool-soak-"))
    port = int(os.environ.get("SOAK_PORT", "0")) or _free_port()
    env = {"MEMTOOL_WAREHOUSE_SCALE": str(args.scale), "MEMTOOL_TODAY": date.today().isoformat()}
    print(f"starting memtool serve on port {port} (home {home}) …", flush=True)
    server = start_server(home, port, env)
    lines: list[str] = []
    try:
        started_rss = rss_mb(server.pid)
        # ---- latency against store size ------------------------------------------------
        probe_tenant = f"probe-{uuid.uuid4().hex[:6]}"
        # The first probe's rounds write 3 × probe memories: fill so that they are centred on 100.
        fill(port, probe_tenant, max(0, 100 - (3 * args.probe) // 2), args.clients)
        small = write_p50(port, probe_tenant, args.probe)
        print(f"write p50 at ~100 memories: {small:.2f} ms", flush=True)

        # ---- load: asks and writes, interleaved ----------------------------------------
        tally = Tally()
        samples: list[tuple[int, float]] = []
        done = 0
        done_lock = threading.Lock()
        total = args.asks + args.writes
        # Interleaved evenly: operation i is an ask when the running share of asks steps up.
        operations = [
            "ask" if (i + 1) * args.asks // total > i * args.asks // total else "write" for i in range(total)
        ]
        warm_rss: float | None = None
        load_tenant = f"soak-{uuid.uuid4().hex[:6]}"

        def operate(index_op: tuple[int, str]) -> None:
            nonlocal done, warm_rss
            index, op = index_op
            user = f"u{index % 20}"
            try:
                if op == "ask":
                    status, _, _ = request(port, "POST", "/ask", {"question": QUESTIONS[index % len(QUESTIONS)], "session_id": f"s-{user}"}, tenant=load_tenant, user=user)
                else:
                    status, _, _ = request(port, "POST", "/memories", {"kind": "episodic", "content": f"soak note {index} {uuid.uuid4().hex[:10]}"}, tenant=load_tenant, user=user)
            except OSError:
                status = None
            tally.add(status)
            with done_lock:
                done += 1
                if done == 200:
                    warm_rss = rss_mb(server.pid)
                if done % 500 == 0:
                    samples.append((done, rss_mb(server.pid)))
                    print(f"  {done:>6} operations, RSS {samples[-1][1]:.0f} MB", flush=True)

        load_started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            list(pool.map(operate, enumerate(operations)))
        load_seconds = time.perf_counter() - load_started
        end_rss = rss_mb(server.pid)

        # ---- latency at the large size --------------------------------------------------
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

    growth_from_start = end_rss - started_rss
    growth_from_warm = end_rss - (warm_rss or started_rss)
    lines += [
        "# Local runtime soak",
        "",
        f"`python bench/soak.py --asks {args.asks} --writes {args.writes} --clients {args.clients}` on "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {date.today()}: "
        "`memtool serve` in a child process (SQLite store, demo warehouse at scale "
        f"{args.scale}), loaded over HTTP from {args.clients} concurrent clients; RSS read from /proc.",
        "",
        "| figure | value | target |",
        "|---|---|---|",
        f"| operations | {args.asks:,} asks + {args.writes:,} writes in {load_seconds:.0f} s | |",
        f"| RSS after start | {started_rss:.0f} MB | |",
        f"| RSS after 200 operations (warm) | {(warm_rss or 0):.0f} MB | |",
        f"| RSS at the end of the load | {end_rss:.0f} MB | |",
        f"| RSS growth over the load (from start / from warm) | {growth_from_start:.0f} MB / {growth_from_warm:.0f} MB | < 150 MB |",
        f"| RSS after filling to {args.large:,} memories | {final_rss:.0f} MB | |",
        f"| write p50 at ~100 memories | {small:.2f} ms | |",
        f"| write p50 at ~{args.large:,} memories | {large:.2f} ms | |",
        f"| ratio | {large / small:.2f}× | ≤ 1.5× |",
        f"| 5xx answers / connection errors | {tally.server_errors} / {tally.connection_errors} | 0 / 0 |",
        f"| statuses | {json.dumps(dict(sorted(tally.statuses.items())))} | |",
        f"| indexer at the end | pending {health.get('indexer', {}).get('pending')}, dead letters {health.get('indexer', {}).get('dead_letters')}, delivered {health.get('indexer', {}).get('delivered')} | 0 pending, 0 dead |",
        "",
        "RSS samples (operations → MB): " + ", ".join(f"{n}→{mb:.0f}" for n, mb in samples),
    ]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report, encoding="utf-8")
    return 0


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
