"""Diagnosis end to end: the real AskFlow on moto's engine, the flow-steps and diagnose handlers,
the diagnose queue drained into DiagnoseFunction, over a drifted and a normal demo warehouse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memtool.runtime import container
from memtool.runtime.handlers import function_handler
from memtool.settings import use_settings
from memtool.sql.guardrails import GuardPolicy, check_sql
from tests.conftest import TODAY
from tests.support import ROOT, Api


@pytest.fixture(scope="session")
def drifted_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from memtool.sql.demo_warehouse import DRIFT_FILE_NAME, build_demo_warehouse

    path = tmp_path_factory.mktemp("drift") / DRIFT_FILE_NAME
    build_demo_warehouse(path, seed=7, scale=0.05, anchor=TODAY, drift=True)
    return path


@pytest.fixture
def queued(aws, tmp_path):
    """The local runtime's diagnose queue (SQLite), and a drain into the real diagnose handler."""
    from memtool.runtime.diagnose_drain import DiagnoseDrainer

    settings = aws.model_copy(update={"diagnose_queue": "sqlite", "diagnose_queue_path": tmp_path / "diagnose-queue.sqlite3"})
    use_settings(settings)
    return DiagnoseDrainer(container.diagnosis_queue(), function_handler(ROOT, "diagnose"))


@pytest.fixture
def drifted(aws, queued, drifted_warehouse):
    from memtool.settings import get_settings

    settings = get_settings().model_copy(update={"warehouse_path": drifted_warehouse})
    use_settings(settings)
    return settings


def ask(api: Api, question: str, **body: Any) -> dict:
    reply = api.call("POST", "/ask", {"question": question, **body})
    assert reply.status == 200, reply.body
    return reply.json()


def causal(api: Api, scope: str = "user") -> list[dict]:
    return api.call("GET", "/memories", query={"kind": "causal", "scope": scope}).json()["items"]


def test_the_first_drifted_question_is_repaired_verified_and_answered(api, drifted, demo_warehouse):
    answer = ask(api, "上个月各渠道的净收入")

    assert answer["status"] == "answered", answer
    assert answer["repaired"] is not None and answer["repaired"]["cause"] == "schema_drift"
    assert "gross_amt" in answer["sql"] and "dim_sales_channel" in answer["sql"]
    assert "Diagnose" in answer["timings"] and "Execute" in answer["timings"]
    # the repaired answer is the answer the warehouse gave before it drifted
    from memtool.sql.duckdb_warehouse import DuckDBWarehouse

    before = DuckDBWarehouse(demo_warehouse)
    try:
        from memtool.semantic.compiler import compile_intent
        from memtool.semantic.intent import Intent

        [episode] = [m for m in api.call("GET", "/memories", query={"kind": "episodic"}).json()["items"]]
        expected_rows = before.run(compile_intent(Intent.model_validate(episode["value"]["intent"])).sql, max_rows=100, timeout_seconds=10).rows
    finally:
        before.close()
    assert sorted(map(tuple, answer["rows"])) == sorted(map(tuple, expected_rows))
    # the lesson is kept: active, verified by execution, with its evidence and trajectory
    [lesson] = causal(api)
    assert lesson["id"] == answer["repaired"]["memory_id"] and lesson["status"] == "active"
    value = lesson["value"]
    assert value["verified"] is True and value["cause"] == "schema_drift"
    assert {"kind": "rename_column", "table": "fact_order_line", "column": "gross_amount", "to": "gross_amt"} in value["repair"]["rules"]
    assert {"kind": "rename_table", "table": "dim_channel", "to": "dim_sales_channel"} in value["repair"]["rules"]
    assert value["scenario"]["question"] == "上个月各渠道的净收入" and value["initial_state"]["sql"]
    assert value["repaired_output"]["row_count"] == 4 and value["evidence"]
    assert [step["step"] for step in value["trajectory"]][:2] == ["classify", "test"]
    assert lesson["expires_at"] is not None and lesson["provenance"]["trigger"] == "diagnosis"
    assert any(m["id"] == lesson["id"] and m["kind"] == "causal" for m in answer["memories_used"])


def test_the_next_questions_on_those_columns_succeed_first_time_citing_the_lesson(api, drifted):
    first = ask(api, "上个月各渠道的净收入")
    lesson_id = first["repaired"]["memory_id"]

    for question in ("今年各渠道的销售额", "上个月的退款率", "本月各城市的净收入"):
        answer = ask(api, question)
        assert answer["status"] == "answered", (question, answer)
        assert "Diagnose" not in answer["timings"], question
        assert answer["repaired"] is None
        assert any(lesson_id in note for note in answer["notes"]), answer["notes"]
        assert any(m["id"] == lesson_id for m in answer["memories_used"])
    assert len(causal(api)) == 1  # no second diagnosis


