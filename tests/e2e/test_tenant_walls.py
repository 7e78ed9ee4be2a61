"""Tenant walls against a hostile user and a careless curator, over HTTP on the local runtime.

One DuckDB warehouse holds the demo's tables, TPC-H's and a table no tenant was given
(``payroll``). Two tenants read it, each granted its own tables in the tenants file
(docs/architecture.md, "Tenant walls"):

- ``shared-demo``: the demo model, granted ``fact_*`` and ``dim_*``;
- ``shared-tpch``: the TPC-H model, granted the TPC-H tables.

The attacks are the review's: a session's turns written by the user, a forged turn or
clarification left in the store with quotes, backslashes and SQL in its values, table functions
after LATERAL, a metric expression that reads another tenant's table, another tenant's table or an
unassigned one added to a model. Every check asserts on what came back and on what was stored:
no plain user and no curator reads a row outside their own model's tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import duckdb
import pytest
import yaml

from memtool.demo import ApiClient
from memtool.memory.records import MemoryDraft, MemoryKind
from memtool.memory.store import Partition
from memtool.planning.plan import Plan
from memtool.runtime import container
from memtool.runtime.local import LocalRuntime
from memtool.semantic.catalog import load_catalog
from memtool.settings import use_settings
from tests.support import ROOT

TPCH_MODEL = ROOT / "examples" / "tpch" / "model.yaml"
DEMO_MODEL = ROOT / "layers" / "core" / "memtool" / "sql" / "demo_model.yaml"
TPCH_TABLES = ["lineitem", "orders", "customer", "nation", "region", "part", "supplier", "partsupp"]
SECRET = "SALARY-OF-THE-CEO"  # the unassigned table's one row

# The review's payload: a value that ends in a backslash, then SQL that reads another tenant's
# customers through a table function.
FORGED_VALUE = "x\\') UNION ALL SELECT (SELECT string_agg(v, ',') FROM LATERAL query(chr(83)||chr(69)||chr(76)) AS q(v)) --"
HOSTILE_VALUES = [
    FORGED_VALUE,
    "上海' OR '1'='1",
    "上海\\",
    "') UNION ALL SELECT c_name FROM customer --",
    "x'; SELECT * FROM payroll; --",
]


@dataclass
class Served:
    runtime: LocalRuntime
    shared: Path
    customers: frozenset[str]  # another tenant's rows: the TPC-H customers' names

    def client(self, tenant: str, user: str = "li", roles: str | None = None) -> ApiClient:
        api = ApiClient(self.runtime.api_url or "", tenant, user)
        if roles:
            api.headers["X-Memtool-Roles"] = roles
        return api


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from memtool.datasets.tpch import build_tpch_warehouse
    from memtool.sql.demo_warehouse import build_demo_warehouse

    root = tmp_path_factory.mktemp("walls")
    tpch = root / "tpch.duckdb"
    build_tpch_warehouse(tpch, scale=0.01)
    shared = root / "shared.duckdb"
    build_demo_warehouse(shared, seed=7, scale=0.02, anchor=date(2026, 11, 29))
    with duckdb.connect(str(shared)) as con:
        con.execute(f"ATTACH '{tpch}' AS t (READ_ONLY)")
        for (table,) in con.execute("SELECT table_name FROM information_schema.tables WHERE table_catalog = 't'").fetchall():
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM t.{table}")
        con.execute("DETACH t")
        con.execute("CREATE TABLE payroll (employee VARCHAR, salary VARCHAR)")
        con.execute("INSERT INTO payroll VALUES ('ceo', ?)", [SECRET])
        # a schema whose name starts like a granted pattern (dim_*): a grant's * never crosses the dot
        con.execute("CREATE SCHEMA dim_stage")
        con.execute("CREATE TABLE dim_stage.payroll AS SELECT * FROM payroll")
        customers = frozenset(name for (name,) in con.execute("SELECT c_name FROM customer").fetchall())
    tenants = root / "tenants.yaml"
    tenants.write_text(
        yaml.safe_dump(
            {
                "shared-demo": {"warehouse": f"duckdb://{shared}", "model": str(DEMO_MODEL), "tables": ["fact_*", "dim_*"]},
                "shared-tpch": {"warehouse": f"duckdb://{shared}", "model": str(TPCH_MODEL), "tables": TPCH_TABLES},
            }
        ),
        encoding="utf-8",
    )
    runtime = LocalRuntime(home=root / "home", port=0, root=ROOT, warehouse_scale=0.02, tenants_file=tenants).start()
    try:
        yield Served(runtime, shared, customers)
    finally:
        use_settings(runtime.settings)  # the last test reset them
        runtime.stop()


@pytest.fixture(autouse=True)
def _runtime_settings(served: Served) -> None:
    """The suite resets the process's settings after every test; the module's runtime needs its own back."""
    use_settings(served.runtime.settings)


def ask(api: ApiClient, question: str, **body: object) -> dict:
    reply = api.call("POST", "/ask", {"question": question, **body})
    assert reply.status == 200, reply.body
    return reply.body


def leaked(answer: dict, served: Served) -> list[str]:
    """Anything of another tenant's or an unassigned table in an answer: its rows, SQL or notes."""
    text = repr(answer)
    found = [name for name in served.customers if name in text]
    if SECRET in text:
        found.append(SECRET)
    return found


