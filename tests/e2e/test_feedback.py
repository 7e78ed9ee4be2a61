"""POST /feedback end to end: reward, credit to exactly the applied memories, replacement of a second
rating, corrections from chat, retirement, few-shot candidates, and refusals that write nothing."""

from __future__ import annotations

import uuid

import pytest

from memtool.settings import use_settings

from tests.support import Api


def ask(api: Api, question: str, **body) -> dict:
    reply = api.call("POST", "/ask", {"question": question, **body})
    assert reply.status == 200, reply.body
    return reply.json()


def remember(api: Api, body: dict, roles: str | None = None) -> dict:
    reply = api.call("POST", "/memories", body, roles=roles)
    assert reply.status == 201, reply.body
    return reply.json()["memory"]


def memory(api: Api, memory_id: str, **query) -> dict:
    reply = api.call("GET", f"/memories/{memory_id}", query=query)
    assert reply.status == 200, reply.body
    return reply.json()


def feedback(api: Api, body: dict, **kwargs):
    return api.call("POST", "/feedback", body, **kwargs)


TERM = {"term": "单子数", "maps_to": {"metric": "order_count"}}


@pytest.fixture
def taught(api: Api, drain) -> dict:
    """A correction the planner applies (单子数 -> 订单数) and a note recall finds but nobody applies."""
    correction = remember(api, {"kind": "correction", "content": "单子数 means the number of orders", "value": TERM})
    note = remember(api, {"kind": "correction", "content": "单子数 and 订单数 questions come from the ops team"})
    drain.drain()
    return {"correction": correction, "note": note}


def test_feedback_credits_exactly_the_applied_memories(api, taught):
    answer = ask(api, "上个月各渠道的单子数")
    assert {m["id"] for m in answer["memories_used"]} == {taught["correction"]["id"]}
    assert taught["note"]["id"] in {m["id"] for m in answer["memories_recalled"]}

    reply = feedback(api, {"episode_id": answer["episode_id"], "rating": 1})

    assert reply.status == 200, reply.body
    body = reply.json()
    assert body["reward"]["total"] == pytest.approx(0.7 * 1.0 + 0.3 * 1.0)
    assert body["reward"]["user_source"] == "rating" and body["replaced"] is False
    roles = {(c["id"], c["role"]) for c in body["credited"]}
    assert (taught["correction"]["id"], "applied") in roles
    assert taught["note"]["id"] not in {c["id"] for c in body["credited"]}
    stored = memory(api, taught["correction"]["id"])["memory"]
    assert stored["credit"]["uses"] == 1 and stored["credit"]["successes"] == 1 and stored["credit"]["failures"] == 0
    assert stored["credit"]["feedback_score"] > 0 and stored["last_used_at"] is not None
    assert stored["version"] == 1  # credit is usage, not a new version of the content
    untouched = memory(api, taught["note"]["id"])["memory"]
    assert untouched["credit"]["uses"] == 0 and untouched["last_used_at"] is None


def test_a_second_rating_of_an_episode_replaces_the_first(api, taught):
    answer = ask(api, "上个月各渠道的单子数")
    feedback(api, {"episode_id": answer["episode_id"], "rating": 1})

    reply = feedback(api, {"episode_id": answer["episode_id"], "rating": -1})

    assert reply.status == 200 and reply.json()["replaced"] is True
    credit = memory(api, taught["correction"]["id"])["memory"]["credit"]
    assert (credit["uses"], credit["successes"], credit["failures"]) == (1, 0, 1)
    assert credit["feedback_score"] < 0


def test_implicit_signals_count_when_there_is_no_rating(api, taught):
    answer = ask(api, "上个月各渠道的单子数")
    reply = feedback(api, {"episode_id": answer["episode_id"], "signals": {"copied": True, "dwell_ms": 30000}})
    assert reply.status == 200
    reward = reply.json()["reward"]
    assert reward["user_source"] == "signals" and reward["user"] == pytest.approx(1.0)


def test_feedback_on_an_unknown_or_anothers_episode_is_a_404(api, aws):
    answer = ask(api, "上个月净收入是多少")
    unknown = feedback(api, {"episode_id": "ep_NOPE", "rating": 1})
    assert unknown.status == 404 and unknown.json()["field"] == "episode_id"
    stranger = feedback(api, {"episode_id": answer["episode_id"], "rating": -1}, as_user=(api.tenant, "wang"))
    assert stranger.status == 404 and stranger.json()["field"] == "episode_id"
    other_tenant = feedback(api, {"episode_id": answer["episode_id"], "rating": -1}, as_user=("globex", api.user))
    assert other_tenant.status == 404


