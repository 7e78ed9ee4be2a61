"""Diagnosis on the local runtime over HTTP, as a user meets it: feedback queues a diagnosis, the
runtime's own drain delivers it to DiagnoseFunction, and GET /episodes/{id} shows the result."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from memtool.demo import ApiClient
from memtool.runtime.local import LocalRuntime

from tests.support import ROOT

pytestmark = pytest.mark.slow


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
    """The user's own definition: 销售额 by order date, computed on the runtime's warehouse."""
    from memtool.runtime import container
    from memtool.semantic.compiler import CompileOptions, compile_intent
    from memtool.semantic.intent import Intent

    sql = compile_intent(Intent.model_validate(intent), options=CompileOptions().with_time_column("gross_revenue", "order_date")).sql
    return float(container.warehouse().run(sql, max_rows=5, timeout_seconds=10).rows[0][-1])


def test_feedback_is_diagnosed_through_the_queue_and_shows_on_the_episode(tmp_path):
    with LocalRuntime(home=tmp_path / "home", port=0, root=ROOT, warehouse_scale=0.05) as runtime:
        li = ApiClient(runtime.api_url, "acme", "li")
        first = li.call("POST", "/ask", {"question": "上个月上海的销售额"}).body
        assert first["status"] == "answered" and "paid_at" in first["sql"], first
        episode = li.call("GET", f"/episodes/{first['episode_id']}").body["episode"]
        expected = _order_date_value(episode["value"]["intent"])

        # a thumbs-down with the value li expected: queued, then drained by the runtime itself
        feedback = li.call("POST", "/feedback", {"episode_id": first["episode_id"], "rating": -1, "expected": {"value": expected}})
        assert feedback.status == 200 and feedback.body["diagnosis_queued"] is True, feedback.body
        [diagnosis] = _diagnoses(li, first["episode_id"], want=1)
        assert diagnosis["status"] == "active" and diagnosis["value"]["verified"] is True
        assert diagnosis["value"]["cause"] == "time_column" and diagnosis["kind"] == "causal"
        health = json.loads(urllib.request.urlopen(f"{runtime.api_url}/health", timeout=10).read())
        assert health["diagnosis_queue"]["pending"] == 0 and health["diagnosis_queue"]["dead_letters"] == 0
        assert health["diagnosis_queue"]["delivered"] >= 1
        # the SQL cache's counts are there too: 上个月上海的销售额 was stored, then the diagnosis changed nothing yet
        assert health["cache"]["stored"] >= 1 and "misses_by_reason" in health["cache"]

        # li's next question on that metric counts by order date; wang's does not
        beijing = li.call("POST", "/ask", {"question": "上个月北京的销售额"}).body
        assert "order_date" in beijing["sql"] and any(diagnosis["id"] in note for note in beijing["notes"])
        wang = ApiClient(runtime.api_url, "acme", "wang").call("POST", "/ask", {"question": "上个月北京的销售额"}).body
        assert "order_date" not in wang["sql"]

        # a bare thumbs-down is diagnosed too, but nothing can verify it: it waits for review
        other = li.call("POST", "/ask", {"question": "上个月各渠道的净收入"}).body
        li.call("POST", "/feedback", {"episode_id": other["episode_id"], "rating": -1, "comment": "不对"})
        [pending] = _diagnoses(li, other["episode_id"], want=1)
        assert pending["status"] == "pending_review" and pending["value"]["verified"] is False
        again = li.call("POST", "/ask", {"question": "上个月各渠道的净收入"}).body
        assert again["sql"] == other["sql"] and not any(m["kind"] == "causal" for m in again["memories_used"])
        # the same feedback sent twice is diagnosed once
        li.call("POST", "/feedback", {"episode_id": other["episode_id"], "rating": -1, "comment": "不对"})
        runtime.drain_diagnoses()
        assert len(_diagnoses(li, other["episode_id"], want=2, timeout=2)) == 1
