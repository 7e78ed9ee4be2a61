"""Conversations through POST /ask: follow-ups read against the session's last intent, replies to a
clarification, corrections learned from them, preferences stated in chat, ending a session.

Every follow-up is checked by value: its rows equal those of the same question asked in full.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support import Api


def ask(api: Api, question: str, session: str | None = None, **body) -> dict:
    reply = api.call("POST", "/ask", {"question": question, **({"session_id": session} if session else {}), **body})
    assert reply.status == 200, reply.body
    return reply.json()


def rows(answer: dict) -> list[tuple]:
    assert answer["status"] == "answered", answer
    return sorted(tuple(row) for row in answer["rows"])


def memories(api: Api, kind: str) -> list[dict]:
    return api.call("GET", "/memories", query={"kind": kind}).json()["items"]


@pytest.mark.parametrize(
    ("first", "follow_up", "in_full"),
    [
        # every pattern, zh and en, is in tests/integration/test_follow_ups.py; these run the whole flow
        ("上个月各大区净收入", "那按渠道拆分呢", "上个月各渠道净收入"),
        ("net revenue by channel last month", "only Shanghai", "net revenue by channel in Shanghai last month"),
    ],
)
def test_a_follow_up_is_answered_as_the_full_question_would_be(api, aws, first, follow_up, in_full):
    session = f"s-{uuid.uuid4().hex[:8]}"
    ask(api, first, session)

    answer = ask(api, follow_up, session)

    assert rows(answer) == rows(ask(api, in_full)), answer["notes"]
    assert answer["carried_over"], answer
    assert any(note.startswith("carried over from the previous question") for note in answer["notes"])
    [episode] = [e for e in memories(api, "episodic") if e["value"].get("sql") == answer["sql"] and e["content"] == follow_up]
    assert episode["value"]["intent"]["metric"]  # the resolved intent is kept with the episode


def test_same_period_last_year_alone_shifts_the_previous_window_a_year(api, aws):
    session = f"s-{uuid.uuid4().hex[:8]}"
    ask(api, "上个月各大区净收入", session)
    answer = ask(api, "去年同期呢", session)
    assert rows(answer) == rows(ask(api, "2025年10月各大区净收入"))
    # On its own, without a conversation: the default window (last full month) a year earlier, not one day
    alone = ask(api, "去年同期的净收入")
    assert rows(alone) == rows(ask(api, "2025年10月的净收入"))


def test_a_question_that_stands_on_its_own_is_not_merged(api, aws):
    session = f"s-{uuid.uuid4().hex[:8]}"
    ask(api, "上个月华东各渠道的净收入", session)
    answer = ask(api, "上个月各大区销售额", session)
    assert rows(answer) == rows(ask(api, "上个月各大区销售额"))
    assert answer["carried_over"] == []


def test_a_clarification_reply_answers_the_pending_question_and_teaches_the_term(api, aws):
    session = f"s-{uuid.uuid4().hex[:8]}"
    asked = ask(api, "上个月华东各渠道的收入", session)
    assert asked["status"] == "needs_clarification" and asked["clarification"]["term"] == "收入"

    answer = ask(api, "净收入", session)

    # the pending question's grouping, window and filter are kept
    assert rows(answer) == rows(ask(api, "上个月华东各渠道的净收入"))
    [learned] = [m for m in memories(api, "correction") if m["value"]["term"] == "收入"]
    assert learned["value"]["maps_to"] == {"metric": "net_revenue"}
    assert learned["provenance"]["trigger"] == "clarification"
    assert learned["provenance"]["episode_id"] == answer["episode_id"]
    assert learned["confidence"] < 1.0 and learned["scope"] == "user"

    # later, in another session: the term is used, cited, and not asked about again
    later = ask(api, "9月各大区的收入")
    assert later["status"] == "answered"
    assert rows(later) == rows(ask(api, "9月各大区的净收入"))
    assert any(c["source"].startswith(f"memory:{learned['id']}") for c in later["citations"])
    assert [m["id"] for m in later["memories_used"]] == [learned["id"]]


@pytest.mark.parametrize("reply", ["第二个", "net sales"])
def test_a_reply_may_name_the_option_by_position_or_synonym(api, aws, reply):
    session = f"s-{uuid.uuid4().hex[:8]}"
    ask(api, "上个月各大区的收入", session)
    answer = ask(api, reply, session)
    assert rows(answer) == rows(ask(api, "上个月各大区的净收入"))


def test_an_unknown_term_clarified_with_a_value_becomes_a_correction(api, aws):
    session = f"s-{uuid.uuid4().hex[:8]}"
    asked = ask(api, "上个月浙北的净收入", session)
    assert asked["status"] == "needs_clarification" and asked["clarification"]["term"] == "浙北"
    answer = ask(api, "杭州", session)
    assert rows(answer) == rows(ask(api, "上个月杭州的净收入"))
    [learned] = [m for m in memories(api, "correction") if m["value"]["term"] == "浙北"]
    assert learned["value"]["maps_to"] == {"dimension": "city", "value": "杭州"}


def test_a_reply_that_is_not_an_option_is_a_new_question(api, aws):
    session = f"s-{uuid.uuid4().hex[:8]}"
    ask(api, "上个月各大区的收入", session)
    answer = ask(api, "上个月各渠道的销售额", session)
    assert rows(answer) == rows(ask(api, "上个月各渠道的销售额"))
    assert memories(api, "correction") == []


def test_a_lasting_preference_is_remembered_with_history_and_a_this_time_condition_is_not(api, aws):
    first = ask(api, "以后默认用万元")
    assert first["status"] == "remembered" and first["sql"] is None
    second = ask(api, "from now on show amounts in yuan by default")
    assert second["status"] == "remembered"
    [profile] = [m for m in memories(api, "profile") if m["key"] == "display.currency_unit"]
    assert profile["value"] == {"unit": "元"} and profile["version"] == 2
    history = api.call("GET", f"/memories/{profile['id']}", query={"history": "true"}).json()["history"]
    assert [h["value"] for h in history] == [{"unit": "万元"}, {"unit": "元"}]

    once = ask(api, "这次用分，上个月净收入是多少")
    assert once["status"] == "answered" and once["columns"] == ["net_revenue_fen"]
    [after] = [m for m in memories(api, "profile") if m["key"] == "display.currency_unit"]
    assert (after["version"], after["value"]) == (2, {"unit": "元"})
    assert ask(api, "上个月净收入是多少")["columns"] == ["net_revenue"]


def test_a_lasting_chart_preference_applies_to_later_answers(api, aws):
    assert ask(api, "from now on show bar charts")["status"] == "remembered"
    answer = ask(api, "每月净收入趋势")
    assert answer["chart"]["type"] == "bar"
    assert [m["kind"] for m in answer["memories_used"]] == ["profile"]


def test_ending_a_session_clears_its_working_memory(api, aws):
    session = f"s-{uuid.uuid4().hex[:8]}"
    ask(api, "上个月各大区净收入", session)
    assert any(m["session_id"] == session for m in memories(api, "working"))

    assert api.call("DELETE", f"/sessions/{session}").status == 204

    assert not any(m["session_id"] == session for m in memories(api, "working"))
    assert ask(api, "只看华东", session)["status"] == "needs_clarification"  # nothing to follow up on
    gone = api.call("DELETE", f"/sessions/{session}-never")
    assert gone.status == 404 and gone.json()["field"] == "id"


def test_unrelated_words_recall_no_memory(api, drain):
    api.call("POST", "/memories", {"kind": "profile", "content": "likes net revenue by region, monthly"})
    ask(api, "上个月各大区净收入")
    drain.drain()
    answer = ask(api, "zzz qqq unrelated words")
    assert answer["memories_recalled"] == [] and answer["memories_used"] == []
    assert answer["recall_coverage"]["dropped"].get("below_floor", 0) >= 1


def test_an_approved_fewshot_plans_a_question_the_rules_cannot_and_a_pending_one_never_does(api, drain):
    # user li teaches 动销 through a clarification and likes the answer
    session = f"s-{uuid.uuid4().hex[:8]}"
    ask(api, "上个月华东的动销", session)
    answered = ask(api, "销量", session)
    assert answered["status"] == "answered"
    liked = api.call("POST", "/feedback", {"episode_id": answered["episode_id"], "rating": 1}).json()
    candidate = liked["fewshot_candidate"]
    assert candidate["status"] == "pending_review"

    # another user of the tenant, who taught nothing: a pending example steers nothing
    wang = (api.tenant, "wang")
    pending = api.call("POST", "/ask", {"question": "上周华南的动销"}, as_user=wang).json()
    assert pending["status"] == "needs_clarification"
    assert all(m["kind"] != "fewshot" for m in pending["memories_used"])
    # the author may not approve it; an admin may
    assert api.call("POST", f"/fewshots/{candidate['id']}/approve", roles="admin").status == 403
    assert api.call("POST", f"/fewshots/{candidate['id']}/approve", as_user=(api.tenant, "boss"), roles="admin").status == 200

    planned = api.call("POST", "/ask", {"question": "上周华南的动销"}, as_user=wang).json()

    assert planned["status"] == "answered", planned["notes"]
    assert [m["id"] for m in planned["memories_used"]] == [candidate["id"]]
    assert "华南" in planned["sql"] and "华东" not in planned["sql"]
    assert rows(planned) == rows(ask(api, "上周华南的销量"))
    # a thumbs-down on an answer that used it counts against the example (its fail_count)
    api.call("POST", "/feedback", {"episode_id": planned["episode_id"], "rating": -1}, as_user=wang)
    listing = api.call("GET", "/fewshots", query={"status": "approved"}, as_user=(api.tenant, "boss"), roles="admin").json()
    [entry] = [e for e in listing["items"] if e["id"] == candidate["id"]]
    assert entry["fail_count"] == 1
