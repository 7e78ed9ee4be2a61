"""The few-shot review API end to end: the feedback handler, the library, the store on moto.

Candidates are recorded as the feedback flow records them (through the library); reviewers list,
approve and reject them over the in-process API gateway.
"""

from __future__ import annotations

import pytest

from memtool.runtime import container

AUTHOR, REVIEWER = "li", "wang"
SQL = "SELECT SUM(units) AS units FROM order_lines WHERE region = '华南'"
INTENT = {"metric": "units", "filters": [{"dimension": "region", "op": "in", "values": ["华南"]}]}


def candidate(api, question: str = "上个月华南的动销", *, sql: str = SQL, reward: float = 1.0) -> str:
    record = container.fewshot_library().record_candidate(
        api.tenant,
        AUTHOR,
        episode_id="ep_1",
        question=question,
        intent=INTENT,
        sql=sql,
        reward=reward,
        masked="{window}{region}的动销",
    )
    return record.id


def as_admin(api, method: str, path: str, body=None, *, user: str = REVIEWER, **kwargs):
    return api.call(method, path, body, as_user=(api.tenant, user), roles="admin", **kwargs)


@pytest.mark.parametrize("roles", [None, "curator", "viewer,curator"])
def test_every_fewshot_route_is_for_admins_only(api, roles):
    memory_id = candidate(api)
    for method, path in (
        ("GET", "/fewshots"),
        ("POST", f"/fewshots/{memory_id}/approve"),
        ("POST", f"/fewshots/{memory_id}/reject"),
    ):
        reply = api.call(method, path, as_user=(api.tenant, REVIEWER), roles=roles)
        assert reply.status == 403, (method, path, reply.body)
        assert reply.json()["error"] == "forbidden" and reply.json()["field"] == "roles"
    assert container.fewshot_library().get(api.tenant, memory_id).status.value == "pending_review"