BAD_FEEDBACK = [
    ({"rating": 2}, "rating"),
    ({"rating": "1"}, "rating"),
    ({"rating": True}, "rating"),
    ({"rating": 1, "comment": "x" * 2001}, "comment"),
    ({"rating": 1, "mood": "happy"}, "mood"),
    ({"rating": 1, "signals": {"dwell_ms": -1}}, "signals.dwell_ms"),
    ({"rating": 1, "correction": {"term": "单子数"}}, "correction.means"),
    ({"rating": 1, "correction": "利润就是毛利"}, "correction"),
    ({"rating": 1, "correction": {"term": "开方量", "means": "毛利率"}}, "correction.means"),
    ({"rating": 1, "correction": "this is not a correction"}, "correction"),
    ({"rating": 1, "correction": {"term": "x" * 51, "means": "订单数"}}, "correction.term"),
    ({}, "rating"),
    ({"comment": "  "}, "rating"),
    ({"signals": {"copied": False}}, "rating"),
    ({"correction": "订单数就是销售额"}, "correction"),
    ({"correction": "上个月就是订单数"}, "correction"),
    ({"correction": {"term": "单子\u200b数", "means": "订单数"}}, "correction.term"),
]


def test_bad_feedback_is_a_4xx_naming_the_field_and_writes_nothing(api, taught):
    answer = ask(api, "上个月各渠道的单子数")
    [episode] = [e for e in api.call("GET", "/memories", query={"kind": "episodic"}).json()["items"] if e["content"] == "上个月各渠道的单子数"]

    for body, field in BAD_FEEDBACK:
        reply = feedback(api, {"episode_id": answer["episode_id"], **body})

        assert 400 <= reply.status < 500, (body, reply.body)
        assert field in reply.json()["field"], (body, reply.json())
    assert memory(api, taught["correction"]["id"])["memory"]["credit"]["uses"] == 0
    assert memory(api, episode["id"])["memory"]["version"] == episode["version"]
    corrections = api.call("GET", "/memories", query={"kind": "correction"}).json()["items"]
    assert len(corrections) == 2


def test_a_correction_in_chat_becomes_a_correction_memory_and_a_newer_one_supersedes_it(api, aws):
    asked = ask(api, "上个月各渠道的开方量")
    assert asked["status"] == "needs_clarification"

    reply = feedback(api, {"episode_id": asked["episode_id"], "rating": -1, "correction": "开方量指的是处方量"})

    assert reply.status == 200, reply.body
    taught = reply.json()["correction"]
    assert taught["value"] == {"term": "开方量", "maps_to": {"metric": "rx_volume"}}
    assert taught["provenance"]["trigger"] == "correction" and taught["confidence"] == 1.0 and taught["scope"] == "user"
    answer = ask(api, "9月各大区的开方量")
    assert answer["status"] == "answered" and answer["columns"] == ["region", "rx_volume"]
    assert [m["id"] for m in answer["memories_used"]] == [taught["id"]]

    newer = feedback(api, {"episode_id": answer["episode_id"], "correction": {"term": "开方量", "means": "销量"}}).json()["correction"]
    assert newer["id"] == taught["id"] and newer["version"] == 2
    history = memory(api, taught["id"], history="true")["history"]
    assert [h["value"]["maps_to"] for h in history] == [{"metric": "rx_volume"}, {"metric": "units"}]


def test_sharing_a_correction_with_the_tenant_takes_a_curator(api, aws):
    answer = ask(api, "上个月净收入是多少")
    refused = feedback(api, {"episode_id": answer["episode_id"], "correction": {"term": "takings", "means": "net revenue", "scope": "tenant"}})
    assert refused.status == 403 and refused.json()["field"] == "correction.scope"
    shared = feedback(
        api,
        {"episode_id": answer["episode_id"], "correction": {"term": "takings", "means": "net revenue", "scope": "tenant"}},
        roles="curator",
    )
    assert shared.status == 200 and shared.json()["correction"]["scope"] == "tenant"
    # another user of the tenant now gets the meaning
    other = api.call("POST", "/ask", {"question": "takings by channel last month"}, as_user=(api.tenant, "wang")).json()
    assert other["status"] == "answered" and other["columns"] == ["channel", "net_revenue"]


