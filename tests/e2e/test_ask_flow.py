"""POST /ask end to end: the real AskFlow ASL on moto's Step Functions engine, Lambda tasks run
in-process by the real flow_steps handler, over the demo warehouse (DuckDB) and moto DynamoDB."""

from __future__ import annotations

import json

import pytest

from memtool.planning.plan import Plan
from memtool.runtime import container

from tests.support import Api, load_event


def ask(api: Api, question: str, **body) -> dict:
    reply = api.call("POST", "/ask", {"question": question, **body})
    assert reply.status == 200, reply.body
    return reply.json()


def episodes(api: Api) -> list[dict]:
    return api.call("GET", "/memories", query={"kind": "episodic"}).json()["items"]


def test_nl2sql_question_runs_the_whole_flow(api, aws):
    answer = ask(api, "上个月各渠道的净收入", session_id="s-1")

    assert answer["status"] == "answered", answer
    assert answer["route"] == "nl2sql_query"
    assert answer["sql"] and "LIMIT" in answer["sql"].upper()
    assert "channel" in answer["columns"] and len(answer["rows"]) == 4
    assert answer["chart"]["type"] in {"bar", "horizontal_bar", "pie"}
    for step in ("Prepare", "Recall", "Plan", "Guard", "Execute", "Visualize", "Record", "flow_overhead", "total"):
        assert step in answer["timings"]
    # Record kept the episode and the working-memory turn
    [episode] = episodes(api)
    assert episode["content"] == "上个月各渠道的净收入"
    assert episode["provenance"]["episode_id"] == answer["episode_id"]
    assert episode["value"]["outcome"] == "answered" and episode["value"]["sql"] == answer["sql"]
    working = api.call("GET", "/memories", query={"kind": "working"}).json()["items"]
    assert working[0]["value"]["turns"][-1]["episode_id"] == answer["episode_id"]


def test_the_episode_records_the_ids_and_versions_of_memories_used(api, drain):
    correction = api.call(
        "POST", "/memories", {"kind": "correction", "content": "净收入 excludes test lines and unpaid lines"}
    ).json()["memory"]
    drain.drain()
    answer = ask(api, "上个月各渠道的净收入")
    used = {(m["id"], m["version"]) for m in answer["memories_used"]}
    assert (correction["id"], 1) in used
    [episode] = episodes(api)
    assert {"id": correction["id"], "version": 1, "kind": "correction"} in episode["value"]["memories_used"]
    assert {"id": correction["id"], "version": 1} in episode["provenance"]["sources"]


def test_kpi_lookup_answers_one_number_with_a_kpi_card(api, aws):
    answer = ask(api, "上个月净收入是多少")
    assert (answer["status"], answer["route"]) == ("answered", "kpi_lookup")
    assert answer["row_count"] == 1 and answer["chart"]["type"] == "kpi_card"


def test_business_knowledge_question_is_answered_from_the_catalog_without_sql(api, aws):
    answer = ask(api, "净收入怎么算？")
    assert (answer["status"], answer["route"]) == ("answered", "business_knowledge_qa")
    assert answer["sql"] is None and answer["rows"] == []
    assert answer["answer"] and answer["citations"]
    assert "Execute" not in answer["timings"]


def test_deep_analysis_question_is_routed_and_returns_the_data(api, aws):
    answer = ask(api, "为什么最近三个月武汉的净收入下降了？按月看")
    assert answer["route"] == "deep_analysis_workflow"
    assert answer["status"] == "answered", answer
    assert answer["rows"]
    assert "Analyze" in answer["timings"]


def test_an_unknown_term_gets_a_clarification_not_a_guess(api, aws):
    answer = ask(api, "上个月西安的GMV")
    assert answer["status"] == "needs_clarification"
    assert answer["clarification"]["question"] and answer["sql"] is None
    assert "Execute" not in answer["timings"]
    [episode] = episodes(api)
    assert episode["value"]["outcome"] == "needs_clarification"


def test_a_forced_bad_route_is_a_400(api, aws):
    reply = api.call("POST", "/ask", {"question": "上个月净收入", "route": "guess"})
    assert reply.status == 400 and reply.json()["field"] == "route"
    assert episodes(api) == []


