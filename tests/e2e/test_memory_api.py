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


def gmv(metric: str, term: str = "GMV", **body) -> dict:
    return {"kind": "correction", "content": f"GMV = {metric}", "value": {"term": term, "maps_to": {"metric": metric}}, **body}


def test_a_second_correction_of_a_term_supersedes_the_first(api, aws):
    # Given a correction of GMV written through POST /memories, with no key
    first = api.call("POST", "/memories", gmv("gross_revenue"))
    assert first.status == 201, first.body
    memory = first.json()["memory"]
    assert memory["key"] == "term.gmv"

    # When the same term (in other case and spacing) is corrected again
    second = api.call("POST", "/memories", gmv("net_revenue", term=" gmv "))

    # Then it is the next version of the same memory, and the first is superseded
    assert second.status == 200, second.body
    assert second.json()["superseded"] == {"version": 1, "content": "GMV = gross_revenue"}
    current = second.json()["memory"]
    assert (current["id"], current["version"], current["status"]) == (memory["id"], 2, "active")
    corrections = api.call("GET", "/memories", query={"kind": "correction"}).json()["items"]
    assert [(c["id"], c["version"], c["value"]["maps_to"]) for c in corrections] == [(memory["id"], 2, {"metric": "net_revenue"})]
    old = api.call("GET", f"/memories/{memory['id']}", query={"version": "1"}).json()["memory"]
    assert (old["status"], old["value"]["maps_to"]) == ("superseded", {"metric": "gross_revenue"})
    # and recall knows one meaning of GMV, the newer, with nothing to override
    found = api.call("GET", "/memories/search", query={"q": "GMV 上月"}).json()
    taught = [i["memory"] for i in found["items"] if i["memory"]["kind"] == "correction"]
    assert [(m["id"], m["version"]) for m in taught] == [(memory["id"], 2)]
    assert "overridden" not in found["coverage"]["dropped"]
    # a rule in words teaches no term and keeps no key
    rule = api.call("POST", "/memories", {"kind": "correction", "content": "净收入 excludes test orders"}).json()["memory"]
    assert rule["key"] is None


def test_a_correction_keeps_the_key_of_its_term(api, aws):
    other_key = api.call("POST", "/memories", gmv("gross_revenue", key="metric.gmv"))
    assert (other_key.status, other_key.json()["field"]) == (400, "key")
    assert "term.gmv" in other_key.json()["message"]
    assert api.call("GET", "/memories", query={"kind": "correction"}).json()["items"] == []
    same_key = api.call("POST", "/memories", gmv("gross_revenue", key="term.gmv"))
    assert same_key.status == 201 and same_key.json()["memory"]["key"] == "term.gmv"

    # An edit may change what the term means, not which term it is
    memory = same_key.json()["memory"]
    meaning = api.call("PATCH", f"/memories/{memory['id']}", {"expected_version": 1, "value": {"term": "GMV", "maps_to": {"metric": "net_revenue"}}})
    assert meaning.status == 200 and meaning.json()["memory"]["version"] == 2
    other_term = api.call(
        "PATCH", f"/memories/{memory['id']}", {"expected_version": 2, "value": {"term": "单子数", "maps_to": {"metric": "order_count"}}}
    )
    assert (other_term.status, other_term.json()["field"]) == (400, "value.term")
    assert api.call("GET", f"/memories/{memory['id']}").json()["memory"]["version"] == 2


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
    from memtool.settings import use_settings

    anonymous = api.gateway.invoke("GET", "/memories", headers={})
    assert anonymous.status == 401 and anonymous.json()["field"] == "tenant"

    use_settings(aws.model_copy(update={"runtime": "aws"}))
    spoofed = api.call("GET", "/memories")
    assert spoofed.status == 401 and spoofed.json()["field"] == "authorization"


def test_authorizer_claims_are_the_identity_in_aws(aws, template):
    from memtool.runtime.handlers import function_handler
    from memtool.runtime.lambda_context import LocalLambdaContext
    from memtool.settings import use_settings

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


