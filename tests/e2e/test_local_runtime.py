"""The embedded local runtime over real HTTP on 127.0.0.1: moto server mode, health, restarts."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from memtool.demo import ApiClient
from memtool.runtime.local import LocalRuntime, free_port

from tests.support import ROOT

pytestmark = pytest.mark.slow


def test_serve_answers_over_http_and_keeps_state_across_a_restart(tmp_path):
    home = tmp_path / "home"
    # Given a runtime on the default store, started on a free loopback port
    with LocalRuntime(home=home, port=free_port(), root=ROOT) as runtime:
        health = json.loads(urllib.request.urlopen(f"{runtime.api_url}/health", timeout=10).read())
        assert health["status"] == "ok" and health["store"] == "sqlite"
        api = ApiClient(runtime.api_url, "acme", "li")
        created = api.call("POST", "/memories", {"kind": "profile", "key": "display.currency_unit", "content": "元"})
        assert created.status == 201
        memory_id = created.body["memory"]["id"]
        api.call("POST", "/memories", {"kind": "profile", "key": "display.currency_unit", "content": "分"})
    # Then the state is in the SQLite file under the state folder
    assert (home / "state" / "memtool.sqlite3").is_file()

    # When a new runtime starts on the same folder, the memory and its history are back
    with LocalRuntime(home=home, port=0, root=ROOT) as again:
        api = ApiClient(again.api_url, "acme", "li")
        current = api.call("GET", f"/memories/{memory_id}?history=true")
        assert current.status == 200
        assert current.body["memory"]["content"] == "分"
        assert current.body["memory"]["index_state"] == "indexed"
        assert [h["content"] for h in current.body["history"]] == ["元", "分"]
        # and another tenant still sees nothing over HTTP
        assert ApiClient(again.api_url, "other", "li").call("GET", f"/memories/{memory_id}").status == 404


def test_dynamodb_store_on_moto_saves_tables_on_a_clean_stop(tmp_path):
    home = tmp_path / "home"
    with LocalRuntime(home=home, port=0, root=ROOT, store="dynamodb") as runtime:
        assert runtime.health()["store"] == "dynamodb"
        api = ApiClient(runtime.api_url, "acme", "li")
        created = api.call("POST", "/memories", {"kind": "profile", "key": "display.currency_unit", "content": "元"})
        memory_id = created.body["memory"]["id"]
        api.call("POST", "/memories", {"kind": "profile", "key": "display.currency_unit", "content": "分"})
    saved = json.loads((home / "state" / "MemoryTable.json").read_text(encoding="utf-8"))
    assert len(saved["items"]) == 4  # head, two snapshots, slot
    with LocalRuntime(home=home, port=0, root=ROOT, store="dynamodb") as again:
        assert again.loaded["MemoryTable"] == 4
        current = ApiClient(again.api_url, "acme", "li").call("GET", f"/memories/{memory_id}?history=true")
        assert [h["content"] for h in current.body["history"]] == ["元", "分"]


def test_runtime_refuses_a_busy_port_and_non_loopback_hosts(tmp_path):
    with LocalRuntime(home=tmp_path, port=0, root=ROOT) as runtime:
        busy = int(runtime.api_url.rsplit(":", 1)[1])
        with pytest.raises(OSError, match="already in use"):
            LocalRuntime(home=tmp_path / "b", port=busy, root=ROOT).start()
    with pytest.raises(ValueError, match="loopback"):
        LocalRuntime(home=tmp_path, host="0.0.0.0", port=0, root=ROOT).start()


def test_health_shows_each_outside_dependencys_circuit(tmp_path):
    from memtool.runtime import container

    with LocalRuntime(home=tmp_path, port=0, root=ROOT) as runtime:
        health = json.loads(urllib.request.urlopen(f"{runtime.api_url}/health", timeout=10).read())
        assert health["status"] == "ok" and health["breakers"] == {}  # nothing outside has been called
        for _ in range(3):  # the warehouse keeps failing
            container.breakers().get("redshift").record_failure(ConnectionError("refused"))
        health = json.loads(urllib.request.urlopen(f"{runtime.api_url}/health", timeout=10).read())
        assert health["breakers"]["redshift"]["state"] == "open"
        assert health["breakers"]["redshift"]["last_error"] == "ConnectionError: refused"
        assert health["status"] == "degraded" and "redshift circuit open" in health["problems"]


def test_http_errors_are_json_with_a_field(tmp_path):
    with LocalRuntime(home=tmp_path, port=0, root=ROOT) as runtime:
        request = urllib.request.Request(
            f"{runtime.api_url}/memories",
            data=b"{not json",
            method="POST",
            headers={"X-Memtool-Tenant": "acme", "X-Memtool-User": "li"},
        )
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(request, timeout=10)
        assert error.value.code == 400
        assert json.loads(error.value.read())["field"] == "body"


def test_demo_runs_its_runtime_on_the_port_it_is_given(tmp_path, monkeypatch, capsys, demo_warehouse):
    import memtool.demo
    from memtool.cli import main

    monkeypatch.setenv("MEMTOOL_WAREHOUSE_PATH", str(demo_warehouse))
    monkeypatch.setenv("MEMTOOL_TODAY", "2026-11-29")
    reached: list[tuple[str, int, object]] = []

    def scenario(api: ApiClient) -> None:  # the story itself is test_demo_tells_the_story_on_a_slim_local_install's
        health = api.call("GET", "/health")
        reached.append((api.base_url, health.status, health.body["status"]))

    monkeypatch.setattr(memtool.demo, "scenario", scenario)
    port = free_port()

    assert main(["demo", "--home", str(tmp_path / "home"), "--port", str(port)]) == 0

    assert reached == [(f"http://127.0.0.1:{port}", 200, "ok")]
    assert f"API at http://127.0.0.1:{port}," in capsys.readouterr().out


def test_demo_takes_a_port_or_a_url_not_both(capsys):
    from memtool.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--url", "http://127.0.0.1:3000", "--port", "3000"])
    assert exit_.value.code == 2
    assert "argument --port: not allowed with argument --url" in capsys.readouterr().err


# A slim local install (`pip install -e ".[local]"`) has none of the AWS-only clients: the demo runs
# with them made unimportable, and a probe line says none was loaded.
SLIM_DEMO = """
import importlib.abc, sys
AWS_ONLY = {"opensearchpy", "redshift_connector", "e2b", "e2b_code_interpreter", "grpc"}
class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in AWS_ONLY:
            raise ModuleNotFoundError(f"No module named {name!r} (a slim local install)")
        return None