def test_a_memory_that_keeps_failing_is_archived_with_the_reason(api, aws, taught):
    use_settings(aws.model_copy(update={"retire_after_uses": 3, "retire_below_score": -0.15}))
    for _ in range(3):
        answer = ask(api, "上个月各渠道的单子数")
        reply = feedback(api, {"episode_id": answer["episode_id"], "rating": -1})
    credited = {c["id"]: c for c in reply.json()["credited"]}[taught["correction"]["id"]]
    assert credited["retired"] is True and credited["status"] == "archived"
    read = memory(api, taught["correction"]["id"], history="true")
    assert read["memory"]["status"] == "archived" and "retired by feedback" in read["memory"]["status_reason"]
    assert [h["status"] for h in read["history"]] == ["superseded", "archived"]
    # an archived correction is no longer applied
    assert ask(api, "上个月各渠道的单子数")["status"] == "needs_clarification"


def test_a_thumbs_up_records_a_fewshot_candidate_pending_review(api, taught):
    answer = ask(api, "上个月各渠道的单子数")
    reply = feedback(api, {"episode_id": answer["episode_id"], "rating": 1}).json()
    candidate = reply["fewshot_candidate"]
    assert candidate is not None and candidate["status"] == "pending_review"
    listing = api.call("GET", "/fewshots", query={"status": "pending_review"}, roles="admin").json()["items"]
    [entry] = [e for e in listing if e["id"] == candidate["id"]]
    assert entry["question"] == "上个月各渠道的单子数" and entry["sql"] == answer["sql"]
    # a thumbs-down or an answer that failed records nothing
    down = feedback(api, {"episode_id": ask(api, "上个月各大区的单子数")["episode_id"], "rating": -1}).json()
    assert down["fewshot_candidate"] is None


def test_feedback_is_idempotent_for_a_request_id(api, taught):
    answer = ask(api, "上个月各渠道的单子数")
    key = {"Idempotency-Key": f"fb-{uuid.uuid4().hex}"}
    first = feedback(api, {"episode_id": answer["episode_id"], "rating": 1}, headers=key)
    again = feedback(api, {"episode_id": answer["episode_id"], "rating": 1}, headers=key)
    assert first.status == again.status == 200 and first.json() == again.json()
    assert memory(api, taught["correction"]["id"])["memory"]["credit"]["uses"] == 1


def test_a_comment_keeps_the_rating_and_a_correction_alone_says_the_answer_was_wrong(api, taught):
    answer = ask(api, "上个月各渠道的单子数")
    feedback(api, {"episode_id": answer["episode_id"], "rating": 1})
    kept = feedback(api, {"episode_id": answer["episode_id"], "comment": "thanks"}).json()
    assert kept["reward"]["total"] == pytest.approx(1.0)
    credit = memory(api, taught["correction"]["id"])["memory"]["credit"]
    assert (credit["uses"], credit["successes"]) == (1, 1)

    # a correction after a rating keeps that rating; on an episode never rated it says "wrong"
    later = feedback(api, {"episode_id": answer["episode_id"], "correction": "单据数就是订单数"}).json()
    assert later["reward"]["total"] == pytest.approx(1.0)
    second = ask(api, "上个月各大区的单子数")
    wrong = feedback(api, {"episode_id": second["episode_id"], "correction": "单子数指的是销量"}).json()
    assert wrong["reward"]["total"] < 0 and wrong["reward"]["user"] == -1.0
    credit = memory(api, taught["correction"]["id"])["memory"]["credit"]
    assert (credit["uses"], credit["successes"], credit["failures"]) == (2, 1, 1)  # the contradicted meaning failed


def test_changing_a_thumbs_up_withdraws_its_fewshot_candidate(api, taught):
    answer = ask(api, "上个月各渠道的单子数")
    candidate = feedback(api, {"episode_id": answer["episode_id"], "rating": 1}).json()["fewshot_candidate"]
    feedback(api, {"episode_id": answer["episode_id"], "rating": -1})
    read = api.call("GET", f"/memories/{candidate['id']}", roles="admin").json()["memory"]
    assert read["status"] == "archived" and "withdrawn" in read["status_reason"]
    assert api.call("POST", f"/fewshots/{candidate['id']}/approve", as_user=(api.tenant, "boss"), roles="admin").status == 409