def test_a_lesson_is_the_users_until_a_curator_shares_it(api, drifted, template):
    first = ask(api, "上个月各渠道的净收入")
    lesson_id = first["repaired"]["memory_id"]

    other = Api(api.gateway, tenant=api.tenant, user="wang")
    theirs = ask(other, "上个月各渠道的净收入")
    assert theirs["repaired"] is not None and theirs["repaired"]["memory_id"] != lesson_id  # diagnosed for wang too

    refused = api.call("POST", f"/lessons/{lesson_id}/share")
    assert refused.status == 403 and refused.json()["field"] == "id"
    shared = api.call("POST", f"/lessons/{lesson_id}/share", roles="curator")
    assert shared.status == 201, shared.body
    # a curator shares another user's lesson by naming its owner
    wangs = api.call("POST", f"/lessons/{theirs['repaired']['memory_id']}/share", {"owner": "wang"}, as_user=(api.tenant, "chen"), roles="curator")
    assert wangs.status == 201 and wangs.json()["memory"]["scope"] == "tenant", wangs.body
    assert api.call("POST", f"/lessons/{lesson_id}/share", {"owner": "wang"}, roles="curator").status == 404  # not wang's
    third = Api(api.gateway, tenant=api.tenant, user="zhao")
    answer = ask(third, "上个月各渠道的净收入")
    assert answer["status"] == "answered" and "Diagnose" not in answer["timings"]
    copies = {shared.json()["memory"]["id"], wangs.json()["memory"]["id"]}
    assert any(copy in note for copy in copies for note in answer["notes"]), answer["notes"]
    elsewhere = Api(api.gateway, tenant=api.tenant + "-x", user="zhao")
    assert ask(elsewhere, "上个月各渠道的净收入")["repaired"] is not None  # another tenant never sees it


def _order_date_value(question_intent: dict, demo_warehouse: Path) -> float:
    from memtool.semantic.compiler import CompileOptions, compile_intent
    from memtool.semantic.intent import Intent
    from memtool.sql.duckdb_warehouse import DuckDBWarehouse

    sql = compile_intent(Intent.model_validate(question_intent), options=CompileOptions().with_time_column("gross_revenue", "order_date")).sql
    warehouse = DuckDBWarehouse(demo_warehouse)
    try:
        return float(warehouse.run(sql, max_rows=5, timeout_seconds=10).rows[0][-1])
    finally:
        warehouse.close()


def test_an_expected_value_is_diagnosed_through_the_queue_and_the_lesson_is_that_users(api, aws, queued, demo_warehouse):
    answer = ask(api, "上个月上海的销售额")
    assert answer["status"] == "answered" and "paid_at" in answer["sql"]
    episode = api.call("GET", f"/episodes/{answer['episode_id']}").json()["episode"]
    expected = _order_date_value(episode["value"]["intent"], demo_warehouse)
    assert expected != pytest.approx(answer["rows"][0][-1], rel=0.001)  # the two definitions differ here

    feedback = api.call("POST", "/feedback", {"episode_id": answer["episode_id"], "rating": -1, "expected": {"value": expected}})
    assert feedback.status == 200 and feedback.json()["diagnosis_queued"] is True
    assert queued.drain() == 1

    view = api.call("GET", f"/episodes/{answer['episode_id']}").json()
    [diagnosis] = view["diagnoses"]
    assert diagnosis["status"] == "active" and diagnosis["value"]["verified"] is True
    assert diagnosis["value"]["cause"] == "time_column"
    assert {"kind": "time_column", "metric": "gross_revenue", "to": "order_date"} in diagnosis["value"]["repair"]["rules"]
    assert diagnosis["value"]["feedback"]["expected"] == {"value": expected}

    beijing = ask(api, "上个月北京的销售额")
    assert "order_date" in beijing["sql"] and "Diagnose" not in beijing["timings"]
    assert any(diagnosis["id"] in note for note in beijing["notes"])
    assert any(c["source"] == f"memory:{diagnosis['id']}@v1" and "order_date" in c["text"] for c in beijing["citations"])
    other = Api(api.gateway, tenant=api.tenant, user="wang")
    theirs = ask(other, "上个月北京的销售额")
    assert "order_date" not in theirs["sql"] and "paid_at" in theirs["sql"]


def test_an_unverified_hypothesis_never_changes_a_later_answer(api, aws):
    before = ask(api, "上个月上海的销售额")
    reply = api.call("POST", "/diagnose", {"episode_id": before["episode_id"], "comment": "这个数不对"})
    assert reply.status == 200, reply.body
    report = reply.json()
    assert report["verified"] is False and report["status"] == "pending_review"
    assert any(h["result"] == "ran" for h in report["hypotheses"])  # repairs ran, none could be verified
    [pending] = causal(api)
    assert pending["status"] == "pending_review"

    after = ask(api, "上个月上海的销售额")
    assert after["sql"] == before["sql"] and after["rows"] == before["rows"]
    assert not any(m["kind"] == "causal" for m in after["memories_used"])
    assert not any(pending["id"] in note for note in after["notes"])


