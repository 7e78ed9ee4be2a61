"""Sharing a lesson on the local runtime over HTTP: the tenant's copy keeps the cause, the repair
and the evidence, never the author's question, comment and expected value, unless the author
shares them (POST /lessons/{id}/share {"include_context": true})."""

from __future__ import annotations

import json
import time

import pytest

from memtool.demo import ApiClient
from memtool.runtime.local import LocalRuntime

from tests.support import ROOT

pytestmark = pytest.mark.slow

QUESTION = "上个月上海的销售额"
COMMENT = "私下说一句：财务那边一直按下单日算，这个数我老板看过"
CURATOR = {"X-Memtool-Roles": "curator"}


def _diagnoses(api: ApiClient, episode_id: str, *, want: int, timeout: float = 60.0) -> list[dict]:
    """Poll GET /episodes/{id} until the background drain has delivered ``want`` diagnoses."""
    deadline = time.monotonic() + timeout
    while True:
        view = api.call("GET", f"/episodes/{episode_id}")
        assert view.status == 200, view.body
        if len(view.body["diagnoses"]) >= want or time.monotonic() > deadline:
            return view.body["diagnoses"]
        time.sleep(0.2)


def _order_date_value(intent: dict) -> float:
    """The author's definition: 销售额 by order date, computed on the runtime's warehouse."""
    from memtool.runtime import container
    from memtool.semantic.compiler import CompileOptions, compile_intent
    from memtool.semantic.intent import Intent

    sql = compile_intent(Intent.model_validate(intent), options=CompileOptions().with_time_column("gross_revenue", "order_date")).sql
    return float(container.warehouse().run(sql, max_rows=5, timeout_seconds=10).rows[0][-1])


def _tenant_lessons(api: ApiClient) -> list[dict]:
    page = api.call("GET", "/memories?kind=causal&scope=tenant&status=active")
    assert page.status == 200, page.body
    return page.body["items"]