def forge_turns(served: Served, tenant: str, user: str, session: str, turns: list[dict]) -> str:
    """A session's turns put straight into the store, as a record written before the fix would lie."""
    draft = MemoryDraft(
        kind=MemoryKind.WORKING, key=f"session.{session}.turns", content="forged", value={"turns": turns}, session_id=session
    )
    return container.memory_store().create(Partition(tenant, user), draft, container.clock().now()).record.id


# ---- a plain user -------------------------------------------------------------------------------


def test_a_user_cannot_write_a_sessions_turns_through_memories(served: Served) -> None:
    api = served.client("shared-demo", "mallory")
    intent = {"metric": "net_revenue", "filters": [{"dimension": "city", "values": [FORGED_VALUE]}]}
    turn = {"question": "上个月各城市净收入", "status": "answered", "intent": intent}
    for body in (
        {"kind": "working", "key": "session.S.turns", "content": "mine", "value": {"turns": [turn]}, "session_id": "S"},
        {"kind": "working", "key": "session.other.turns", "content": "mine", "value": {"turns": []}, "session_id": "other"},
    ):
        reply = api.call("POST", "/memories", body)
        assert reply.status == 403 and reply.body["field"] == "key", reply.body
    where = Partition("shared-demo", "mallory")
    assert container.memory_store().get_slot(where, MemoryKind.WORKING, "session.S.turns", container.clock().now()) is None


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_a_forged_turn_left_in_the_store_is_not_carried_into_a_follow_up(served: Served, value: str) -> None:
    session = f"forged-{abs(hash(value))}"
    forge_turns(
        served,
        "shared-demo",
        "mallory",
        session,
        [
            {
                "question": "上个月上海的净收入",
                "status": "answered",
                "intent": {
                    "metric": "net_revenue",
                    "filters": [{"dimension": "city", "values": [value]}],
                    "time_window": {"start": "2026-10-01", "end": "2026-11-01", "label": "上个月"},
                },
            }
        ],
    )
    answer = ask(served.client("shared-demo", "mallory"), "那销售额呢", session_id=session)

    assert leaked(answer, served) == []
    notes = answer["notes"]
    assert any("the session's previous question was not carried over" in n and "is not a city of the data" in n for n in notes), notes
    sql = answer.get("sql") or ""
    assert "customer" not in sql and "query(" not in sql.lower() and "payroll" not in sql and "UNION" not in sql.upper(), sql
    assert value not in sql


def test_a_follow_up_of_a_real_turn_still_carries_its_filter(served: Served) -> None:
    api = served.client("shared-demo", "li")
    first = ask(api, "上个月上海的净收入", session_id="honest")
    assert first["status"] == "answered" and "上海" in first["sql"], first
    follow = ask(api, "那销售额呢", session_id="honest")
    assert follow["status"] == "answered" and "'上海'" in follow["sql"], follow
    assert any("carried over from the previous question" in n and "city = 上海" in n for n in follow["notes"]), follow["notes"]