def test_fewshots_and_episodes_are_not_written_through_the_memory_api(api, aws):
    from memtool.runtime import container

    # Given a few-shot candidate, as a thumbs-up records it
    shot = container.fewshot_library().record_candidate(
        api.tenant, "li", episode_id="ep_x", question="上月净收入", intent=None, sql="SELECT 1", reward=1.0
    )
    for roles in ("curator", "admin"):
        made = api.call("POST", "/memories", {"kind": "fewshot", "content": "上月净收入 → SELECT ..."}, roles=roles)
        assert made.status == 403 and made.json()["field"] == "kind"
        approved = api.call("PATCH", f"/memories/{shot.id}", {"expected_version": 1, "status": "approved"}, roles=roles)
        assert approved.status == 403 and approved.json()["field"] == "kind"
    # the review queue holds other users' questions: admins only
    assert api.call("GET", "/memories", query={"kind": "fewshot", "scope": "tenant"}, as_user=(api.tenant, "wang")).status == 403
    listed = api.call("GET", "/memories", query={"scope": "tenant"}, as_user=(api.tenant, "wang")).json()["items"]
    assert shot.id not in [m["id"] for m in listed]
    assert api.call("GET", f"/memories/{shot.id}", as_user=(api.tenant, "wang")).status == 403
    assert api.call("GET", f"/memories/{shot.id}", roles="admin").status == 200
    # an episode slot belongs to the ask flow
    forged = api.call("POST", "/memories", {"kind": "episodic", "key": "episode.ep_FAKE", "content": "fake", "value": {"outcome": "answered"}})
    assert forged.status == 403 and forged.json()["field"] == "key"
    answer = api.call("POST", "/ask", {"question": "上个月净收入是多少"}).json()
    [episode] = [m for m in api.call("GET", "/memories", query={"kind": "episodic"}).json()["items"] if m["key"] == f"episode.{answer['episode_id']}"]
    edited = api.call("PATCH", f"/memories/{episode['id']}", {"expected_version": episode["version"], "value": {"outcome": "answered", "memories_used": []}})
    assert edited.status == 403 and edited.json()["field"] == "key"


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


# ---- input hardening at the edge: every case is a 4xx naming the field, and nothing is stored ----

HUGE_INT = "9" * 4301  # past Python's int max-str-digits: json.loads alone raises ValueError
DEEP = "[" * 10_000 + "]" * 10_000  # past the interpreter's recursion limit


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"kind": "profile", "content": "x", "value": {"n": %s}}' % HUGE_INT, "value.n"),
        ('{"kind": "profile", "content": "x", "confidence": %s}' % HUGE_INT, "confidence"),
        ('{"kind": "profile", "content": "x", "value": {"n": 9007199254740992}}', "value.n"),  # 2^53
        ('{"kind": "profile", "content": "x", "value": %s}' % DEEP, "body"),
        (DEEP, "body"),
        ('{"kind": "profile", "content": "x", "confidence": NaN}', "confidence"),
        ('{"kind": "profile", "content": "x", "value": {"a": Infinity}}', "value.a"),
        ('{"kind": "profile", "content": "x", "value": [1, -Infinity]}', "value.1"),
        ('{"kind": "profile", "content": "x", "value": {"a": 1e400}}', "value.a"),
        ('{"kind": "profile", "content": "x", "value": {"a": 1e-200}}', "value.a"),
        ('{"kind": "profile", "content": "x", "content": "y"}', "body"),  # a repeated key
    ],
)
def test_json_no_other_reader_could_read_back_is_a_400(api, aws, raw, field):
    reply = api.call("POST", "/memories", raw=raw)

    assert reply.status == 400, reply.body
    assert reply.json()["error"] == "validation_error"
    assert reply.json()["field"] == field, reply.json()
    assert memory_items(aws) == []
    assert api.call("GET", "/memories").json()["items"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "profile", "content": "a\x00b"}, "content"),
        ({"kind": "profile", "content": "next\x85line"}, "content"),  # a C1 control character
        ({"kind": "profile", "content": "\ud800"}, "content"),  # a lone surrogate: no UTF-8 for it
        ({"kind": "profile", "content": "x", "source_text": "bell\x07"}, "source_text"),
        ({"kind": "profile", "content": "x", "key": "display.\x1bunit"}, "key"),
        ({"kind": "profile", "content": "x", "tags": ["fine", "bad\x00"]}, "tags.1"),
        ({"kind": "profile", "content": "x", "value": {"a": {"b": "x\x00"}}}, "value.a.b"),
        ({"kind": "profile", "content": "x", "value": {"a": {"b\x00": 1}}}, "value.a"),
        ({"kind": "profile", "content": "x", "value": {"list": ["ok", "\x1f"]}}, "value.list.1"),
        ({"kind": "working", "content": "x", "session_id": "s\x00"}, "session_id"),
        ({"kind": "profile", "content": "x", "provenance": {"episode_id": "ep\x00"}}, "provenance.episode_id"),
    ],
)
def test_control_characters_anywhere_in_the_body_are_a_400_on_their_field(api, aws, body, field):
    reply = api.call("POST", "/memories", body)

    assert reply.status == 400, reply.body
    assert reply.json()["field"] == field, reply.json()
    assert memory_items(aws) == []


