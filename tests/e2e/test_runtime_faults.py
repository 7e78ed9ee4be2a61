"""The local runtime under faults and load, over real HTTP: the invariants `bench/soak.py` measures.

- 20 concurrent PATCHes with one expected_version: exactly one 200 and 19 × 409, every trial,
  while another tenant's acknowledged writes all survive.
- `kill -9` during a stream of writes: after a restart every acknowledged write is there and
  searchable.
- 100 concurrent clients: no connection reset, no 5xx.
- A stop finishes the requests in flight; moto's management API and CORS are closed; /health
  names no path and no endpoint.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from memtool.runtime.local import LocalRuntime, free_port

from tests.support import ROOT

pytestmark = pytest.mark.slow


def call(base: str, method: str, path: str, body: Any = None, *, tenant: str, user: str = "li", timeout: float = 60) -> tuple[int, Any]:
    """One request on its own connection (a reset raises, so a test sees it)."""
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        payload = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {"X-Memtool-Tenant": tenant, "X-Memtool-User": user, "Content-Type": "application/json"}
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        raw = response.read()
        return response.status, (json.loads(raw) if raw else None)
    finally:
        connection.close()


@pytest.fixture
def runtime_env(demo_warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The session's small demo warehouse and a fixed today, for in-process and child runtimes."""
    env = {"MEMTOOL_WAREHOUSE_PATH": str(demo_warehouse), "MEMTOOL_TODAY": "2026-11-29"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def runtime(tmp_path: Path, runtime_env: dict[str, str]):
    with LocalRuntime(home=tmp_path / "home", port=0, root=ROOT) as started:
        yield started


@pytest.fixture(params=["sqlite", "dynamodb"])
def any_store_runtime(request: pytest.FixtureRequest, tmp_path: Path, runtime_env: dict[str, str]):
    """The default SQLite store, and the DynamoDB adapter on the locked-down moto server."""
    with LocalRuntime(home=tmp_path / "home", port=0, root=ROOT, store=request.param) as started:
        yield started


def test_concurrent_patches_have_exactly_one_winner_and_spare_other_tenants(any_store_runtime):
    base = any_store_runtime.api_url
    bystander = f"bystander-{uuid.uuid4().hex[:6]}"
    acknowledged: list[str] = []
    refused: list[tuple[int, Any]] = []  # asserted in the test's thread: an assert in a thread proves nothing
    stop = threading.Event()

    def other_tenant_writes() -> None:
        n = 0
        while not stop.is_set():
            status, body = call(base, "POST", "/memories", {"kind": "episodic", "content": f"note {n}"}, tenant=bystander)
            if status != 201:
                refused.append((status, body))
            else:
                acknowledged.append(body["memory"]["id"])
            n += 1

    writer = threading.Thread(target=other_tenant_writes)
    writer.start()
    try:
        with ThreadPoolExecutor(max_workers=20) as pool:
            # 20 of 20 trials on the default store; moto's DynamoDB copies its table at every
            # transaction, so its (slower) check runs fewer.
            for trial in range(20 if any_store_runtime.store_kind == "sqlite" else 3):
                tenant = f"race-{trial}-{uuid.uuid4().hex[:4]}"
                status, created = call(base, "POST", "/memories", {"kind": "episodic", "content": "v1"}, tenant=tenant)
                assert status == 201
                memory_id = created["memory"]["id"]
                barrier = threading.Barrier(20)

                def patch(i: int, memory_id: str = memory_id, tenant: str = tenant, barrier=barrier) -> int:
                    barrier.wait()
                    status, _ = call(
                        base, "PATCH", f"/memories/{memory_id}", {"expected_version": 1, "content": f"edit {i}"}, tenant=tenant
                    )
                    return status

                statuses = sorted(pool.map(patch, range(20)))
                # Then exactly one edit won and the other 19 were told they were stale
                assert statuses == [200] + [409] * 19, f"trial {trial}: {statuses}"
                status, current = call(base, "GET", f"/memories/{memory_id}?history=true", tenant=tenant)
                assert current["memory"]["version"] == 2
                assert [h["version"] for h in current["history"]] == [1, 2]
    finally:
        stop.set()
        writer.join()
    # And the other tenant lost none of its acknowledged writes
    assert refused == []
    assert len(acknowledged) >= 5  # the other tenant really was writing during the races
    for memory_id in acknowledged:
        status, _ = call(base, "GET", f"/memories/{memory_id}", tenant=bystander)
        assert status == 200, memory_id


def test_concurrent_requests_never_act_as_each_other(runtime):
    """Powertools keeps the current event on a class; served on threads, requests must not mix."""
    base = runtime.api_url
    tenants = [f"iso-{n}-{uuid.uuid4().hex[:4]}" for n in range(20)]
    barrier = threading.Barrier(40)

    def write(i: int) -> tuple[str, str, str]:
        tenant = tenants[i % 20]
        barrier.wait()
        status, body = call(base, "POST", "/memories", {"kind": "episodic", "content": f"mine {tenant}"}, tenant=tenant, user=f"user{i}")
        assert status == 201, body
        return tenant, f"user{i}", body["memory"]["id"]

    with ThreadPoolExecutor(max_workers=40) as pool:
        written = list(pool.map(write, range(40)))
    for tenant, user, memory_id in written:
        status, body = call(base, "GET", f"/memories/{memory_id}", tenant=tenant, user=user)
        assert status == 200, (tenant, memory_id)
        assert (body["memory"]["tenant"], body["memory"]["owner"], body["memory"]["content"]) == (tenant, user, f"mine {tenant}")


def test_a_hundred_concurrent_clients_get_answers_not_resets(runtime):
    base = runtime.api_url
    tenant = f"crowd-{uuid.uuid4().hex[:6]}"
    barrier = threading.Barrier(100)

    def client(i: int) -> int:
        barrier.wait()
        if i % 20 == 0:
            status, _ = call(base, "POST", "/ask", {"question": "上个月净收入是多少"}, tenant=tenant, user=f"u{i}")
        elif i % 2:
            status, _ = call(base, "POST", "/memories", {"kind": "episodic", "content": f"crowd {i}"}, tenant=tenant, user=f"u{i}")
        else:
            status, _ = call(base, "GET", "/memories?limit=5", tenant=tenant, user=f"u{i}")
        return status

    with ThreadPoolExecutor(max_workers=100) as pool:
        statuses = list(pool.map(client, range(100)))  # a reset would raise here
    assert all(status < 500 for status in statuses), statuses
    assert statuses.count(201) == 50 and statuses.count(200) == 50


def _serve(home: Path, port: int, env: dict[str, str]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "memtool.cli", "serve", "--port", str(port), "--home", str(home)],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"memtool serve exited: {process.stdout.read() if process.stdout else ''}")
        try:
            status, _ = call(f"http://127.0.0.1:{port}", "GET", "/health", tenant="x", timeout=2)
            if status == 200:
                return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError("memtool serve did not come up")


