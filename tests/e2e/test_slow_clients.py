"""Slow clients cannot starve the local server (issue 21, item 4).

The finding: 20 connections that each sent a header byte every 2 s held all 16 workers, and
/health took 29 s, then timed out. Now one reader thread reads every request in full before a
worker sees it, against a per-request deadline: here 50 clients trickle (25 their headers, 25
their body), more than three times the workers, while /health keeps answering at once; each
trickler is answered 408 at the deadline, and none of them reached a handler.
"""

from __future__ import annotations

import select
import socket
import statistics
import threading
import time
from typing import Any

import pytest

from memtool.runtime.local_api import LocalApiGateway, serve_http
from memtool.runtime.template import load_template

from tests.support import ROOT

pytestmark = pytest.mark.slow

TRICKLERS = 50
WORKERS = 16
DEADLINE = 3.0  # seconds (10 s in `memtool serve`): short, so the test need not wait 10 s
BYTE_EVERY = 1.0  # seconds between one trickler's bytes


def health(port: int) -> tuple[int, float]:
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return int(reply.split(b" ", 2)[1]), time.perf_counter() - started


class Trickler:
    """One slow client: a request that would be valid, sent a byte every BYTE_EVERY seconds."""

    def __init__(self, port: int, in_body: bool) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.connected = time.monotonic()
        if in_body:  # the headers arrive at once; the 40-byte body never does
            self.sock.sendall(b"POST /memories HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 40\r\n\r\n{")
        else:  # a header line that never ends
            self.sock.sendall(b"POST /memories HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        self.sent = 1
        self.answer = b""
        self.answered_after: float | None = None

    def step(self) -> None:
        """Read the answer if it has come; else send the next byte."""
        if self.answered_after is not None:
            return
        if select.select([self.sock], [], [], 0)[0]:
            try:
                while chunk := self.sock.recv(65536):
                    self.answer += chunk
            except OSError:
                pass
            self.answered_after = time.monotonic() - self.connected
            self.sock.close()
            return
        try:
            self.sock.sendall(b"y")
            self.sent += 1
        except OSError:
            pass


def test_fifty_trickling_clients_hold_no_worker_and_health_answers_under_a_second():
    gateway = LocalApiGateway(load_template(ROOT / "template.yaml"), ROOT)
    holder: dict[str, Any] = {}
    http = serve_http(
        gateway,
        "127.0.0.1",
        0,
        workers=WORKERS,
        request_deadline=DEADLINE,
        special_routes={("GET", "/health"): lambda: {"status": "ok", "served": holder["http"].stats.served}},
    )
    holder["http"] = http
    port = http.server_address[1]
    try:
        tricklers = [Trickler(port, in_body=bool(i % 2)) for i in range(TRICKLERS)]
        done = threading.Event()

        def trickle() -> None:
            while not done.is_set() and any(t.answered_after is None for t in tricklers):
                for trickler in tricklers:
                    trickler.step()
                done.wait(BYTE_EVERY / 10 if any(t.answered_after is not None for t in tricklers) else BYTE_EVERY)

        feeder = threading.Thread(target=trickle)
        feeder.start()
        # While every trickler is still sending: /health, again and again
        samples: list[tuple[int, float]] = []
        first_connected = min(t.connected for t in tricklers)
        while time.monotonic() - first_connected < DEADLINE - 0.3:
            samples.append(health(port))
            time.sleep(0.1)
        feeder.join(timeout=DEADLINE + 10)
        done.set()

        latencies = [seconds for _, seconds in samples]
        print(  # the measurement the issue asks for (pytest -s shows it)
            f"/health under {TRICKLERS} tricklers: {len(samples)} answers, median {statistics.median(latencies) * 1000:.1f} ms, "
            f"max {max(latencies) * 1000:.1f} ms"
        )
        assert len(samples) >= 5 and {status for status, _ in samples} == {200}
        assert max(latencies) < 1.0  # the isolation's bound, with a wide margin: each takes a few ms
        # The tricklers were still trickling during all of it, past what a per-read timeout would allow ...
        assert all(t.sent >= 2 for t in tricklers)
        # ... and each was answered 408 at the deadline and closed: none waits longer, none was dispatched
        assert all(t.answer.startswith(b"HTTP/1.0 408 ") for t in tricklers), {t.answer[:40] for t in tricklers}
        assert all(DEADLINE - 0.2 <= (t.answered_after or 0) < DEADLINE + 2 for t in tricklers)
        assert http.stats.served == len(samples) + TRICKLERS  # one answer each, nothing else
        assert http.stats.in_flight == 0 and http.stats.server_errors == 0
    finally:
        http.stop()
