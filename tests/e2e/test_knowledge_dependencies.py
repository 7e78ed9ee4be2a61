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
    assert api.call("GET", "/knowledge/stale", roles="curator").json() == {"items": []}
