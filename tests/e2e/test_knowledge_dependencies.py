"""A knowledge memory that depends on a source, over HTTP: a read and the answer that cites it say
when the source has moved on (docs/knowledge.md, Dependency chains).

The source, the memory, the reads and the asks all go through the local API.
"""

from __future__ import annotations

from typing import Any


def post_policy(api, text: str) -> dict[str, Any]:
    reply = api.call(
        "POST", "/sources", {"name": "refunds-policy.md", "kind": "document", "text": text}, as_user=(api.tenant, "mei"), roles="curator"
    )
    assert reply.status in (200, 201), reply.body
    return reply.json()["source"]


def test_a_definition_citing_a_source_is_stale_in_reads_and_answers_after_the_sources_version_2(api, drain):
    policy = post_policy(api, "退款：30天内可全额退款。")

    written = api.call(
        "POST",
        "/memories",
        {
            "kind": "knowledge",
            "scope": "tenant",
            "key": "metric.net_revenue",
            "content": "净收入 = 销售额 − 折扣 − 退款（退款口径见退款政策）",
            "depends_on": [{"source_id": policy["id"]}],
        },
        as_user=(api.tenant, "mei"),
        roles="curator",
    )
    assert written.status == 201, written.body
    memory = written.json()["memory"]
    assert memory["provenance"]["sources"] == [{"id": policy["id"], "version": 1, "depends_on": "source"}]
    drain.drain()

    read = api.call("GET", f"/memories/{memory['id']}").json()
    assert read["stale"] is False and [d["state"] for d in read["dependencies"]] == ["current"]
    first = api.call("POST", "/ask", {"question": "净收入怎么算？"}).json()
    [cited] = [c for c in first["citations"] if c["source"] == f"memory:{memory['id']}@v1"]
    assert cited["stale"] is False and cited["depends_on"] == ["refunds-policy.md v1"]
    assert not any("stale" in note for note in first["notes"])

    assert post_policy(api, "退款：14天内可全额退款。")["version"] == 2

    read = api.call("GET", f"/memories/{memory['id']}").json()
    assert read["stale"] is True
    assert read["dependencies"] == [
        {"id": policy["id"], "depends_on": "source", "version": 1, "latest_version": 2, "name": "refunds-policy.md", "state": "newer"}
    ]
    second = api.call("POST", "/ask", {"question": "净收入怎么算？"}).json()
    [cited] = [c for c in second["citations"] if c["source"] == f"memory:{memory['id']}@v1"]
    assert cited["stale"] is True and cited["depends_on"] == ["refunds-policy.md v1; v2 exists"]
    assert "metric.net_revenue depends on refunds-policy.md v1; v2 exists (stale)" in second["notes"]

    stale = api.call("GET", "/knowledge/stale", as_user=(api.tenant, "mei"), roles="curator")
    assert stale.status == 200, stale.body
    [item] = stale.json()["items"]
    assert item["memory"]["id"] == memory["id"] and [d["state"] for d in item["dependencies"]] == ["newer"]
    refused = api.call("GET", "/knowledge/stale")  # a plain user
    assert refused.status == 403 and refused.json()["field"] == "roles", refused.body


def test_a_dependency_that_is_not_there_is_a_422_naming_it_and_nothing_is_written(api, aws):
    reply = api.call(
        "POST",
        "/memories",
        {"kind": "knowledge", "scope": "tenant", "content": "净收入 = ...", "depends_on": [{"source_id": "mem_nothing"}]},
        roles="curator",
    )
    assert reply.status == 400 and reply.json()["field"] == "depends_on.0", reply.body
    both = api.call("POST", "/memories", {"kind": "knowledge", "scope": "tenant", "content": "x", "depends_on": [{}]}, roles="curator")
    assert both.status == 400 and both.json()["field"] == "depends_on.0", both.body
    listing = api.call("GET", "/memories", query={"kind": "knowledge", "scope": "tenant"}).json()
    assert listing["items"] == []
    assert api.call("GET", "/knowledge/stale", roles="curator").json() == {"items": [], "definitions": []}


def demo_model() -> dict[str, Any]:
    import json

    from tests.support import load_event

    return json.loads(load_event("model_put.json")["body"])["model"]


