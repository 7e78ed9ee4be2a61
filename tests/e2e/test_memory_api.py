"""The memory API end to end: handler, service, store on moto, through API Gateway proxy events."""

from __future__ import annotations

import json

import pytest

from tests.support import table_items

PREFERENCE = {
    "kind": "profile",
    "key": "display.currency_unit",
    "content": "金额默认用元",
    "value": {"unit": "元"},
    "source_text": "以后默认用元",
}


def memory_items(settings, memory_id=None):
    items = [i for i in table_items(settings) if i.get("item_type", {}).get("S") in ("head", "version", "slot")]
    if memory_id is not None:
        items = [i for i in items if i["memory_id"]["S"] == memory_id]
    return items


def test_write_supersede_read_history_and_forget(api, aws):
    # Given a preference written and then superseded through the same slot
    first = api.call("POST", "/memories", PREFERENCE)
    assert first.status == 201, first.body
    memory = first.json()["memory"]
    second = api.call("POST", "/memories", {**PREFERENCE, "content": "金额默认用分", "value": {"unit": "分"}})
    assert second.status == 200
    assert second.json()["superseded"] == {"version": 1, "content": "金额默认用元"}

    # Then the current value is 分, and history and ?version=1 still show 元
    current = api.call("GET", f"/memories/{memory['id']}").json()["memory"]
    assert (current["version"], current["value"]) == (2, {"unit": "分"})
    old = api.call("GET", f"/memories/{memory['id']}", query={"version": "1"}).json()["memory"]
    assert (old["value"], old["status"]) == ({"unit": "元"}, "superseded")
    history = api.call("GET", f"/memories/{memory['id']}", query={"history": "true"}).json()["history"]
    assert [(h["version"], h["value"]["unit"]) for h in history] == [(1, "元"), (2, "分")]

    # When it is forgotten, every version is gone
    gone = api.call("DELETE", f"/memories/{memory['id']}")
    assert (gone.status, gone.body) == (204, "")
    assert api.call("GET", f"/memories/{memory['id']}").status == 404
    assert api.call("GET", f"/memories/{memory['id']}", query={"version": "1"}).status == 404
    assert memory_items(aws, memory["id"]) == []


def test_patch_with_expected_version_and_409_on_a_stale_one(api, aws):
    memory = api.call("POST", "/memories", PREFERENCE).json()["memory"]
    ok = api.call("PATCH", f"/memories/{memory['id']}", {"expected_version": 1, "content": "金额默认用万元"})
    assert ok.status == 200 and ok.json()["memory"]["version"] == 2

    stale = api.call("PATCH", f"/memories/{memory['id']}", {"expected_version": 1, "content": "lost"})

    assert stale.status == 409
    assert stale.json() == {
        "error": "version_conflict",
        "message": f"memory {memory['id']} is at version 2, not 1",
        "field": "expected_version",
        "current_version": 2,
    }
    assert api.call("GET", f"/memories/{memory['id']}").json()["memory"]["content"] == "金额默认用万元"


def test_pii_is_redacted_before_storage_and_counted(api, aws):
    text = (
        "客户张三 手机 13812345678，邮箱 zhang.san@example.com，身份证 11010519491231002X，"
        "卡号 6222 0212 3456 7890 128；订单号 202611290001234 于 2026-11-29 下单"
    )
    reply = api.call("POST", "/memories", {"kind": "correction", "content": text, "source_text": text})
    assert reply.status == 201
    body = reply.json()
    assert body["redactions"] == {"phone": 2, "email": 2, "cn_id": 2, "bank_card": 2}
    stored = json.dumps(table_items(aws), ensure_ascii=False)
    for secret in ("13812345678", "zhang.san@example.com", "11010519491231002X", "6222 0212 3456 7890 128"):
        assert secret not in stored
    content = body["memory"]["content"]
    assert "[PHONE]" in content and "[EMAIL]" in content and "[CN_ID]" in content and "[BANK_CARD]" in content
    # no false positives: the order id and the date survive
    assert "202611290001234" in content and "2026-11-29" in content


def test_pii_inside_a_structured_value_is_redacted_too(api, aws):
    reply = api.call(
        "POST", "/memories", {"kind": "profile", "content": "联系人", "value": {"contact": "+44 20 7946 0958"}}
    )
    assert reply.json()["memory"]["value"] == {"contact": "[PHONE]"}
    assert reply.json()["redactions"]["phone"] == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"content": "no kind"}, "kind"),
        ({"kind": "profile"}, "content"),
        ({"kind": "favourite", "content": "x"}, "kind"),
        ({"kind": "profile", "content": 42}, "content"),
        ({"kind": "profile", "content": ""}, "content"),
        ({"kind": "profile", "content": "x", "confidence": "high"}, "confidence"),
        ({"kind": "profile", "content": "x", "confidence": 1.5}, "confidence"),
        ({"kind": "profile", "content": "x", "tags": "not-a-list"}, "tags"),
        ({"kind": "profile", "content": "x", "owner": "someone-else"}, "owner"),
        ({"kind": "profile", "content": "x", "key": "has space"}, "key"),
        ({"kind": "profile", "content": "界" * 2800}, "content"),  # 8,400 bytes in UTF-8
        ({"kind": "profile", "content": "x", "source_text": "y" * 9000}, "source_text"),
        ({"kind": "working", "content": "这次用分"}, "session_id"),
        ({"kind": "knowledge", "content": "净收入 = ...", "scope": "user"}, "scope"),
        ([{"kind": "profile"}], "body"),
    ],
)
def test_bad_input_gets_a_4xx_naming_the_field_and_writes_nothing(api, aws, body, field):
    reply = api.call("POST", "/memories", body)
    assert 400 <= reply.status < 500
    assert reply.json()["field"] == field, reply.json()
    assert memory_items(aws) == []