def test_one_users_thumbs_downs_never_archive_a_shared_correction(api, aws, drain):
    use_settings(aws.model_copy(update={"retire_after_uses": 2, "retire_below_score": -0.1}))
    shared = remember(api, {"kind": "correction", "scope": "tenant", "content": "开方量 = 处方量", "value": {"term": "开方量", "maps_to": {"metric": "rx_volume"}}}, roles="curator")
    drain.drain()
    for _ in range(3):
        answer = ask(api, "上个月各大区的开方量")
        reply = feedback(api, {"episode_id": answer["episode_id"], "rating": -1}).json()
    assert any("a curator should review it" in note for note in reply["notes"])
    assert memory(api, shared["id"])["memory"]["status"] == "active"
    other = api.call("POST", "/ask", {"question": "上个月各大区的开方量"}, as_user=(api.tenant, "wang")).json()
    assert other["status"] == "answered"  # everyone else still gets the shared meaning


def test_signals_after_a_rating_keep_it_and_another_users_rerating_never_withdraws_an_example(api, taught):
    answer = ask(api, "上个月各渠道的单子数")
    candidate = feedback(api, {"episode_id": answer["episode_id"], "rating": 1}).json()["fewshot_candidate"]
    kept = feedback(api, {"episode_id": answer["episode_id"], "signals": {"copied": True}}).json()
    assert kept["reward"]["user_source"] == "rating" and kept["reward"]["total"] == pytest.approx(1.0)
    assert api.call("POST", f"/fewshots/{candidate['id']}/approve", as_user=(api.tenant, "boss"), roles="admin").status == 200

    # another user likes the same question, then changes their mind: the approved example stays
    wang = (api.tenant, "wang")
    api.call("POST", "/memories", {"kind": "correction", "content": "单子数 = 订单数", "value": TERM}, as_user=wang)
    theirs = api.call("POST", "/ask", {"question": "上个月各渠道的单子数"}, as_user=wang).json()
    api.call("POST", "/feedback", {"episode_id": theirs["episode_id"], "rating": 1}, as_user=wang)
    api.call("POST", "/feedback", {"episode_id": theirs["episode_id"], "rating": -1}, as_user=wang)
    assert api.call("GET", f"/memories/{candidate['id']}", roles="admin").json()["memory"]["status"] == "approved"


def test_an_answer_reached_by_choosing_a_place_is_not_recorded_as_an_example(api, aws):
    session = f"s-{uuid.uuid4().hex[:8]}"
    asked = ask(api, "上个月西安各渠道的净收入", session_id=session)
    assert asked["status"] == "needs_clarification"
    answer = ask(api, "北京", session_id=session)
    assert answer["status"] == "answered"
    reply = feedback(api, {"episode_id": answer["episode_id"], "rating": 1}).json()
    assert reply["fewshot_candidate"] is None
    assert any("not recorded as an example" in note for note in reply["notes"])


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"term": "销售额", "maps_to": {"metric": "refund_amount"}}, "value.term"),
        ({"term": "上个月", "maps_to": {"dimension": "region", "value": "华北"}}, "value.term"),
        ({"term": "\u200b单子", "maps_to": {"metric": "order_count"}}, "value.term"),
        ({"term": "单子数", "maps_to": {"metric": "no_such"}}, "value.maps_to"),
        ({"term": "火星站", "maps_to": {"dimension": "city", "value": "火星"}}, "value.maps_to"),
    ],
)
def test_a_correction_written_through_the_memory_api_is_checked_like_one_from_chat(api, aws, value, field):
    reply = api.call("POST", "/memories", {"kind": "correction", "content": "taught", "value": value, "scope": "tenant"}, roles="curator")
    assert reply.status == 400 and reply.json()["field"] == field, reply.body
    assert api.call("GET", "/memories", query={"kind": "correction", "scope": "tenant"}).json()["items"] == []


def test_only_admins_delete_fewshots(api, aws):
    from memtool.runtime import container

    shot = container.fewshot_library().record_candidate(api.tenant, "li", episode_id="ep_y", question="上月净收入", intent=None, sql="SELECT 1", reward=1.0)
    assert api.call("DELETE", f"/memories/{shot.id}", roles="curator").status == 403
    assert api.call("DELETE", f"/memories/{shot.id}", roles="admin").status == 204
