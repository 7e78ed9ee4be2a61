"""Proposals over HTTP on the local runtime (docs/knowledge.md, Proposals): a user proposes a
change to a shared definition, or their own correction in one call; a curator accepts (the
target's next version, with the proposal in its provenance) or rejects (nothing changes); a
proposal whose target moved on is outdated until re-based."""

from __future__ import annotations

from typing import Any

CURATOR = ("mei", "curator")


def as_curator(api, method: str, path: str, body: Any = None, **kwargs: Any):
    return api.call(method, path, body, as_user=(api.tenant, CURATOR[0]), roles=CURATOR[1], **kwargs)


def correction(term: str, metric: str) -> dict[str, Any]:
    return {"kind": "correction", "content": f"{term} = {metric}", "value": {"term": term, "maps_to": {"metric": metric}}}


def shared_gmv(api) -> dict[str, Any]:
    written = as_curator(api, "POST", "/memories", {**correction("GMV", "gross_revenue"), "scope": "tenant"})
    assert written.status == 201, written.body
    return written.json()["memory"]


def test_a_users_correction_proposed_in_one_call_and_accepted_is_the_definitions_next_version(api):
    shared = shared_gmv(api)
    mine = api.call("POST", "/memories", correction("GMV", "net_revenue")).json()["memory"]
    assert mine["key"] == shared["key"] == "term.gmv"

    made = api.call("POST", "/proposals", {"from_memory_id": mine["id"], "reason": "our finance team reports GMV net of refunds"})
    assert made.status == 201, made.body
    proposal = made.json()
    assert (proposal["status"], proposal["target_id"], proposal["base_version"], proposal["proposer"]) == ("open", shared["id"], 1, "li")
    assert proposal["change"] == {"content": mine["content"], "value": mine["value"]}
    assert proposal["from_memory_id"] == mine["id"] and proposal["from_version"] == 1

    refused = api.call("POST", f"/proposals/{proposal['id']}/accept")  # the proposer is no curator
    assert refused.status == 403 and refused.json()["field"] == "roles", refused.body
    assert api.call("GET", f"/memories/{shared['id']}").json()["memory"]["version"] == 1

    accepted = as_curator(api, "POST", f"/proposals/{proposal['id']}/accept", {"reason": "agreed with finance"})
    assert accepted.status == 200, accepted.body
    decided = accepted.json()
    target = decided["target"]
    assert target["id"] == shared["id"] and target["version"] == 2
    assert target["value"] == {"term": "GMV", "maps_to": {"metric": "net_revenue"}}
    assert target["provenance"]["proposal"] == {"proposal_id": proposal["id"], "proposer": "li", "reviewer": "mei"}
    assert target["provenance"]["author"] == "mei"
    assert decided["proposal"]["status"] == "accepted" and decided["proposal"]["result_version"] == 2

    stored = api.call("GET", f"/memories/{shared['id']}", query={"history": "true"}).json()
    assert [v["version"] for v in stored["history"]] == [1, 2]
    assert "proposal" not in stored["history"][0]["provenance"]  # a version no proposal wrote keeps its shape
    again = as_curator(api, "POST", f"/proposals/{proposal['id']}/accept")
    assert again.status == 409, again.body  # decided once
    assert api.call("GET", f"/proposals/{proposal['id']}").json()["status"] == "accepted"


def test_a_rejected_proposal_changes_nothing(api):
    shared = shared_gmv(api)
    made = api.call(
        "POST", "/proposals", {"target_id": shared["id"], "change": {"content": "GMV = 含税销售额"}, "reason": "wording"}
    ).json()
    rejected = as_curator(api, "POST", f"/proposals/{made['id']}/reject", {"reason": "GMV stays gross"})
    assert rejected.status == 200, rejected.body
    assert rejected.json()["target"] is None
    assert rejected.json()["proposal"]["status"] == "rejected" and rejected.json()["proposal"]["decision_reason"] == "GMV stays gross"
    after = api.call("GET", f"/memories/{shared['id']}").json()["memory"]
    assert (after["version"], after["content"]) == (1, shared["content"])
    assert api.call("POST", f"/proposals/{made['id']}/reject", {"reason": "x"}).status == 403
    assert as_curator(api, "POST", f"/proposals/{made['id']}/accept").status == 409