@pytest.mark.parametrize("raw", ['{"kind": "profile", "content": ', "not json", ""])
def test_malformed_json_is_a_400_on_body(api, aws, raw):
    reply = api.call("POST", "/memories", raw=raw)
    assert reply.status == 400 and reply.json()["field"] == "body"
    assert memory_items(aws) == []


def test_bad_patch_input_names_the_field_and_keeps_the_record(api, aws):
    memory = api.call("POST", "/memories", PREFERENCE).json()["memory"]
    before = memory_items(aws, memory["id"])
    for body, field in [
        ({"content": "no version"}, "expected_version"),
        ({"expected_version": "1", "content": "x"}, "expected_version"),
        ({"expected_version": 1, "status": "approved"}, "status"),
        ({"expected_version": 1, "status": "superseded"}, "status"),
        ({"expected_version": 1}, "body"),
        ({"expected_version": 1, "key": "other.slot"}, "key"),
    ]:
        reply = api.call("PATCH", f"/memories/{memory['id']}", body)
        assert reply.status == 400 and reply.json()["field"] == field, (body, reply.json())
    assert memory_items(aws, memory["id"]) == before


def test_no_identity_is_401_and_headers_are_ignored_outside_local_mode(api, aws):
    from memtool.runtime.settings import use_settings

    anonymous = api.gateway.invoke("GET", "/memories", headers={})
    assert anonymous.status == 401 and anonymous.json()["field"] == "tenant"

    use_settings(aws.model_copy(update={"runtime": "aws"}))
    spoofed = api.call("GET", "/memories")
    assert spoofed.status == 401 and spoofed.json()["field"] == "authorization"


def test_authorizer_claims_are_the_identity_in_aws(aws, template):
    from memtool.runtime.handlers import function_handler
    from memtool.runtime.lambda_context import LocalLambdaContext
    from memtool.runtime.settings import use_settings

    from tests.support import ROOT, load_event

    use_settings(aws.model_copy(update={"runtime": "aws"}))
    handler = function_handler(ROOT, "memory_write")
    event = load_event("memory_create.json")
    reply = handler(event, LocalLambdaContext())
    assert reply["statusCode"] == 201, reply
    memory = json.loads(reply["body"])["memory"]
    claims = event["requestContext"]["authorizer"]["claims"]
    assert (memory["tenant"], memory["owner"]) == (claims["custom:tenant_id"], claims["sub"])
    # a tenant header in the same event is ignored: the claims win
    assert event["headers"]["X-Memtool-Tenant"] != memory["tenant"]


def test_tenant_b_cannot_list_read_patch_or_delete_tenant_a_memory(api, aws):
    memory = api.call("POST", "/memories", PREFERENCE).json()["memory"]
    before = memory_items(aws, memory["id"])
    intruders = [("tenant-b", "li"), ("tenant-b", "mallory"), (api.tenant, "wang")]
    for who in intruders:
        assert api.call("GET", "/memories", as_user=who).json()["items"] == []
        assert api.call("GET", "/memories", query={"kind": "profile"}, as_user=who).json()["items"] == []
        for method, path, body in [
            ("GET", f"/memories/{memory['id']}", None),
            ("PATCH", f"/memories/{memory['id']}", {"expected_version": 1, "content": "hijacked"}),
            ("DELETE", f"/memories/{memory['id']}", None),
        ]:
            reply = api.call(method, path, body, as_user=who)
            assert reply.status == 404, (who, method, reply.body)
            assert reply.json()["error"] == "not_found"
    assert memory_items(aws, memory["id"]) == before
    assert api.call("GET", f"/memories/{memory['id']}").json()["memory"]["content"] == "金额默认用元"