def test_tab_newline_carriage_return_and_the_replacement_character_are_ordinary_text(api, aws):
    content = "第一行\t列\r\n第二行 \ufffd 保留"
    reply = api.call("POST", "/memories", {"kind": "profile", "content": content, "value": {"note": "\ufffd"}})

    assert reply.status == 201, reply.body
    memory = api.call("GET", f"/memories/{reply.json()['memory']['id']}").json()["memory"]
    assert (memory["content"], memory["value"]) == (content, {"note": "\ufffd"})


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (_nested(33), "deeper than 32"),
        ({f"k{n}": n for n in range(1001)}, "more than 1000 keys"),
        ({"text": "x" * 17_000}, "limit is 16384 bytes"),
    ],
)
def test_value_over_its_limits_is_a_400_on_value(api, aws, value, message):
    reply = api.call("POST", "/memories", {"kind": "profile", "content": "x", "value": value})

    assert reply.status == 400, reply.body
    assert reply.json()["field"] == "value" and message in reply.json()["message"], reply.json()
    assert memory_items(aws) == []


def test_value_at_its_depth_limit_is_stored(api, aws):
    reply = api.call("POST", "/memories", {"kind": "profile", "content": "x", "value": _nested(32)})
    assert reply.status == 201, reply.body
    assert reply.json()["memory"]["value"] == _nested(32)


@pytest.mark.parametrize("field", ["content", "tags", "status", "confidence"])
def test_patch_with_null_is_refused_not_read_as_keep(api, aws, field):
    memory = api.call("POST", "/memories", {**PREFERENCE, "tags": ["display"]}).json()["memory"]
    before = memory_items(aws, memory["id"])

    reply = api.call("PATCH", f"/memories/{memory['id']}", {"expected_version": 1, field: None})

    assert reply.status == 400, reply.body
    assert reply.json()["field"] == field
    assert memory_items(aws, memory["id"]) == before
    assert api.call("GET", f"/memories/{memory['id']}").json()["memory"]["version"] == 1


def test_patch_with_null_value_or_source_text_clears_them(api, aws):
    memory = api.call("POST", "/memories", PREFERENCE).json()["memory"]

    reply = api.call("PATCH", f"/memories/{memory['id']}", {"expected_version": 1, "value": None, "source_text": None})

    assert reply.status == 200, reply.body
    revised = reply.json()["memory"]
    assert (revised["version"], revised["value"], revised["source_text"]) == (2, None, None)
    assert revised["content"] == PREFERENCE["content"]


def test_patch_body_is_checked_like_a_create_body(api, aws):
    memory = api.call("POST", "/memories", PREFERENCE).json()["memory"]
    before = memory_items(aws, memory["id"])
    for raw, field in [
        ('{"expected_version": 1, "value": {"n": %s}}' % HUGE_INT, "value.n"),
        ('{"expected_version": 1, "confidence": NaN}', "confidence"),
        ('{"expected_version": 1, "content": "a\\u0000"}', "content"),
        ('{"expected_version": 1, "tags": ["ok", "\\u0007"]}', "tags.1"),
        ('{"expected_version": %s, "content": "x"}' % HUGE_INT, "expected_version"),
    ]:
        reply = api.call("PATCH", f"/memories/{memory['id']}", raw=raw)
        assert reply.status == 400 and reply.json()["field"] == field, (raw[:60], reply.json())
    assert memory_items(aws, memory["id"]) == before


def _event_with_headers(headers: list[tuple[str, str]]) -> dict:
    """A REST proxy event for GET /memories as API Gateway builds it: every value of a repeated
    header in multiValueHeaders, the last one in headers."""
    from tests.support import load_event

    event = load_event("memory_list.json")
    del event["requestContext"]["authorizer"]
    event["headers"], event["multiValueHeaders"] = {}, {}
    for name, value in headers:
        event["headers"][name] = value
        event["multiValueHeaders"].setdefault(name, []).append(value)
    return event


@pytest.mark.parametrize(
    ("headers", "field"),
    [
        ([("X-Memtool-Tenant", "acme"), ("X-Memtool-Tenant", "evil"), ("X-Memtool-User", "li")], "X-Memtool-Tenant"),
        ([("X-Memtool-Tenant", "acme"), ("X-Memtool-User", "li"), ("x-memtool-user", "root")], "X-Memtool-User"),
        (
            [("X-Memtool-Tenant", "acme"), ("X-Memtool-User", "li"), ("X-Memtool-Roles", "reader"), ("X-Memtool-Roles", "admin")],
            "X-Memtool-Roles",
        ),
    ],
)
def test_an_identity_header_sent_twice_is_a_400_never_last_one_wins(aws, headers, field):
    from memtool.runtime.handlers import function_handler
    from memtool.runtime.lambda_context import LocalLambdaContext

    from tests.support import ROOT

    reply = function_handler(ROOT, "memory_write")(_event_with_headers(headers), LocalLambdaContext())

    assert reply["statusCode"] == 400, reply
    assert json.loads(reply["body"])["field"] == field