def test_a_forced_route_is_followed(api, aws):
    answer = ask(api, "上个月各渠道的净收入", route="deep_analysis_workflow")
    assert answer["route"] == "deep_analysis_workflow" and "Analyze" in answer["timings"]


@pytest.mark.parametrize(
    ("body", "field"),
    [({}, "question"), ({"question": ""}, "question"), ({"question": "x", "conditions": {"unit": "kg"}}, "conditions.unit"), ({"question": "x", "tenant": "b"}, "tenant")],
)
def test_bad_ask_bodies_name_the_field(api, aws, body, field):
    reply = api.call("POST", "/ask", body)
    assert reply.status == 400 and reply.json()["field"] == field


class ScriptedPlanner:
    """A planner double that returns fixed SQL (to reach the guard and the Catch path)."""

    def __init__(self, sql: str) -> None:
        self.sql = sql

    def plan(self, question, *, route, context):
        return Plan(status="planned", route=route, sql=self.sql, planner="scripted")


def test_a_database_error_is_caught_diagnosed_and_recorded(api, aws, monkeypatch):
    monkeypatch.setattr(container, "planner", lambda: ScriptedPlanner("SELECT CAST(region_name AS INT) AS n FROM dim_region"))

    answer = ask(api, "上个月各渠道的净收入")

    assert answer["status"] == "failed"
    assert answer["error"]["Error"] == "WarehouseError"
    assert "Diagnose" in answer["timings"] and "Visualize" not in answer["timings"]
    [episode] = episodes(api)
    assert episode["value"]["outcome"] == "failed" and episode["value"]["error"]["Error"] == "WarehouseError"


def test_blocked_sql_never_runs(api, aws, monkeypatch):
    monkeypatch.setattr(container, "planner", lambda: ScriptedPlanner("DELETE FROM dim_region"))

    answer = ask(api, "上个月各渠道的净收入")

    assert answer["status"] == "failed" and "Execute" not in answer["timings"]
    assert any("guardrails" in note for note in answer["notes"])
    # the warehouse still has its regions
    result = container.warehouse().run("SELECT COUNT(*) AS n FROM dim_region", max_rows=10, timeout_seconds=5)
    assert result.rows == [[10]]


def test_this_time_conditions_beat_the_profile_without_changing_it(api, aws):
    api.call("POST", "/memories", {"kind": "profile", "key": "display.currency_unit", "content": "金额默认用万元", "value": {"unit": "万元"}})
    with_profile = ask(api, "上个月净收入是多少")
    this_time = ask(api, "上个月净收入是多少", conditions={"unit": "分"})

    assert any("万元" in note for note in with_profile["notes"])
    assert any("分" in note for note in this_time["notes"])
    # 万元 are rounded to 2 decimals, so compare to that precision
    assert this_time["rows"][0][-1] == pytest.approx(with_profile["rows"][0][-1] * 1_000_000, abs=0.005 * 1_000_000)
    profile = api.call("GET", "/memories", query={"kind": "profile"}).json()["items"]
    assert profile[0]["value"] == {"unit": "万元"} and profile[0]["version"] == 1


def test_the_console_input_runs_on_the_local_engine(aws):
    # events/ask_flow_input.json is what an operator pastes into the Step Functions console
    execution = container.flow_runner().run("AskFlow", load_event("ask_flow_input.json"))
    assert execution.status == "SUCCEEDED", execution
    assert execution.output["status"] == "answered" and execution.output["result"]["rows"]
    assert json.dumps(execution.output, ensure_ascii=False)


class BrokenPlanner:
    def plan(self, question, *, route, context):
        raise RuntimeError("planner exploded")


def test_a_failing_step_is_recorded_and_the_answer_says_failed(api, aws, monkeypatch):
    monkeypatch.setattr(container, "planner", lambda: BrokenPlanner())

    answer = ask(api, "上个月各渠道的净收入")

    assert answer["status"] == "failed"
    assert "planner exploded" in json.dumps(answer["error"], ensure_ascii=False)
    # RecordFailure kept the episode before the flow ended in its Fail state
    [episode] = episodes(api)
    assert episode["value"]["outcome"] == "failed" and episode["provenance"]["episode_id"] == answer["episode_id"]