def test_a_cursor_from_another_caller_is_refused(api, aws):
    for n in range(3):
        api.call("POST", "/memories", {"kind": "episodic", "content": f"episode {n}"})
    page = api.call("GET", "/memories", query={"kind": "episodic", "limit": "2"}).json()
    assert len(page["items"]) == 2 and page["next_cursor"]
    stolen = api.call("GET", "/memories", query={"kind": "episodic", "cursor": page["next_cursor"]}, as_user=("tenant-b", "li"))
    assert stolen.status == 400 and stolen.json()["field"] == "cursor"
    garbage = api.call("GET", "/memories", query={"cursor": "%%%not-base64"})
    assert garbage.status == 400 and garbage.json()["field"] == "cursor"
    rest = api.call("GET", "/memories", query={"kind": "episodic", "limit": "2", "cursor": page["next_cursor"]}).json()
    assert [i["content"] for i in page["items"] + rest["items"]] == ["episode 2", "episode 1", "episode 0"]


def test_list_filters_and_query_validation(api, aws):
    api.call("POST", "/memories", PREFERENCE)
    api.call("POST", "/memories", {"kind": "episodic", "content": "asked for revenue"})
    kinds = {i["kind"] for i in api.call("GET", "/memories").json()["items"]}
    assert kinds == {"profile", "episodic"}
    only = api.call("GET", "/memories", query={"kind": "episodic"}).json()["items"]
    assert [i["content"] for i in only] == ["asked for revenue"]
    assert api.call("GET", "/memories", query={"kind": "nope"}).json()["field"] == "kind"
    assert api.call("GET", "/memories", query={"limit": "1000"}).json()["field"] == "limit"


def test_shared_memories_are_written_by_curators_and_read_by_the_tenant(api, aws):
    knowledge = {"kind": "knowledge", "content": "净收入 = Σ(gross − discount) − refunds", "key": "metric.net_revenue"}
    refused = api.call("POST", "/memories", knowledge)
    assert refused.status == 403 and refused.json()["field"] == "scope"
    assert memory_items(aws) == []

    created = api.call("POST", "/memories", knowledge, roles="curator")
    assert created.status == 201
    memory = created.json()["memory"]
    assert (memory["scope"], memory["owner"]) == ("tenant", "_tenant")
    colleague = (api.tenant, "wang")
    assert api.call("GET", f"/memories/{memory['id']}", as_user=colleague).status == 200
    assert api.call("GET", "/memories", query={"scope": "tenant"}, as_user=colleague).json()["items"][0]["id"] == memory["id"]
    assert api.call("DELETE", f"/memories/{memory['id']}", as_user=colleague).status == 403
    assert api.call("GET", f"/memories/{memory['id']}", as_user=("tenant-b", "wang")).status == 404


def test_fewshot_review_statuses(api, aws):
    shot = api.call(
        "POST", "/memories", {"kind": "fewshot", "content": "上月净收入 → SELECT ..."}, roles="curator"
    ).json()["memory"]
    assert shot["status"] == "pending_review" and shot["expires_at"] is None
    approved = api.call(
        "PATCH", f"/memories/{shot['id']}", {"expected_version": 1, "status": "approved"}, roles="curator"
    )
    assert approved.json()["memory"]["status"] == "approved"


def test_idempotency_key_replays_the_first_response(api, aws):
    headers = {"Idempotency-Key": "client-req-0001"}
    first = api.call("POST", "/memories", {"kind": "episodic", "content": "one"}, headers=headers)
    replay = api.call("POST", "/memories", {"kind": "episodic", "content": "one"}, headers=headers)
    assert first.status == replay.status == 201
    assert replay.json()["memory"]["id"] == first.json()["memory"]["id"]
    heads = [i for i in memory_items(aws) if i["item_type"]["S"] == "head"]
    assert len(heads) == 1

    reused = api.call("POST", "/memories", {"kind": "episodic", "content": "two"}, headers=headers)
    assert reused.status == 422 and reused.json()["field"] == "Idempotency-Key"
    # the same key from another user is a different request
    other = api.call("POST", "/memories", {"kind": "episodic", "content": "one"}, headers=headers, as_user=(api.tenant, "wang"))
    assert other.status == 201 and other.json()["memory"]["id"] != first.json()["memory"]["id"]
    bad_key = api.call("POST", "/memories", {"kind": "episodic", "content": "x"}, headers={"Idempotency-Key": "a b"})
    assert bad_key.status == 400 and bad_key.json()["field"] == "Idempotency-Key"


def test_a_failed_write_does_not_burn_the_idempotency_key(api, aws):
    memory = api.call("POST", "/memories", PREFERENCE).json()["memory"]
    api.call("PATCH", f"/memories/{memory['id']}", {"expected_version": 1, "content": "v2"})
    headers = {"Idempotency-Key": "retry-after-409"}
    conflict = api.call("PATCH", f"/memories/{memory['id']}", {"expected_version": 1, "content": "v3"}, headers=headers)
    assert conflict.status == 409
    retried = api.call("PATCH", f"/memories/{memory['id']}", {"expected_version": 2, "content": "v3"}, headers={"Idempotency-Key": "retry-after-409b"})
    assert retried.status == 200 and retried.json()["memory"]["version"] == 3


def test_unknown_routes_and_methods(api, aws):
    assert api.call("GET", "/nowhere").status == 404
    assert api.call("PUT", "/memories").status == 405
