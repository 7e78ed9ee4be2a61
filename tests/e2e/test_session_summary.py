"""Sessions that are summarised and distilled (docs/learning.md, Sessions), over the API:

- a 14-turn session still resolves, at turn 14, a follow-up that depends on turn 2's metric,
  though turn 2 left the session's 10-turn window long before (its summary kept it);
- ending the session writes the user's ``usage.frequent``, and the user's next clarification
  lists their usual metric first, where another user gets the catalog's order.
"""

from __future__ import annotations

import uuid

from tests.support import Api


def ask(api: Api, question: str, session: str | None = None, **kwargs) -> dict:
    reply = api.call("POST", "/ask", {"question": question, **({"session_id": session} if session else {})}, **kwargs)
    assert reply.status == 200, reply.body
    return reply.json()


AMBIGUOUS = "上个月华东各渠道的收入"  # 收入: which revenue?


def test_a_long_session_keeps_its_thread_and_ending_it_teaches_the_usual_metric(api, aws):
    # the catalog's order, for a user who has ended no session
    stranger = ask(api, AMBIGUOUS, as_user=(api.tenant, "wang"))
    assert stranger["status"] == "needs_clarification", stranger
    options, targets = stranger["clarification"]["options"], stranger["clarification"]["targets"]
    assert len(options) >= 2 and all(t.get("metric") for t in targets), stranger["clarification"]
    usual_label, usual_metric = options[-1], targets[-1]["metric"]  # not first for anyone yet

    session = f"s-{uuid.uuid4().hex[:8]}"
    assert ask(api, "以后金额用万元", session)["status"] == "remembered"  # turn 1
    second = ask(api, f"上个月各渠道的{usual_label}", session)  # turn 2: the metric the thread is about
    assert second["status"] == "answered" and any(c.startswith(usual_metric) for c in second["columns"]), second
    for n in range(11):  # turns 3..13: preferences, nothing answered
        said = ask(api, "以后金额用元" if n % 2 else "以后金额用万元", session)
        assert said["status"] == "remembered", said

    follow_up = ask(api, "按大区看呢", session)  # turn 14

    assert follow_up["status"] == "answered", follow_up
    assert any(c.startswith(usual_metric) for c in follow_up["columns"]) and "region" in follow_up["columns"], follow_up
    working = api.call("GET", "/memories", query={"kind": "working"}).json()["items"]
    [turns] = [m for m in working if m["key"] == f"session.{session}.turns"]
    assert len(turns["value"]["turns"]) == 10 and turns["value"]["summary"]["turns_folded"] == 4
    assert turns["value"]["summary"]["last_answered"]["episode_id"] == second["episode_id"]

    # ending it distils the session into the user's profile
    assert api.call("DELETE", f"/sessions/{session}").status == 204
    profile = api.call("GET", "/memories", query={"kind": "profile"}).json()["items"]
    [usage] = [m for m in profile if m["key"] == "usage.frequent"]
    assert usage["value"]["metrics"][usual_metric] == 2 and usage["value"]["sessions"] == 1, usage["value"]

    # the next clarification offers the usual metric first; the stranger's order is unchanged
    asked = ask(api, AMBIGUOUS)
    assert asked["status"] == "needs_clarification"
    assert asked["clarification"]["options"][0] == usual_label and asked["clarification"]["targets"][0]["metric"] == usual_metric
    assert sorted(asked["clarification"]["options"]) == sorted(options)
    assert ask(api, AMBIGUOUS, as_user=(api.tenant, "wang"))["clarification"]["options"] == options