def test_the_diagnoser_keeps_to_its_budget_and_never_runs_refused_sql(api, aws, monkeypatch):
    use_settings(aws.model_copy(update={"diagnosis_max_executions": 2}))
    answer = ask(api, "上个月上海的销售额")
    warehouse = container.warehouse()
    ran: list[str] = []
    real_run = warehouse.run

    def recording_run(sql, **kwargs):
        ran.append(sql)
        return real_run(sql, **kwargs)

    monkeypatch.setattr(warehouse, "run", recording_run)
    reply = api.call("POST", "/diagnose", {"episode_id": answer["episode_id"], "expected": {"value": 1.0}})
    assert reply.status == 200, reply.body
    report = reply.json()
    assert report["executions"] == len(ran) <= 2 and report["budget"] == 2
    assert any(h["result"] == "not_tested" for h in report["hypotheses"])
    policy = GuardPolicy.from_live_schema(warehouse.describe(), max_rows=1000)
    assert all(check_sql(sql, policy).allowed for sql in ran)
    assert report["verified"] is False


def test_episodes_and_diagnoses_of_other_users_are_not_found(api, aws):
    answer = ask(api, "上个月上海的销售额")
    other = Api(api.gateway, tenant=api.tenant, user="wang")
    assert other.call("GET", f"/episodes/{answer['episode_id']}").status == 404
    reply = other.call("POST", "/diagnose", {"episode_id": answer["episode_id"], "comment": "wrong"})
    assert reply.status == 404 and reply.json()["field"] == "episode_id"
    assert causal(other) == [] and causal(api) == []


def test_a_stale_schema_fails_at_execute_and_the_catch_path_repairs_it(api, drifted, monkeypatch):
    """The guard read the schema before the warehouse drifted (a cached describe): the SQL passes
    the guard, fails on the warehouse, and Execute's Catch sends it to Diagnose, which re-reads the
    live schema, verifies the repair by running it, and the ask answers in the same execution."""
    from memtool.sql.demo_warehouse import WAREHOUSE_SCHEMA
    from memtool.sql.live_schema import LiveSchema

    warehouse = container.warehouse()
    real = warehouse.describe
    stale = LiveSchema.from_rows([(t, c, kind) for t, cols in WAREHOUSE_SCHEMA.items() for c, kind in cols.items()])
    refreshed: list[bool] = []

    def describe(*, refresh: bool = False):
        if refresh:
            refreshed.append(True)
        return real(refresh=True) if refreshed else stale

    monkeypatch.setattr(warehouse, "describe", describe)
    answer = ask(api, "上个月各渠道的净收入")

    assert answer["status"] == "answered", answer
    assert refreshed, "the diagnosis re-read the live schema"
    assert answer["repaired"]["cause"] == "schema_drift"
    assert "Diagnose" in answer["timings"] and "Execute" in answer["timings"]
    [lesson] = causal(api)
    assert lesson["value"]["failure"]["origin"] == "execution"
    assert lesson["value"]["failure"]["class"] in ("undefined_table", "undefined_column")


def test_a_lesson_whose_uses_fail_loses_credit_and_is_archived(api, drifted):
    first = ask(api, "上个月各渠道的净收入")
    lesson_id = first["repaired"]["memory_id"]
    for month in ("上个月", "本月", "今年", "去年", "上季度"):
        answer = ask(api, f"{month}各渠道的销售额")
        assert any(m["id"] == lesson_id for m in answer["memories_used"]), answer
        api.call("POST", "/feedback", {"episode_id": answer["episode_id"], "rating": -1})
    lesson = api.call("GET", f"/memories/{lesson_id}").json()["memory"]
    assert lesson["status"] == "archived" and "retired by feedback" in lesson["status_reason"]
    later = ask(api, "上个月各渠道的销售额")
    assert not any(m["id"] == lesson_id for m in later["memories_used"])
    assert "Diagnose" in later["timings"]  # the cause is met again and diagnosed afresh


def test_a_repair_that_fails_the_full_run_is_recorded_failed_and_its_lesson_blamed(api, drifted, monkeypatch):
    from memtool.sql.warehouse import WarehouseError

    warehouse = container.warehouse()
    real_run = warehouse.run
    cap = drifted.max_rows

    def run(sql, *, max_rows, timeout_seconds, params=None):
        if max_rows == cap and "gross_amt" in sql:  # the full run, not the capped intervention test
            raise WarehouseError("the query ran longer than the statement timeout and was cancelled", code="timeout", sql=sql)
        return real_run(sql, max_rows=max_rows, timeout_seconds=timeout_seconds, params=params)

    monkeypatch.setattr(warehouse, "run", run)
    answer = ask(api, "上个月各渠道的净收入")

    assert answer["status"] == "failed" and answer["repaired"] is None, answer
    assert answer["error"]["error"] == "warehouse_timeout"
    assert any("repaired query failed too" in note for note in answer["notes"])
    [lesson] = causal(api)
    assert lesson["credit"]["failures"] == 1 and lesson["credit"]["uses"] == 1


