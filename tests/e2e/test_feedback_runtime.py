"""Feedback on the local runtime over HTTP, as a user runs it: twenty concurrent feedbacks on
episodes that share a memory lose no update, and the credit survives a restart.

In-process moto is neither atomic nor isolated under threads, so this runs the runtime's own
stores: SQLite (the default) and DynamoDB on the locked-down moto server."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from memtool.demo import ApiClient
from memtool.runtime.local import LocalRuntime

from tests.support import ROOT

pytestmark = pytest.mark.slow

CORRECTION = {
    "kind": "correction",
    "content": "单子数 means the number of orders",
    "value": {"term": "单子数", "maps_to": {"metric": "order_count"}},
}


@pytest.mark.parametrize(("store", "feedbacks"), [("sqlite", 20), ("dynamodb", 6)])
def test_concurrent_feedback_loses_no_update_and_credit_survives_a_restart(tmp_path, store, feedbacks):
    home = tmp_path / "home"
    with LocalRuntime(home=home, port=0, root=ROOT, store=store, warehouse_scale=0.05) as runtime:
        api = ApiClient(runtime.api_url, "acme", "li")
        taught = api.call("POST", "/memories", CORRECTION)
        assert taught.status == 201, taught.body
        memory_id = taught.body["memory"]["id"]
        episodes = []
        for n in range(feedbacks):
            answer = api.call("POST", "/ask", {"question": f"上个月各渠道的单子数{'。' * (n % 2)}"})
            assert answer.status == 200 and answer.body["status"] == "answered", answer.body
            assert [m["id"] for m in answer.body["memories_used"]] == [memory_id]
            episodes.append(answer.body["episode_id"])

        def rate(episode_id: str) -> int:
            return api.call("POST", "/feedback", {"episode_id": episode_id, "rating": 1}).status

        with ThreadPoolExecutor(max_workers=feedbacks) as pool:
            statuses = list(pool.map(rate, episodes))
        assert statuses == [200] * feedbacks

        credit = api.call("GET", f"/memories/{memory_id}").body["memory"]["credit"]
        assert credit["uses"] == feedbacks and credit["successes"] == feedbacks
        assert sorted(entry["episode_id"] for entry in credit["recent"]) == sorted(episodes)

    with LocalRuntime(home=home, port=0, root=ROOT, store=store, warehouse_scale=0.05) as again:
        after = ApiClient(again.api_url, "acme", "li").call("GET", f"/memories/{memory_id}").body["memory"]
        assert after["credit"] == credit
        assert after["last_used_at"] is not None