def test_an_unknown_id_is_a_404(api):
    for action in ("approve", "reject"):
        reply = as_admin(api, "POST", f"/fewshots/mem_nothing_here/{action}")
        assert reply.status == 404 and reply.json()["field"] == "id"


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "field"),
    [
        ("GET", "/fewshots", {"query": {"status": "active"}}, "status"),
        ("GET", "/fewshots", {"query": {"limit": "0"}}, "limit"),
        ("GET", "/fewshots", {"query": {"state": "approved"}}, "state"),
        ("POST", "/fewshots/{id}/approve", {"body": {"reason": "x" * 501}}, "reason"),
        ("POST", "/fewshots/{id}/reject", {"body": {"reason": "ok", "expected_version": 1}}, "expected_version"),
        ("POST", "/fewshots/{id}/reject", {"body": {"reason": 5}}, "reason"),
        ("POST", "/fewshots/{id}/approve", {"headers": {"Idempotency-Key": "bad key"}}, "Idempotency-Key"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(api, method, path, kwargs, field):
    memory_id = candidate(api)
    body = kwargs.pop("body", None)

    reply = as_admin(api, method, path.format(id=memory_id), body, **kwargs)

    assert reply.status == 400, reply.body
    assert reply.json()["field"] == field
    assert container.fewshot_library().get(api.tenant, memory_id).version == 1  # nothing written


def test_the_library_is_listed_by_status_with_the_review_queue_first(api):
    first = candidate(api)
    second = candidate(api, sql="SELECT 2")
    third = candidate(api, sql="SELECT 3")
    assert as_admin(api, "POST", f"/fewshots/{first}/approve").status == 200
    assert as_admin(api, "POST", f"/fewshots/{second}/reject", {"reason": "wrong join"}).status == 200

    default = as_admin(api, "GET", "/fewshots")
    approved = as_admin(api, "GET", "/fewshots", query={"status": "approved"})
    rejected = as_admin(api, "GET", "/fewshots", query={"status": "rejected"})
    archived = as_admin(api, "GET", "/fewshots", query={"status": "archived"})

    assert [i["id"] for i in default.json()["items"]] == [third]
    assert [i["id"] for i in approved.json()["items"]] == [first]
    assert [(i["id"], i["status_reason"]) for i in rejected.json()["items"]] == [(second, "wrong join")]
    assert archived.json() == {"items": [], "next_cursor": None}
    # Another tenant's admin sees none of them
    other = api.call("GET", "/fewshots", as_user=(f"{api.tenant}-b", REVIEWER), roles="admin")
    assert other.status == 200 and other.json()["items"] == []


def test_the_listing_pages_with_a_cursor(api):
    ids = {candidate(api, sql=f"SELECT {n}") for n in range(3)}

    first = as_admin(api, "GET", "/fewshots", query={"limit": "2"}).json()
    rest = as_admin(api, "GET", "/fewshots", query={"limit": "2", "cursor": first["next_cursor"]}).json()

    assert len(first["items"]) == 2 and first["next_cursor"]
    assert {i["id"] for i in first["items"] + rest["items"]} == ids and rest["next_cursor"] is None


def test_approve_flow_reviewer_time_idempotency_and_conflicts(api, clock):
    memory_id = candidate(api)
    listed = as_admin(api, "GET", "/fewshots").json()["items"]
    assert listed == [
        {
            "id": memory_id,
            "version": 1,
            "status": "pending_review",
            "question": "上个月华南的动销",
            "sql": SQL,
            "intent": INTENT,
            "confidence": 1.0,
            "fail_count": 0,
            "author": AUTHOR,
            "reviewed_by": None,
            "reviewed_at": None,
            "status_reason": None,
            "created_at": clock.now().isoformat().replace("+00:00", "Z"),
        }
    ]

    # The author may be an admin, and still cannot approve their own candidate
    own = as_admin(api, "POST", f"/fewshots/{memory_id}/approve", user=AUTHOR)
    assert own.status == 403 and own.json()["message"] == "the author of a candidate cannot approve it"

    # A reviewer approves it, with an Idempotency-Key
    clock.advance(minutes=5)
    key = {"Idempotency-Key": "approve-0001"}
    approved = as_admin(api, "POST", f"/fewshots/{memory_id}/approve", {"reason": "checked against finance"}, headers=key)
    assert approved.status == 200, approved.body
    view = approved.json()
    assert (view["version"], view["status"], view["reviewed_by"], view["status_reason"]) == (
        2,
        "approved",
        REVIEWER,
        "checked against finance",
    )
    assert view["reviewed_at"].startswith(clock.now().isoformat()[:19])

    # Replaying the key answers the first answer; the same key for another request is a 422
    replay = as_admin(api, "POST", f"/fewshots/{memory_id}/approve", {"reason": "checked against finance"}, headers=key)
    assert (replay.status, replay.json()) == (200, view)
    reused = as_admin(api, "POST", f"/fewshots/{memory_id}/reject", headers=key)
    assert reused.status == 422 and reused.json()["field"] == "Idempotency-Key"

    # A second review of a candidate that is no longer pending is a 409
    again = as_admin(api, "POST", f"/fewshots/{memory_id}/reject", user="zhao")
    assert again.status == 409
    assert again.json()["field"] == "status" and again.json()["current_version"] == 2
    assert "approved, not pending_review" in again.json()["message"]

    # And search now finds it for a question of the same shape
    found = container.fewshot_library().search(api.tenant, "上周华东的动销", "{window}{region}的动销")
    assert [(f.memory_id, f.version) for f in found] == [(memory_id, 2)]


def test_reject_without_a_body_and_search_never_returns_it(api):
    memory_id = candidate(api)

    rejected = as_admin(api, "POST", f"/fewshots/{memory_id}/reject")

    assert rejected.status == 200, rejected.body
    assert (rejected.json()["status"], rejected.json()["status_reason"]) == ("rejected", f"rejected by {REVIEWER}")
    assert container.fewshot_library().search(api.tenant, "上个月华南的动销", "{window}{region}的动销") == []


def test_the_container_masks_a_candidate_recorded_without_its_shape_and_keeps_its_library(api):
    library = container.fewshot_library()
    assert container.fewshot_library() is library  # its embeddings cache lives across requests

    record = library.record_candidate(
        api.tenant, AUTHOR, episode_id="ep_9", question="上个月华南的动销", intent=INTENT, sql=SQL, reward=1.0
    )

    assert record.value["masked"] == "{window}{region}的动销"
    container.reset()
    assert container.fewshot_library() is not library  # new adapters, a new library