def test_kill_9_loses_no_acknowledged_write(tmp_path, runtime_env):
    home = tmp_path / "home"
    port = free_port()
    server = _serve(home, port, runtime_env)
    base = f"http://127.0.0.1:{port}"
    tenant = f"crash-{uuid.uuid4().hex[:6]}"
    acknowledged: dict[str, str] = {}
    lock = threading.Lock()

    def writer(worker: int) -> None:
        n = 0
        while True:
            word = f"zq{worker}x{n}w{uuid.uuid4().hex[:6]}"
            try:
                status, body = call(base, "POST", "/memories", {"kind": "episodic", "content": f"crash note {word}"}, tenant=tenant, timeout=10)
            except OSError:
                return  # the server is gone
            if status == 201:
                with lock:
                    acknowledged[body["memory"]["id"]] = word
            n += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    # When the server is killed mid-stream, after at least 60 acknowledged writes
    deadline = time.monotonic() + 60
    while len(acknowledged) < 60:
        assert time.monotonic() < deadline, f"only {len(acknowledged)} writes acknowledged in 60 s"
        time.sleep(0.02)
    os.kill(server.pid, signal.SIGKILL)
    server.wait(timeout=10)
    for thread in threads:
        thread.join(timeout=15)
    if server.stdout:
        server.stdout.close()

    # Then a restarted runtime has every acknowledged write, and indexes and finds each one
    with LocalRuntime(home=home, port=0, root=ROOT) as again:
        deadline = time.monotonic() + 60
        while again.health()["indexer"]["pending"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert again.health()["indexer"]["pending"] == 0
        assert again.health()["indexer"]["dead_letters"] == 0
        for memory_id, word in acknowledged.items():
            status, body = call(again.api_url, "GET", f"/memories/{memory_id}", tenant=tenant)
            assert status == 200, memory_id
            assert body["memory"]["index_state"] == "indexed", memory_id
        for memory_id, word in list(acknowledged.items())[:: max(1, len(acknowledged) // 15)]:
            status, found = call(again.api_url, "GET", f"/memories/search?q={word}&route=deep_analysis_workflow", tenant=tenant)
            assert status == 200
            assert found["coverage"]["index_available"] is True
            assert memory_id in [item["memory"]["id"] for item in found["items"]], word


def test_the_console_is_quiet_and_a_stop_is_graceful(tmp_path, runtime_env):
    port = free_port()
    server = _serve(tmp_path / "home", port, runtime_env)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(5):
            call(base, "POST", "/memories", {"kind": "nope", "content": "x"}, tenant="quiet")  # 400
            call(base, "POST", "/feedback", {"episode_id": "ep_x", "rating": 1}, tenant="quiet")  # 404
            call(base, "GET", "/memories/mem_missing", tenant="quiet")  # 404
        # A request in flight when the stop arrives still gets its answer
        answer: dict[str, Any] = {}
        asking = threading.Thread(
            target=lambda: answer.update(zip(("status", "body"), call(base, "POST", "/ask", {"question": "上个月各渠道的净收入"}, tenant="quiet"))),
        )
        asking.start()
        time.sleep(0.3)
        server.send_signal(signal.SIGTERM)
        asking.join(timeout=60)
        assert server.wait(timeout=60) == 0
        assert answer.get("status") == 200, answer
        output = server.stdout.read() if server.stdout else ""
    finally:
        if server.poll() is None:
            server.kill()
    lines = [line for line in output.splitlines() if line.strip()]
    # The banner and the stop lines only: no request lines, no JSON log or metric dumps, no ERROR
    assert not any(line.lstrip().startswith("{") for line in lines), output
    assert "ERROR" not in output and "Traceback" not in output, output
    assert len(lines) <= 12, output


def test_moto_is_closed_and_health_tells_no_internals(runtime):
    import urllib.error
    import urllib.request

    moto = runtime._moto.endpoint
    for path in ("/moto-api/data.json", "/moto-api/"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(moto + path, timeout=5)
        assert refused.value.code == 404
    reset = urllib.request.Request(moto + "/moto-api/reset", method="POST")
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(reset, timeout=5)
    preflight = urllib.request.Request(moto + "/", method="OPTIONS", headers={"Origin": "http://evil.example"})
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(preflight, timeout=5)

    status, health = call(runtime.api_url, "GET", "/health", tenant="x")
    text = json.dumps(health)
    assert status == 200 and health["status"] == "ok" and health["store"] == "sqlite"
    assert "http://" not in text and "/" not in text  # no endpoint, no file path
    assert set(health["indexer"]) >= {"delivered", "pending", "dead_letters", "lag_seconds"}