sys.meta_path.insert(0, NotInstalled())
from memtool.cli import main
code = main(["demo", "--home", sys.argv[1]])
print("AWS-ONLY LOADED", sorted({n.split(".")[0] for n in sys.modules} & AWS_ONLY))
sys.exit(code)
"""


def test_demo_tells_the_story_on_a_slim_local_install(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", SLIM_DEMO, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert out.strip().splitlines()[-1] == "AWS-ONLY LOADED []"
    assert "HTTP 201" in out and "v1 unit=元" in out
    assert "now v2 unit=分 (v1 kept as history)" in out
    assert "v1  superseded  unit=元" in out and "v2  active      unit=分" in out
    assert "HTTP 409  version_conflict" in out
    assert "[PHONE]" in out and "[EMAIL]" in out
    assert "HTTP 400  field=kind" in out
    assert "HTTP 404  not_found" in out
    assert out.count("then GET ?version=1 gives HTTP 404") == 2
    assert "index_state=indexed" in out
    assert "correction" in out.split("[6]")[1].split("[7]")[0]  # recall found the correction
    assert "index up" in out
    asked = out.split("[9]")[1].split("[10]")[0]
    assert "route nl2sql_query, status answered" in asked and "chart horizontal_bar" in asked
    assert "route kpi_lookup, status answered" in asked and "chart kpi_card" in asked
    assert "route business_knowledge_qa, status answered" in asked and "[catalog:metric/net_revenue@2026.11.1]" in asked
    assert "status needs_clarification" in asked and "西安" in asked
    # the profile memory written in step 2 (以后都用分) shaped the answers: amounts in 分
    assert "net_revenue_fen" in asked