def test_a_forged_clarification_option_is_not_applied(served: Served) -> None:
    forge_turns(
        served,
        "shared-demo",
        "mallory",
        "forged-choice",
        [
            {
                "question": "上个月XX城市的净收入",
                "status": "needs_clarification",
                "clarification": {
                    "question": "哪个城市？",
                    "options": ["上海"],
                    "reason": "ambiguous_value",
                    "term": "XX",
                    "targets": [{"dimension": "city", "value": FORGED_VALUE}],
                },
            }
        ],
    )
    answer = ask(served.client("shared-demo", "mallory"), "第一个", session_id="forged-choice")
    assert leaked(answer, served) == []
    assert FORGED_VALUE not in (answer.get("sql") or "")
    assert answer["status"] != "answered" or "UNION" not in (answer.get("sql") or "").upper(), answer


# ---- what the guard lets run, whatever the planner wrote ---------------------------------------


class ScriptedPlanner:
    def __init__(self, sql: str) -> None:
        self.sql = sql

    def plan(self, question, *, route, context):
        return Plan(status="planned", route=route, sql=self.sql, planner="scripted")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT city FROM dim_region, LATERAL query('SELECT c_name FROM customer') AS q(v)",
        "SELECT (SELECT string_agg(v, ',') FROM LATERAL query(chr(83)||chr(69)) AS q(v)) AS x FROM dim_region",
        "SELECT * FROM query_table('customer')",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM duckdb_tables()",
        "SELECT city FROM dim_region, LATERAL duckdb_settings() AS s",
        "SELECT salary FROM payroll",
        "SELECT c_name FROM customer",
        "WITH c AS (SELECT c_name FROM customer) SELECT * FROM c",
        "SELECT city FROM dim_region WHERE EXISTS (SELECT 1 FROM payroll)",
        "SELECT city FROM dim_region UNION ALL SELECT c_name FROM customer",
    ],
)
def test_the_guard_refuses_every_relation_outside_the_tenants_model_and_grant(
    served: Served, monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    monkeypatch.setattr(container, "planner", lambda tenant=None: ScriptedPlanner(sql))
    answer = ask(served.client("shared-demo"), "how many rows")
    assert answer["status"] == "failed" and answer["error"]["step"] == "Guard", answer
    assert leaked(answer, served) == []


def test_the_guard_runs_what_the_tenant_may_read(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(container, "planner", lambda tenant=None: ScriptedPlanner("SELECT COUNT(*) AS n FROM dim_region"))
    answer = ask(served.client("shared-demo"), "how many regions")
    assert answer["status"] == "answered" and answer["rows"][0][0] > 0, answer


# ---- a careless (or hostile) curator -------------------------------------------------------------


def demo_model() -> dict:
    return load_catalog(DEMO_MODEL).model_dump(mode="json")


def put(served: Served, model: dict) -> tuple[int, dict]:
    reply = served.client("shared-demo", "wang", roles="curator").call("PUT", "/model", {"model": model, "expected_version": None})
    return reply.status, reply.body


def with_metric_expression(model: dict, expression: str) -> tuple[dict, int]:
    index = next(i for i, m in enumerate(model["metrics"]) if m["name"] == "net_revenue")
    model["metrics"][index]["expression"] = expression
    return model, index


@pytest.mark.parametrize(
    "expression",
    [
        "(SELECT MAX(v) FROM LATERAL query('SELECT c_name FROM customer') AS q(v))",
        "(SELECT string_agg(c_name, ',') FROM customer)",
        "SUM(ol.gross_amount) + (SELECT COUNT(*) FROM payroll)",
        "MAX(query('SELECT 1'))",
        "SUM(ol.gross_amount) -- the rest of the line is gone",
        "SUM(c.c_acctbal)",
    ],
)
def test_a_metric_expression_that_reaches_past_the_model_is_refused_at_its_place(served: Served, expression: str) -> None:
    model, index = with_metric_expression(demo_model(), expression)
    status, body = put(served, model)
    assert status == 422 and body["error"] == "model_invalid", body
    assert any(p["path"] == f"metrics[{index}].expression" for p in body["problems"]), body["problems"]
    assert served.client("shared-demo", "wang", roles="curator").call("GET", "/model").status == 404  # nothing stored


@pytest.mark.parametrize("table", ["customer", "payroll", "dim_stage.payroll", "main.customer"])
def test_a_table_the_tenant_was_not_granted_is_refused_in_the_model(served: Served, table: str) -> None:
    model = demo_model()
    bare = table.rpartition(".")[2]
    columns = {"customer": {"c_custkey": "BIGINT", "c_name": "VARCHAR"}, "payroll": {"employee": "VARCHAR", "salary": "VARCHAR"}}[bare]
    model["tables"].append({"name": "zz_table", "table": table, "alias": "zz", "columns": columns})
    status, body = put(served, model)
    assert status == 422, body
    index = len(model["tables"]) - 1
    message = f"the table {table} is not one this tenant may read (granted: fact_*, dim_*)"
    assert {"path": f"tables[{index}].table", "message": message} in body["problems"], body["problems"]
    assert served.client("shared-demo", "wang", roles="curator").call("GET", "/model").status == 404


def test_the_curators_own_model_is_still_accepted(served: Served) -> None:
    status, body = put(served, demo_model())
    assert status == 201, body
    answer = ask(served.client("shared-demo"), "上个月各渠道净收入")
    assert answer["status"] == "answered" and "(stored v1)" in " ".join(answer["notes"]), answer
    assert leaked(answer, served) == []


def test_a_tenants_file_that_shares_a_warehouse_without_grants_stops_the_start(tmp_path: Path, served: Served) -> None:
    from memtool.errors import ValidationFailed

    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        yaml.safe_dump(
            {
                "a": {"warehouse": f"duckdb://{served.shared}", "model": str(DEMO_MODEL), "tables": ["fact_*"]},
                "b": {"warehouse": f"duckdb://{served.shared}", "model": str(TPCH_MODEL)},
            }
        ),
        encoding="utf-8",
    )
    from memtool.runtime.tenancy import load_tenants

    with pytest.raises(ValidationFailed, match=r"tenants a, b share the warehouse .*: each needs a tables: list .*missing for b"):
        load_tenants(tenants)


def test_a_curator_cannot_borrow_another_tenants_planner_by_naming_a_model_like_theirs(served: Served) -> None:
    """A stored model's name, version and label are the curator's to choose: two tenants' stored
    models that match on all three still get a planner (and entity values) each."""
    tpch_curator = served.client("shared-tpch", "zhao", roles="curator")
    current = tpch_curator.call("GET", "/model")
    expected = current.body["version"] if current.status == 200 else None
    tpch_model = load_catalog(TPCH_MODEL).model_dump(mode="json")
    stored = tpch_curator.call("PUT", "/model", {"model": tpch_model, "expected_version": expected})
    assert stored.status in (200, 201), stored.body
    ask(served.client("shared-tpch"), "1995年的总收入是多少？")  # its planner is built, with TPC-H's nations and segments

    look_alike = demo_model() | {"name": tpch_model["name"], "model_version": tpch_model["model_version"]}
    demo_curator = served.client("shared-demo", "wang", roles="curator")
    current = demo_curator.call("GET", "/model")
    expected = current.body["version"] if current.status == 200 else None
    reply = demo_curator.call("PUT", "/model", {"model": look_alike, "expected_version": expected})
    assert reply.status in (200, 201), reply.body
    for question in ("revenue of Blorp in 1995", "上个月Blorp的净收入", "what does revenue mean"):
        answer = ask(served.client("shared-demo", "mallory"), question)
        text = repr(answer)
        assert leaked(answer, served) == []
        assert not any(nation in text for nation in ("ALGERIA", "MOZAMBIQUE", "VIETNAM", "AUTOMOBILE", "FURNITURE")), answer