def test_a_proposal_whose_target_moved_on_is_outdated_until_rebased(api):
    shared = shared_gmv(api)
    made = api.call("POST", "/proposals", {"target_id": shared["id"], "change": {"content": "GMV = 毛销售额"}, "reason": "clearer"}).json()
    edited = as_curator(api, "PATCH", f"/memories/{shared['id']}", {"expected_version": 1, "content": "GMV = 销售额 (gross)"})
    assert edited.status == 200, edited.body

    assert api.call("GET", f"/proposals/{made['id']}").json()["status"] == "outdated"
    assert [p["id"] for p in as_curator(api, "GET", "/proposals", query={"status": "outdated"}).json()["items"]] == [made["id"]]
    stale = as_curator(api, "POST", f"/proposals/{made['id']}/accept")
    assert stale.status == 409 and stale.json()["error"] == "proposal_outdated" and stale.json()["current_version"] == 2, stale.body
    assert api.call("GET", f"/memories/{shared['id']}").json()["memory"]["version"] == 2  # nothing written

    rebased = api.call("POST", f"/proposals/{made['id']}/rebase")  # by its proposer
    assert rebased.status == 200 and rebased.json()["status"] == "open" and rebased.json()["base_version"] == 2, rebased.body
    accepted = as_curator(api, "POST", f"/proposals/{made['id']}/accept", {"change": {"content": "GMV = 毛销售额（含税）"}})
    assert accepted.status == 200, accepted.body
    assert accepted.json()["target"]["version"] == 3 and accepted.json()["target"]["content"] == "GMV = 毛销售额（含税）"
    assert accepted.json()["proposal"]["change"] == {"content": "GMV = 毛销售额（含税）"}  # as written


def test_proposals_are_their_proposers_and_curators_only(api):
    shared = shared_gmv(api)
    made = api.call("POST", "/proposals", {"target_id": shared["id"], "change": {"content": "GMV = x"}, "reason": "mine"}).json()
    other = ("li" + "2", None)
    assert api.call("GET", f"/proposals/{made['id']}", as_user=(api.tenant, other[0])).status == 404
    assert api.call("GET", "/proposals", as_user=(api.tenant, other[0])).json()["items"] == []
    assert api.call("POST", f"/proposals/{made['id']}/rebase", as_user=(api.tenant, other[0])).status == 404
    assert [p["id"] for p in api.call("GET", "/proposals").json()["items"]] == [made["id"]]
    assert [p["id"] for p in as_curator(api, "GET", "/proposals").json()["items"]] == [made["id"]]
    assert api.call("GET", f"/proposals/{made['id']}", as_user=("globex", "mei"), roles="curator").status == 404
    # Not through /memories either (a curator sees the tenant's records there), and never recalled.
    assert api.call("GET", f"/memories/{made['id']}", as_user=(api.tenant, other[0])).status == 404
    listed = api.call("GET", "/memories", query={"scope": "tenant", "kind": "knowledge"}, as_user=(api.tenant, other[0])).json()
    assert listed["items"] == []
    found = as_curator(api, "GET", "/memories/search", query={"q": "Proposal to change term.gmv mine", "route": "business_knowledge_qa"})
    assert made["id"] not in [i["memory"]["id"] for i in found.json()["items"]]
    direct = api.call("POST", "/memories", {"kind": "knowledge", "key": "proposal.x", "content": "forged"}, roles="curator")
    assert direct.status == 403 and direct.json()["field"] == "key"


def test_bad_proposals_are_400s_naming_the_field_and_nothing_is_stored(api):
    shared = shared_gmv(api)
    session_memory = api.call("POST", "/memories", {"kind": "profile", "key": "display.chart", "content": "默认用柱状图"}).json()["memory"]
    cases = [
        ({"change": {"content": "x"}, "reason": "r"}, "body", 400),  # no target, no from_memory_id
        ({"target_id": shared["id"], "reason": "r"}, "body", 400),  # no change, nothing to take it from
        ({"target_id": shared["id"], "change": {}, "reason": "r"}, "change", 400),
        ({"target_id": shared["id"], "change": {"content": "x", "owner": "y"}, "reason": "r"}, "change.owner", 400),
        ({"target_id": shared["id"], "change": {"content": "x"}}, "reason", 400),
        ({"target_id": shared["id"], "change": {"content": shared["content"]}, "reason": "r"}, "change", 400),
        ({"target_id": "mem_nothing", "change": {"content": "x"}, "reason": "r"}, "target_id", 404),
        ({"target_id": session_memory["id"], "change": {"content": "x"}, "reason": "r"}, "target_id", 404),  # not shared
        ({"from_memory_id": shared["id"], "reason": "r"}, "from_memory_id", 404),  # not one of the caller's own
        ({"from_memory_id": session_memory["id"], "reason": "r"}, "target_id", 400),  # no shared memory of that key
    ]
    for body, field, status in cases:
        reply = api.call("POST", "/proposals", body)
        assert reply.status == status and reply.json()["field"] == field, (body, reply.body)
    assert as_curator(api, "GET", "/proposals").json()["items"] == []