def test_duplicate_headers_through_the_local_gateway_are_refused_before_any_write(api, aws):
    headers = [
        ("X-Memtool-Tenant", api.tenant),
        ("X-Memtool-User", "li"),
        ("X-Memtool-Roles", "reader"),
        ("X-Memtool-Roles", "curator"),
        ("Content-Type", "application/json"),
    ]
    body = json.dumps({"kind": "knowledge", "content": "净收入 = ...", "scope": "tenant"}, ensure_ascii=False)

    reply = api.gateway.invoke("POST", "/memories", headers=headers, body=body)

    assert reply.status == 400 and reply.json()["field"] == "X-Memtool-Roles", reply.body
    assert memory_items(aws) == []


def test_an_idempotency_key_sent_twice_is_a_400(api, aws):
    headers = [
        ("X-Memtool-Tenant", api.tenant),
        ("X-Memtool-User", "li"),
        ("Idempotency-Key", "client-req-0001"),
        ("Idempotency-Key", "client-req-0002"),
    ]
    reply = api.gateway.invoke("POST", "/memories", headers=headers, body=json.dumps({"kind": "episodic", "content": "x"}))

    assert reply.status == 400 and reply.json()["field"] == "Idempotency-Key", reply.body
    assert memory_items(aws) == []


@pytest.mark.parametrize(
    "content_type", ["application/x-www-form-urlencoded", "text/plain", "multipart/form-data", None]
)
def test_the_body_is_read_as_json_whatever_the_content_type_says(api, aws, content_type):
    headers = {"Content-Type": content_type} if content_type else {"Content-Type": ""}

    created = api.call("POST", "/memories", {"kind": "episodic", "content": "curl -d 发的"}, headers=headers)
    broken = api.call("POST", "/memories", raw="kind=episodic&content=x", headers=headers)

    assert created.status == 201, created.body
    assert broken.status == 400 and broken.json()["field"] == "body", broken.body
    assert [i["content"] for i in api.call("GET", "/memories").json()["items"]] == ["curl -d 发的"]


def test_a_base64_body_that_is_not_utf8_is_a_400(aws):
    import base64

    from memtool.runtime.handlers import function_handler
    from memtool.runtime.lambda_context import LocalLambdaContext

    from tests.support import ROOT

    event = _event_with_headers([("X-Memtool-Tenant", "acme"), ("X-Memtool-User", "li")])
    event.update(httpMethod="POST", queryStringParameters=None, multiValueQueryStringParameters=None)
    event["body"] = base64.b64encode(b'{"kind": "episodic", "content": "\xff\xfe"}').decode()
    event["isBase64Encoded"] = True

    reply = function_handler(ROOT, "memory_write")(event, LocalLambdaContext())

    assert reply["statusCode"] == 400 and json.loads(reply["body"])["field"] == "body", reply
    assert memory_items(aws) == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"q": "净收入\x00"}, "q"),
        ({"q": "净收入", "route": "drop_tables"}, "route"),
        ({"q": ""}, "q"),
    ],
)
def test_search_parameters_are_checked(api, aws, query, field):
    reply = api.call("GET", "/memories/search", query=query)
    assert reply.status == 400 and reply.json()["field"] == field, reply.body


@pytest.mark.parametrize("memory_id", ["a,b", "x" * 200, "mem~1"])
def test_memory_ids_that_cannot_exist_are_refused_before_the_store(api, aws, memory_id):
    for method in ("GET", "DELETE"):
        reply = api.call(method, f"/memories/{memory_id}")
        assert reply.status == 400 and reply.json()["field"] == "id", reply.body


def test_a_read_keeps_every_field_of_the_memory_and_adds_history_only_when_asked(api, aws):
    memory = api.call("POST", "/memories", {"kind": "episodic", "content": "no key, no value"}).json()["memory"]

    read = api.call("GET", f"/memories/{memory['id']}").json()

    assert set(read) == {"memory", "stale", "dependencies"}  # no history unless asked
    assert (read["stale"], read["dependencies"]) == (False, [])
    assert read["memory"] == memory | {"index_state": read["memory"]["index_state"]}
    assert (read["memory"]["key"], read["memory"]["value"], read["memory"]["source_text"]) == (None, None, None)
    assert [h["version"] for h in api.call("GET", f"/memories/{memory['id']}", query={"history": "true"}).json()["history"]] == [1]


def test_an_unknown_query_parameter_is_a_400_not_ignored(api, aws):
    api.call("POST", "/memories", PREFERENCE)
    reply = api.call("GET", "/memories", query={"knid": "episodic"})
    assert reply.status == 400 and reply.json() == {
        "error": "validation_error",
        "message": "unknown query parameter",
        "field": "knid",
    }
    assert api.call("GET", "/memories", query={"limit": "1"}).status == 200