def test_a_metric_that_depends_on_a_source_is_cited_stale_after_the_sources_version_2(api):
    policy = post_policy(api, "退款：30天内可全额退款。")
    model = demo_model()
    [net] = [m for m in model["metrics"] if m["name"] == "net_revenue"]
    net["depends_on"] = [{"source": "refunds-policy.md"}]
    [region] = [d for d in model["dimensions"] if d["name"] == "region"]
    region["depends_on"] = [{"source": "no-such-policy.md"}]
    refused = api.call("PUT", "/model", {"model": model, "expected_version": None}, as_user=(api.tenant, "mei"), roles="curator")
    assert refused.status == 422, refused.body
    [problem] = refused.json()["problems"]
    assert problem["path"].endswith("depends_on[0].source") and "no source named 'no-such-policy.md'" in problem["message"]

    region["depends_on"] = []
    stored = api.call("PUT", "/model", {"model": model, "expected_version": None}, as_user=(api.tenant, "mei"), roles="curator")
    assert stored.status == 201, stored.body
    pulled = api.call("GET", "/model").json()["model"]
    [kept] = [m for m in pulled["metrics"] if m["name"] == "net_revenue"]
    assert kept["depends_on"] == [{"source": "refunds-policy.md", "version": 1}]  # pinned when stored

    first = api.call("POST", "/ask", {"question": "上个月净收入"}).json()
    [cited] = [c for c in first["citations"] if c["source"].startswith("catalog:metric/net_revenue@")]
    assert cited["depends_on"] == ["refunds-policy.md v1"] and cited["stale"] is False, first["citations"]

    assert post_policy(api, "退款：14天内可全额退款。")["version"] == 2
    second = api.call("POST", "/ask", {"question": "上个月各大区净收入"}).json()
    [cited] = [c for c in second["citations"] if c["source"].startswith("catalog:metric/net_revenue@")]
    assert cited["stale"] is True and cited["depends_on"] == ["refunds-policy.md v1; v2 exists"]
    assert "net revenue's definition depends on refunds-policy.md v1; v2 exists (stale)" in second["notes"]
    stale = api.call("GET", "/knowledge/stale", roles="curator").json()
    assert [(d["kind"], d["name"], [x["state"] for x in d["dependencies"]]) for d in stale["definitions"]] == [
        ("metric", "net_revenue", ["newer"])
    ]
    # A definition question quotes the source the definition rests on, at its newest version
    explained = api.call("POST", "/ask", {"question": "净收入怎么算？"}).json()
    assert explained["status"] == "answered", explained
    assert "refunds-policy.md v2: “退款：14天内可全额退款。”" in explained["answer"]
    [quote] = [c for c in explained["citations"] if c["source"] == f"source:{policy['id']}@v2"]
    assert quote["text"] == "退款：14天内可全额退款。"


def test_a_knowledge_memory_reads_the_source_it_depends_on_at_its_version(api):
    policy = post_policy(api, "退款：30天内可全额退款。" * 2000)
    memory = api.call(
        "POST",
        "/memories",
        {"kind": "knowledge", "scope": "tenant", "content": "退款口径见退款政策", "depends_on": [{"source_id": policy["id"]}]},
        as_user=(api.tenant, "mei"),
        roles="curator",
    ).json()["memory"]
    first = api.call("GET", f"/memories/{memory['id']}/read", query={"limit": "100"}).json()
    assert (first["source_id"], first["version"], first["stale"], first["next_offset"]) == (policy["id"], 1, False, 100)
    assert first["text"] == ("退款：30天内可全额退款。" * 2000)[:100]
    post_policy(api, "退款：14天内可全额退款。")
    pinned = api.call("GET", f"/memories/{memory['id']}/read", query={"offset": "100", "limit": "12"}).json()
    assert (pinned["version"], pinned["stale"], pinned["latest_version"]) == (1, True, 2)  # the version it rests on
    other = api.call("GET", f"/memories/{memory['id']}/read", as_user=("globex", "li"))
    assert other.status == 404
    none = api.call("GET", f"/memories/{memory['id']}/read", query={"source_id": "mem_other"})
    assert none.status == 404 and none.json()["field"] == "source_id"
