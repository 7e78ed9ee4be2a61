"""One runtime, several tenants, each with its own warehouse and semantic model (memtool serve --tenants).

The runtime serves, over HTTP:
- ``acme``, not in the tenants file: the demo warehouse and the built-in demo model;
- ``tpch``: a TPC-H warehouse (DuckDB) with examples/tpch/model.yaml;
- ``shared-demo`` and ``shared-tpch``: ONE warehouse holding both schemas, each tenant with its own
  model, so only the model stands between a tenant and the other's tables.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import duckdb
import pytest
import yaml

from memtool.demo import ApiClient
from memtool.planning.plan import Plan
from memtool.runtime import container
from memtool.runtime.local import LocalRuntime
from memtool.semantic.catalog import load_catalog
from tests.support import ROOT

TPCH_MODEL = ROOT / "examples" / "tpch" / "model.yaml"
DEMO_MODEL = ROOT / "layers" / "core" / "memtool" / "sql" / "demo_model.yaml"
DEMO_TABLES = ("fact_*", "dim_*")
TPCH_TABLES = ("lineitem", "orders", "customer", "nation", "region", "part", "supplier", "partsupp")


@dataclass
class Served:
    runtime: LocalRuntime
    tpch_path: Path
    shared_path: Path

    def client(self, tenant: str, user: str = "li", roles: str | None = None) -> ApiClient:
        api = ApiClient(self.runtime.api_url or "", tenant, user)
        if roles:
            api.headers["X-Memtool-Roles"] = roles
        return api


@pytest.fixture
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from memtool.datasets.tpch import build_tpch_warehouse
    from memtool.sql.demo_warehouse import build_demo_warehouse

    root = tmp_path_factory.mktemp("tenants")
    tpch = root / "tpch.duckdb"
    build_tpch_warehouse(tpch, scale=0.01)
    shared = root / "shared.duckdb"
    build_demo_warehouse(shared, seed=7, scale=0.02, anchor=date(2026, 11, 29))
    with duckdb.connect(str(shared)) as con:  # the TPC-H tables next to the demo's, in one warehouse
        con.execute(f"ATTACH '{tpch}' AS t (READ_ONLY)")
        for (table,) in con.execute("SELECT table_name FROM information_schema.tables WHERE table_catalog = 't'").fetchall():
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM t.{table}")
        con.execute("DETACH t")
    tenants = root / "tenants.yaml"
    tenants.write_text(
        yaml.safe_dump(
            {
                "tpch": {"warehouse": "duckdb://tpch.duckdb", "model": str(TPCH_MODEL)},  # relative to the file
                # one warehouse, two tenants: each is granted its own tables (required when they share it)
                "shared-demo": {"warehouse": f"duckdb://{shared}", "model": str(DEMO_MODEL), "tables": list(DEMO_TABLES)},
                "shared-tpch": {"warehouse": f"duckdb://{shared}", "model": str(TPCH_MODEL), "tables": list(TPCH_TABLES)},
            }
        ),
        encoding="utf-8",
    )
    runtime = LocalRuntime(home=root / "home", port=0, root=ROOT, warehouse_scale=0.02, tenants_file=tenants).start()
    try:
        yield Served(runtime, tpch, shared)
    finally:
        runtime.stop()


def ask(api: ApiClient, question: str) -> dict:
    reply = api.call("POST", "/ask", {"question": question})
    assert reply.status == 200, reply.body
    return reply.body


def each_tenant_answers_from_its_own_warehouse_and_model(served: Served) -> None:
    demo = ask(served.client("acme"), "上个月各渠道净收入")
    assert demo["status"] == "answered" and "fact_order_line" in demo["sql"], demo
    assert any(n.startswith("semantic model: demo ") and "(built in)" in n for n in demo["notes"]), demo["notes"]

    tpch = ask(served.client("tpch"), "1996年各客户细分市场的收入")
    assert tpch["status"] == "answered" and "lineitem" in tpch["sql"] and "fact_order_line" not in tpch["sql"], tpch
    assert any(n == "semantic model: tpch 2026.12.1 (file model.yaml)" for n in tpch["notes"]), tpch["notes"]
    expected = container.warehouse("tpch").run(  # hand-written SQL on the tenant's own warehouse
        "SELECT c_mktsegment, ROUND(SUM(l_extendedprice * (1 - l_discount)), 2) FROM lineitem JOIN orders ON o_orderkey = l_orderkey "
        "JOIN customer ON c_custkey = o_custkey WHERE o_orderdate >= DATE '1996-01-01' AND o_orderdate < DATE '1997-01-01' GROUP BY 1",
        max_rows=100,
        timeout_seconds=30,
    ).rows
    rows = tpch.get("rows") or tpch["data"]["rows"]
    assert sorted((r[0], float(r[1])) for r in rows) == sorted((r[0], float(r[1])) for r in expected)

    # a historical data set: "last month" is its last full month, and a later period is said to have no data
    last_month = ask(served.client("tpch"), "Revenue last month")
    assert last_month["status"] == "answered" and "1998-07-01" in last_month["sql"], last_month
    later = ask(served.client("tpch"), "2020年的收入")
    assert "the data set ends on 1998-08-02: 2020年 has no data" in later["notes"], later["notes"]


def a_tenant_never_gets_the_other_tenants_tables(served: Served) -> None:
    # the TPC-H tenant asks a demo question: its model has no channel and no net revenue
    tpch = ask(served.client("tpch"), "上个月各渠道净收入")
    assert tpch["status"] == "needs_clarification" and not tpch.get("sql"), tpch
    # the demo tenant asks a TPC-H question: nothing of TPC-H is known to it
    demo = ask(served.client("acme"), "Revenue by customer market segment in 1996")
    assert demo["status"] != "answered" or "lineitem" not in (demo.get("sql") or ""), demo


def the_guardrails_refuse_a_table_of_the_other_tenants_model_in_a_shared_warehouse(
    served: Served, monkeypatch: pytest.MonkeyPatch, tenant: str, own: str, foreign: str
) -> None:
    class ScriptedPlanner:
        def __init__(self, sql: str) -> None:
            self.sql = sql

        def plan(self, question, *, route, context):
            return Plan(status="planned", route=route, sql=self.sql, planner="scripted")

    assert foreign in container.warehouse(tenant).describe().tables  # the warehouse has it
    api = served.client(tenant)
    monkeypatch.setattr(container, "planner", lambda tenant=None: ScriptedPlanner(f"SELECT COUNT(*) AS n FROM {foreign}"))
    blocked = ask(api, "how many rows")
    assert blocked["status"] == "failed" and blocked["error"]["step"] == "Guard", blocked
    assert foreign in blocked["error"]["message"] or blocked.get("guard", {}).get("status") == "blocked", blocked

    monkeypatch.setattr(container, "planner", lambda tenant=None: ScriptedPlanner(f"SELECT COUNT(*) AS n FROM {own}"))
    allowed = ask(api, "how many rows")
    assert allowed["status"] == "answered" and allowed["rows"][0][0] > 0, allowed


def a_curators_model_change_is_a_new_version_the_next_answer_names(served: Served) -> None:
    curator = served.client("tpch", "wang", roles="curator")
    model = load_catalog(TPCH_MODEL).model_dump(mode="json")
    first = curator.call("PUT", "/model", {"model": model, "expected_version": None})
    assert first.status == 201 and first.body["version"] == 1, first.body
    answer = ask(served.client("tpch"), "1995年的总收入是多少？")
    assert "semantic model: tpch 2026.12.1 (stored v1)" in answer["notes"], answer["notes"]

    changed = {**model, "model_version": "2026.12.2"}
    changed["metrics"] = [dict(m, synonyms_zh=[*m["synonyms_zh"], "营业额"]) if m["name"] == "revenue" else m for m in model["metrics"]]
    second = curator.call("PUT", "/model", {"model": changed, "expected_version": 1})
    assert second.status == 200 and second.body["version"] == 2, second.body
    answer = ask(served.client("tpch"), "1995年的营业额是多少？")  # the new synonym, in force at once
    assert answer["status"] == "answered" and "semantic model: tpch 2026.12.2 (stored v2)" in answer["notes"], answer

    history = curator.call("GET", "/model/history").body["items"]
    assert [h["version"] for h in history] == [1, 2]
    refused = curator.call("PUT", "/model", {"model": dict(changed, joins=[]), "expected_version": 2})
    assert refused.status == 422 and refused.body["error"] == "model_invalid", refused.body
    assert served.client("tpch", "li").call("PUT", "/model", {"model": changed, "expected_version": 2}).status == 403
    answer = ask(served.client("tpch"), "1995年的营业额是多少？")
    assert "semantic model: tpch 2026.12.2 (stored v2)" in answer["notes"], answer["notes"]  # the old version stays

    # and the other tenants did not change
    assert any("(built in)" in n for n in ask(served.client("acme"), "上个月各渠道净收入")["notes"])


def test_two_tenants_with_their_own_warehouses_and_models_share_one_runtime(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """One runtime start for every check (the runtime is per test: settings are reset after each)."""
    each_tenant_answers_from_its_own_warehouse_and_model(served)
    a_tenant_never_gets_the_other_tenants_tables(served)
    for tenant, own, foreign in (("shared-demo", "fact_order_line", "lineitem"), ("shared-tpch", "lineitem", "fact_order_line")):
        with monkeypatch.context() as patch:
            the_guardrails_refuse_a_table_of_the_other_tenants_model_in_a_shared_warehouse(served, patch, tenant, own, foreign)
    a_curators_model_change_is_a_new_version_the_next_answer_names(served)


def test_a_bad_tenants_file_stops_the_start_with_the_entry_named(tmp_path: Path) -> None:
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text("tpch:\n  warehouse: duckdb://missing.duckdb\n  model: nowhere.yaml\n", encoding="utf-8")
    from memtool.errors import ValidationFailed

    runtime = LocalRuntime(home=tmp_path / "home", port=0, root=ROOT, warehouse_scale=0.02, tenants_file=tenants)
    with pytest.raises(ValidationFailed, match="tenant tpch: the model file .*nowhere.yaml does not exist"):
        runtime.start()
    runtime.stop()
    shutil.rmtree(tmp_path / "home", ignore_errors=True)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"warehouse": "mysql://x@y/z", "model": str(TPCH_MODEL)}, r"tenant tpch: not a warehouse URL"),
        ({"warehouse": "duckdb://x.duckdb", "model": "broken.yaml"}, r"tenant tpch: its model is not valid: .*broken.yaml:\d+: metrics\[0\]"),
    ],
)
def test_a_tenants_file_entry_that_cannot_work_stops_the_start_naming_it(tmp_path: Path, entry: dict, message: str) -> None:
    from memtool.errors import ValidationFailed

    broken = yaml.safe_load(TPCH_MODEL.read_text(encoding="utf-8"))
    broken["metrics"][0]["source"] = "nowhere"
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken, allow_unicode=True), encoding="utf-8")
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(yaml.safe_dump({"tpch": entry}), encoding="utf-8")
    runtime = LocalRuntime(home=tmp_path / "home", port=0, root=ROOT, warehouse_scale=0.02, tenants_file=tenants)
    with pytest.raises(ValidationFailed, match=message):
        runtime.start()
    runtime.stop()


def test_a_tenant_whose_warehouse_is_down_does_not_stop_the_others(tmp_path: Path) -> None:
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(yaml.safe_dump({"tpch": {"warehouse": "duckdb://not-there.duckdb", "model": str(TPCH_MODEL)}}), encoding="utf-8")
    lines: list[str] = []
    with LocalRuntime(home=tmp_path / "home", port=0, root=ROOT, warehouse_scale=0.02, tenants_file=tenants, progress=lines.append) as runtime:
        assert any(line.startswith("WARNING tenant tpch: the warehouse cannot be read now") for line in lines), lines
        served = Served(runtime, tmp_path / "not-there.duckdb", tmp_path)
        assert ask(served.client("acme"), "上个月各渠道净收入")["status"] == "answered"
        down = ask(served.client("tpch"), "1995年的总收入是多少？")
        assert down["status"] == "failed" and down["error"]["error"] in ("warehouse_error", "warehouse_unavailable"), down
        assert down["error"]["step"] in ("Guard", "Execute", "Plan"), down["error"]


def test_on_a_warehouse_of_its_own_a_tenant_without_a_model_is_told_how_to_make_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memtool.datasets.tpch import build_tpch_warehouse

    warehouse = tmp_path / "tpch.duckdb"
    build_tpch_warehouse(warehouse, scale=0.01)
    monkeypatch.setenv("MEMTOOL_WAREHOUSE_URL", f"duckdb://{warehouse}")
    # the process's warehouse serves every tenant not in a tenants file: this one is granted all of it
    monkeypatch.setenv("MEMTOOL_TENANT_TABLES", '{"newco": ["*"]}')
    with LocalRuntime(home=tmp_path / "home", port=0, root=ROOT) as runtime:
        api = ApiClient(runtime.api_url or "", "newco", "li")
        answer = ask(api, "1995年的总收入是多少？")
        assert answer["status"] == "failed" and answer["error"]["error"] == "model_missing", answer
        assert "memtool model init --warehouse URL" in answer["error"]["message"]

        curator = ApiClient(runtime.api_url or "", "newco", "wang")
        curator.headers["X-Memtool-Roles"] = "curator"
        intruder = ApiClient(runtime.api_url or "", "evil", "wang")  # granted nothing on the shared warehouse
        intruder.headers["X-Memtool-Roles"] = "curator"
        refused = intruder.call("PUT", "/model", {"model": load_catalog(TPCH_MODEL).model_dump(mode="json"), "expected_version": None})
        assert refused.status == 422 and refused.body["problems"][0]["path"] == "tables", refused.body
        assert "MEMTOOL_TENANT_TABLES" in refused.body["problems"][0]["message"]
        stored = curator.call("PUT", "/model", {"model": load_catalog(TPCH_MODEL).model_dump(mode="json"), "expected_version": None})
        assert stored.status == 201, stored.body
        answered = ask(api, "1995年的总收入是多少？")
        assert answered["status"] == "answered" and "semantic model: tpch 2026.12.1 (stored v1)" in answered["notes"], answered