def test_a_shared_lesson_keeps_cause_repair_and_evidence_and_the_authors_words_only_when_they_share_them(tmp_path):
    with LocalRuntime(home=tmp_path / "home", port=0, root=ROOT, warehouse_scale=0.05) as runtime:
        li = ApiClient(runtime.api_url, "acme", "li")
        first = li.call("POST", "/ask", {"question": QUESTION}).body
        assert first["status"] == "answered" and "paid_at" in first["sql"], first
        episode = li.call("GET", f"/episodes/{first['episode_id']}").body["episode"]
        # within the diagnosis tolerance of the order-date value, and not that value: the copy's
        # test results hold the repaired value, and nothing may hold li's own number
        expected = round(_order_date_value(episode["value"]["intent"]) * 1.0004, 2)
        private = (QUESTION, COMMENT, f"{expected:,.4f}", repr(expected))

        # li's thumbs-down with a private comment and the value li expected: li's own lesson holds them
        feedback = li.call(
            "POST", "/feedback", {"episode_id": first["episode_id"], "rating": -1, "expected": {"value": expected}, "comment": COMMENT}
        )
        assert feedback.status == 200 and feedback.body["diagnosis_queued"] is True, feedback.body
        [lesson] = _diagnoses(li, first["episode_id"], want=1)
        assert lesson["status"] == "active" and lesson["value"]["verified"] is True and lesson["value"]["cause"] == "time_column"
        mine = lesson["value"]
        assert mine["feedback"]["comment"] == COMMENT and mine["feedback"]["expected"]["value"] == expected
        assert mine["scenario"]["question"] == QUESTION and f"{expected:,.4f}" in json.dumps(mine["trajectory"], ensure_ascii=False)

        # a curator cannot share li's words for li; sharing li's lesson shares the lesson only
        chen = ApiClient(runtime.api_url, "acme", "chen")
        refused = chen.call("POST", f"/lessons/{lesson['id']}/share", {"owner": "li", "include_context": True}, headers=CURATOR)
        assert refused.status == 403 and refused.body["field"] == "include_context", refused.body
        not_a_flag = chen.call("POST", f"/lessons/{lesson['id']}/share", {"owner": "li", "include_context": "yes"}, headers=CURATOR)
        assert not_a_flag.status == 400 and not_a_flag.body["field"] == "include_context", not_a_flag.body
        assert _tenant_lessons(chen) == []
        shared = chen.call("POST", f"/lessons/{lesson['id']}/share", {"owner": "li"}, headers=CURATOR)
        assert shared.status == 201, shared.body

        # wang, of the same tenant, reads the copy: none of li's words, all of the lesson
        wang = ApiClient(runtime.api_url, "acme", "wang")
        [copy] = _tenant_lessons(wang)
        assert copy["id"] == shared.body["memory"]["id"] and copy["scope"] == "tenant"
        assert wang.call("GET", f"/memories/{copy['id']}").body["memory"] == copy
        text = json.dumps(copy, ensure_ascii=False)
        assert not [word for word in private if word in text], text
        value = copy["value"]
        assert "comment" not in value["feedback"] and "expected" not in value["feedback"]
        assert value["feedback"] == {"reason": mine["feedback"]["reason"]}
        assert value["scenario"] == {"intent": mine["scenario"]["intent"], "route": mine["scenario"]["route"]}
        assert copy["source_text"] is None and copy["session_id"] is None and "request_id" not in value
        assert copy["content"] == mine["root_cause"]
        assert copy["provenance"]["author"] == "chen" and copy["provenance"]["episode_id"] == first["episode_id"]
        assert copy["provenance"]["sources"] == [{"id": lesson["id"], "version": lesson["version"]}]
        assert value["shared_from"] == {"id": lesson["id"], "version": lesson["version"], "by": "chen", "context": False}
        # the cause, the repair and the evidence: the SQL before and after, every test and its result
        for part in ("cause", "root_cause", "repair", "failure", "repaired_output", "verified", "lesson", "executions"):
            assert value[part] == mine[part], part
        assert value["initial_state"] == mine["initial_state"] and value["repair"]["sql"] and value["initial_state"]["sql"]
        assert [(s["step"], s["input"]) for s in value["trajectory"]] == [(s["step"], s["input"]) for s in mine["trajectory"]]
        results = ("result", "value", "row_count", "executed")
        for theirs, ours in zip(value["trajectory"], mine["trajectory"], strict=True):
            assert {k: theirs["output"].get(k) for k in results} == {k: ours["output"].get(k) for k in results}
        assert value["evidence"] and "matches the expected value within" in value["evidence"], value["evidence"]
        assert value["evidence"].split(" matches ")[0] == mine["evidence"].split(" matches ")[0]  # the repaired value stays

        # the copy is still a lesson: wang's question on that metric counts by order date
        beijing = wang.call("POST", "/ask", {"question": "上个月北京的销售额"}).body
        assert "order_date" in beijing["sql"] and any(copy["id"] in note for note in beijing["notes"]), beijing

        # li, a curator too, shares the lesson with its context: wang now sees li's words
        opted = li.call("POST", f"/lessons/{lesson['id']}/share", {"include_context": True}, headers=CURATOR)
        assert opted.status == 201 and opted.body["memory"]["id"] != copy["id"], opted.body
        again = li.call("POST", f"/lessons/{lesson['id']}/share", {"include_context": True}, headers=CURATOR)
        assert again.body["memory"]["id"] == opted.body["memory"]["id"]  # shared already: the same copy
        [full] = _tenant_lessons(wang)
        assert full["id"] == opted.body["memory"]["id"]
        assert full["value"]["feedback"]["comment"] == COMMENT and full["value"]["feedback"]["expected"]["value"] == expected
        assert full["value"]["scenario"]["question"] == QUESTION and full["source_text"] == QUESTION
        assert full["value"]["shared_from"]["context"] is True and full["value"]["evidence"] == mine["evidence"]
        # the copy without them is superseded by it: one tenant copy of one lesson applies
        before = wang.call("GET", f"/memories/{copy['id']}").body["memory"]
        assert before["status"] == "archived" and full["id"] in before["status_reason"]
        # archived, not erased: a curator forgets it
        assert wang.call("DELETE", f"/memories/{copy['id']}").status == 403
        assert chen.call("DELETE", f"/memories/{copy['id']}", headers=CURATOR).status in (200, 204)
        assert wang.call("GET", f"/memories/{copy['id']}").status == 404