def test_the_proposal_events_run_through_the_handler_as_aws_sends_them(aws):
    """events/proposal_create.json and proposal_accept.json (`sam local invoke -e`), identity from the authorizer."""
    import json

    from memtool.identity import Identity
    from memtool.memory.commands import NewMemory
    from memtool.memory.records import MemoryKind, MemoryScope
    from memtool.runtime import container
    from memtool.runtime.handlers import function_handler
    from memtool.runtime.lambda_context import LocalLambdaContext
    from memtool.settings import use_settings
    from tests.support import ROOT, load_event

    use_settings(aws.model_copy(update={"runtime": "aws"}))
    service = container.memory_service()
    curator = Identity(tenant="acme-pharma", user="mei", roles=frozenset({"curator"}))
    user = load_event("proposal_create.json")["requestContext"]["authorizer"]["claims"]["sub"]  # the caller, as AWS says
    analyst = Identity(tenant="acme-pharma", user=user, roles=frozenset())
    gmv = {"term": "GMV", "maps_to": {"metric": "gross_revenue"}}
    shared = service.remember(curator, NewMemory(kind=MemoryKind.CORRECTION, content="GMV = 销售额", value=gmv, scope=MemoryScope.TENANT))
    net = {"term": "GMV", "maps_to": {"metric": "net_revenue"}}
    mine = service.remember(analyst, NewMemory(kind=MemoryKind.CORRECTION, content="GMV = 净收入", value=net)).record

    handler = function_handler(ROOT, "memory_write")
    created = load_event("proposal_create.json")
    created["body"] = created["body"].replace("mem_01JD0000000000000000000000", mine.id)
    reply = handler(created, LocalLambdaContext())
    assert reply["statusCode"] == 201, reply
    proposal = json.loads(reply["body"])
    assert proposal["proposer"] == user and proposal["target_id"] == shared.record.id

    accept = json.loads(json.dumps(load_event("proposal_accept.json")).replace("mem_01JD0000000000000000000002", proposal["id"]))
    reply = handler(accept, LocalLambdaContext())
    assert reply["statusCode"] == 200, reply
    target = json.loads(reply["body"])["target"]
    assert target["version"] == 2 and target["value"] == net
    assert target["provenance"]["proposal"] == {"proposal_id": proposal["id"], "proposer": user, "reviewer": user}


def test_review_records_cannot_be_deleted_or_depended_on_and_pii_is_redacted_on_every_path(api):
    """Found by a review: curators deleted proposals through /memories, a user probed another's
    proposal through depends_on, and rebase, accept reasons and overrides kept phone numbers."""
    shared = shared_gmv(api)
    made = api.call("POST", "/proposals", {"target_id": shared["id"], "change": {"content": "GMV = 含税"}, "reason": "r"}).json()
    gone = as_curator(api, "DELETE", f"/memories/{made['id']}")
    assert gone.status == 403 and gone.json()["field"] == "id", gone.body
    assert api.call("GET", f"/proposals/{made['id']}").status == 200  # still there

    probe = api.call(
        "POST", "/memories", {"kind": "profile", "content": "x", "depends_on": [{"memory_id": made["id"]}]}, as_user=(api.tenant, "eve")
    )
    assert probe.status == 400 and probe.json()["field"] == "depends_on.0" and "proposal." not in probe.body
    body = {"target_id": made["id"], "change": {"content": "x"}, "reason": "r"}
    aimed = api.call("POST", "/proposals", body, as_user=(api.tenant, "eve"))
    assert aimed.status == 404 and "proposal." not in aimed.body

    rebased = api.call("POST", f"/proposals/{made['id']}/rebase", {"change": {"content": "GMV call me 13812345678"}})
    assert rebased.status == 200 and "13812345678" not in rebased.body, rebased.body
    accepted = as_curator(api, "POST", f"/proposals/{made['id']}/accept", {"reason": "ping 13987654321"})
    assert accepted.status == 200 and "13987654321" not in accepted.body
    assert "13812345678" not in api.call("GET", f"/memories/{shared['id']}").body