def test_a_newer_lesson_on_the_same_target_replaces_the_older_one(api, aws, demo_warehouse):
    first = ask(api, "上个月上海的销售额")
    episode = api.call("GET", f"/episodes/{first['episode_id']}").json()["episode"]
    by_order_date = _order_date_value(episode["value"]["intent"], demo_warehouse)
    taught = api.call("POST", "/diagnose", {"episode_id": first["episode_id"], "expected": {"value": by_order_date}}).json()
    assert taught["verified"] and taught["cause"] == "time_column"
    again = api.call("POST", "/diagnose", {"episode_id": first["episode_id"], "expected": {"value": by_order_date}}).json()
    assert again["verified"] and any("superseded" in note for note in again["notes"])

    second = ask(api, "上个月上海的销售额")
    assert "order_date" in second["sql"]
    # the user says the paid_at value was right after all: the newest lesson decides
    undo = api.call("POST", "/diagnose", {"episode_id": second["episode_id"], "expected": {"value": first["rows"][0][-1]}}).json()
    assert undo["verified"] and {"kind": "time_column", "metric": "gross_revenue", "to": "paid_at"} in undo["repairs"]
    third = ask(api, "上个月上海的销售额")
    assert third["rows"][0][-1] == pytest.approx(first["rows"][0][-1]) and "ol.order_date" not in third["sql"]
    cited = [m["id"] for m in third["memories_used"] if m["kind"] == "causal"]
    assert cited == [undo["memory_id"]]
    lessons = {m["id"]: m for m in causal(api)}
    assert lessons[taught["memory_id"]]["status"] == "archived" and lessons[again["memory_id"]]["status"] == "archived"
    assert "superseded by memory:" in lessons[again["memory_id"]]["status_reason"]


def test_sharing_a_lesson_twice_gives_the_same_copy(api, drifted):
    lesson_id = ask(api, "上个月各渠道的净收入")["repaired"]["memory_id"]
    once = api.call("POST", f"/lessons/{lesson_id}/share", roles="curator").json()["memory"]
    twice = api.call("POST", f"/lessons/{lesson_id}/share", roles="curator").json()["memory"]
    assert once["id"] == twice["id"] and len(causal(api, scope="tenant")) == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"expected": {"value": "800391.5"}}, "expected.value"),
        ({"expected": {"value": True}}, "expected.value"),
        ({"expected": {"value": 1.0}, "rating": 1}, "expected"),
    ],
)
def test_feedback_refuses_an_expected_value_it_cannot_use_and_writes_nothing(api, aws, body, field):
    answer = ask(api, "上个月上海的销售额")
    reply = api.call("POST", "/feedback", {"episode_id": answer["episode_id"], **({"rating": -1} | body)})
    assert reply.status == 400 and reply.json()["field"] == field, reply.body
    assert causal(api) == [] and "feedback" not in api.call("GET", f"/episodes/{answer['episode_id']}").json()["episode"]["value"]


def test_an_expected_value_needs_an_answer_of_one_value(api, aws):
    answer = ask(api, "上个月各渠道的销售额")
    assert answer["row_count"] == 4
    for path, body in (("/diagnose", {}), ("/feedback", {"rating": -1})):
        reply = api.call("POST", path, {"episode_id": answer["episode_id"], "expected": {"value": 12345}, **body})
        assert reply.status == 400 and reply.json()["field"] == "expected" and "4 rows" in reply.json()["message"], reply.body
    assert causal(api) == []


def test_an_expected_value_the_answer_already_has_is_not_kept(api, aws):
    answer = ask(api, "上个月上海的销售额")
    report = api.call("POST", "/diagnose", {"episode_id": answer["episode_id"], "expected": {"value": answer["rows"][0][-1]}}).json()
    assert report["nothing_to_explain"] is True and report["memory_id"] is None and report["hypotheses"] == []
    assert causal(api) == []


def test_a_total_of_nothing_is_an_empty_result(api, aws):
    answer = ask(api, "2030年1月上海的销售额")
    assert answer["status"] == "no_data" and answer["rows"] == [[None]]  # a period outside the data
    reply = api.call("POST", "/diagnose", {"episode_id": answer["episode_id"], "comment": "   "})
    report = reply.json()
    assert "failure" in report, (reply.status, report)
    assert report["failure"]["class"] == "empty_result"
