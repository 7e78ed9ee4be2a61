"""The source routes over HTTP on the local runtime (docs/knowledge.md): POST/GET/DELETE /sources,
GET /sources/{id}?version=&history=, GET /sources/{id}/read; with the texts in files under the
state folder, and in an S3 bucket (moto) as in AWS."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memtool.knowledge.bodies import S3_PREFIX
from memtool.knowledge.sources import READ_MAX_CHARS, SOURCE_MAX_BYTES, name_folder, source_digest
from memtool.runtime.aws import client
from memtool.settings import Settings, use_settings

CURATOR = "curator"
# Chinese, emoji outside the BMP, a combining accent, tabs and newlines: a page boundary must
# never split what a code point is.
PARAGRAPH = "退款政策：签收后30天内可全额退款 🧾；\tETL 口径 = gross − discount − refund。Café\u0301 ok\n"


def long_document(chars: int) -> str:
    text = (PARAGRAPH * (chars // len(PARAGRAPH) + 1))[:chars]
    assert len(text) == chars
    return text


def post(api, name: str, text: str, *, kind: str = "document", roles: str | None = CURATOR, **kwargs: Any):
    return api.call("POST", "/sources", {"name": name, "kind": kind, "text": text}, roles=roles, **kwargs)


def read_all(api, source_id: str, *, version: int | None = None, limit: int = READ_MAX_CHARS) -> tuple[str, list[dict[str, Any]]]:
    pages: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        query = {"offset": str(offset), "limit": str(limit)}
        if version is not None:
            query["version"] = str(version)
        reply = api.call("GET", f"/sources/{source_id}/read", query=query)
        assert reply.status == 200, reply.body
        page = reply.json()
        pages.append(page)
        offset = page["next_offset"]
    return "".join(p["text"] for p in pages), pages


def test_a_200k_character_document_reads_back_in_pages_and_version_1_is_stale_after_version_2(api):
    text = long_document(200_000)
    first = post(api, "policies/refunds.md", text)
    assert first.status == 201, first.body
    source = first.json()["source"]
    assert first.json()["created"] is True and first.json()["unchanged"] is False
    assert (source["version"], source["chars"], source["bytes"]) == (1, 200_000, len(text.encode("utf-8")))
    assert source["sha256"] == source_digest(text) and source["cite"] == f"source:{source['id']}@v1"

    whole, pages = read_all(api, source["id"])
    assert whole == text
    assert len(pages) == 13 and all(p["total_chars"] == 200_000 and p["stale"] is False for p in pages)
    assert [p["complete"] for p in pages] == [False] * 12 + [True]
    assert pages[0]["next_offset"] == READ_MAX_CHARS and pages[-1]["next_offset"] is None

    again = post(api, "policies/refunds.md", text)  # the same text: no new version
    assert again.status == 200 and again.json()["unchanged"] is True and again.json()["source"]["version"] == 1

    changed = text.replace("30天", "14天", 1)
    second = post(api, "policies/refunds.md", changed)
    assert second.status == 200, second.body
    assert second.json()["source"]["id"] == source["id"] and second.json()["source"]["version"] == 2

    old = api.call("GET", f"/sources/{source['id']}/read", query={"version": "1", "offset": "0", "limit": "50"}).json()
    assert old["version"] == 1 and old["stale"] is True and old["latest_version"] == 2
    assert old["text"] == text[:50]
    assert read_all(api, source["id"], version=1)[0] == text
    assert read_all(api, source["id"])[0] == changed

    meta = api.call("GET", f"/sources/{source['id']}", query={"history": "true"}).json()
    assert meta["source"]["version"] == 2 and meta["source"]["stale"] is False
    assert [(v["version"], v["sha256"], v["stale"]) for v in meta["history"]] == [
        (1, source_digest(text), True),
        (2, source_digest(changed), False),
    ]
    v1 = api.call("GET", f"/sources/{source['id']}", query={"version": "1"}).json()
    assert v1["source"]["stale"] is True and "history" not in v1
    listing = api.call("GET", "/sources").json()
    assert [(s["name"], s["version"]) for s in listing["items"]] == [("policies/refunds.md", 2)]


def test_only_curators_write_and_delete_and_another_tenant_sees_nothing(api):
    refused = post(api, "ddl/fact_refund.sql", "CREATE TABLE fact_refund (refund_id BIGINT);", kind="ddl", roles=None)
    assert refused.status == 403 and refused.json()["field"] == "roles", refused.body
    assert api.call("GET", "/sources").json()["items"] == []  # nothing was stored

    stored = post(api, "ddl/fact_refund.sql", "CREATE TABLE fact_refund (refund_id BIGINT);", kind="ddl").json()["source"]
    assert api.call("GET", f"/sources/{stored['id']}").status == 200  # a plain user of the tenant reads
    for path in (f"/sources/{stored['id']}", f"/sources/{stored['id']}/read"):
        other = api.call("GET", path, as_user=("globex", "li"), roles=CURATOR)
        assert other.status == 404, (path, other.body)
    assert api.call("GET", "/sources", as_user=("globex", "li")).json()["items"] == []
    assert api.call("DELETE", f"/sources/{stored['id']}", as_user=("globex", "li"), roles=CURATOR).status == 404

    plain = api.call("DELETE", f"/sources/{stored['id']}")
    assert plain.status == 403 and plain.json()["field"] == "roles"
    assert api.call("GET", f"/sources/{stored['id']}").status == 200  # still there
    assert api.call("DELETE", f"/sources/{stored['id']}", roles=CURATOR).status == 204
    gone = api.call("GET", f"/sources/{stored['id']}/read")
    assert gone.status == 404 and gone.json()["field"] == "id", gone.body


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "../../etc/passwd", "kind": "ddl", "text": "x"}, "name"),
        ({"name": "a b", "kind": "ddl", "text": "x"}, "name"),
        ({"name": "a/../../b", "kind": "ddl", "text": "x"}, "name"),
        ({"name": "a//b", "kind": "ddl", "text": "x"}, "name"),
        ({"name": "a/", "kind": "ddl", "text": "x"}, "name"),
        ({"name": "ok.sql", "kind": "ddl", "text": "  \n\t "}, "text"),
        ({"name": "ok.sql", "kind": "spreadsheet", "text": "x"}, "kind"),
        ({"name": "ok.sql", "kind": "ddl", "text": ""}, "text"),
        ({"name": "ok.sql", "kind": "ddl", "text": "nul \u0000 inside"}, "text"),
        ({"name": "ok.sql", "kind": "ddl"}, "text"),
        ({"name": "ok.sql", "kind": "ddl", "text": "x", "owner": "someone-else"}, "owner"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_nothing_is_stored(api, body: dict[str, Any], field: str):
    reply = api.call("POST", "/sources", body, roles=CURATOR)
    assert reply.status == 400 and reply.json()["field"] == field, reply.body
    assert api.call("GET", "/sources").json()["items"] == []


def test_a_text_over_2_mib_is_a_400_and_a_body_over_the_routes_limit_a_413(api):
    over = "a" * (SOURCE_MAX_BYTES + 1)
    reply = post(api, "big.txt", over)
    assert reply.status == 400 and reply.json()["field"] == "text", reply.body[:300]
    # 2 MiB of CJK as \\uXXXX escapes is 4 MiB of JSON: inside the route's limit, and stored.
    cjk = "退" * (SOURCE_MAX_BYTES // 3)
    escaped = json.dumps({"name": "cjk.txt", "kind": "document", "text": cjk}, ensure_ascii=True)
    assert len(escaped) > 2 * SOURCE_MAX_BYTES - 1024
    stored = api.call("POST", "/sources", raw=escaped, roles=CURATOR)
    assert stored.status == 201 and stored.json()["source"]["chars"] == len(cjk), stored.body[:300]
    huge = json.dumps({"name": "huge.txt", "kind": "document", "text": "a" * (5 * 1024 * 1024)})
    too_large = api.call("POST", "/sources", raw=huge, roles=CURATOR)
    assert too_large.status == 413, too_large.body[:300]
    assert [s["name"] for s in api.call("GET", "/sources").json()["items"]] == ["cjk.txt"]


def test_page_bounds_are_400s_naming_the_parameter(api):
    source = post(api, "short.md", "十个字符的一段文字。").json()["source"]
    path = f"/sources/{source['id']}/read"
    for query, field in (
        ({"limit": str(READ_MAX_CHARS + 1)}, "limit"),
        ({"limit": "0"}, "limit"),
        ({"offset": "-1"}, "offset"),
        ({"offset": "11"}, "offset"),  # past the end of a 10-character text
        ({"version": "3"}, "version"),
    ):
        reply = api.call("GET", path, query=query)
        assert reply.status in (400, 404) and reply.json()["field"] == field, (query, reply.body)
    end = api.call("GET", path, query={"offset": "10"}).json()  # at the end: an empty, complete page
    assert (end["text"], end["complete"], end["next_offset"]) == ("", True, None)


def test_an_idempotency_key_replays_the_first_answer(api):
    headers = {"Idempotency-Key": "source-post-1"}
    first = post(api, "etl/daily.sql", "INSERT INTO t SELECT 1;", kind="etl_sql", headers=headers)
    replay = post(api, "etl/daily.sql", "INSERT INTO t SELECT 1;", kind="etl_sql", headers=headers)
    assert first.status == replay.status == 201 and first.json() == replay.json()
    other = post(api, "etl/daily.sql", "INSERT INTO t SELECT 2;", kind="etl_sql", headers=headers)
    assert other.status == 422, other.body  # the same key for a different text
    assert api.call("GET", f"/sources/{first.json()['source']['id']}").json()["source"]["version"] == 1


def test_a_memory_depending_on_a_deleted_source_reads_gone(api):
    source = post(api, "policies/discounts.md", "折扣：渠道折扣在开票时扣除。").json()["source"]
    memory = api.call(
        "POST",
        "/memories",
        {"kind": "knowledge", "scope": "tenant", "content": "折扣口径见折扣政策", "depends_on": [{"source_id": source["id"]}]},
        roles=CURATOR,
    ).json()["memory"]
    assert api.call("DELETE", f"/sources/{source['id']}", roles=CURATOR).status == 204
    read = api.call("GET", f"/memories/{memory['id']}").json()
    assert read["stale"] is True and [d["state"] for d in read["dependencies"]] == ["gone"]


def test_in_aws_the_texts_are_objects_in_the_sources_bucket(api, aws: Settings):
    s3 = client("s3", aws)
    s3.create_bucket(Bucket="memtool-sources-test")
    use_settings(aws.model_copy(update={"sources_bucket": "memtool-sources-test"}))
    text = long_document(40_000)
    source = post(api, "policies/returns.md", text).json()["source"]
    post(api, "policies/returns.md", text + "\n补充：电商渠道7天无理由退货。")
    prefix = f"{S3_PREFIX}/{name_folder(api.tenant)}/{name_folder('policies/returns.md')}/"
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="memtool-sources-test")["Contents"])
    assert len(keys) == 2 and all(k.startswith(prefix) for k in keys)
    assert f"{prefix}{source['sha256']}" in keys
    assert read_all(api, source["id"], version=1)[0] == text
    assert not (aws.home / "state" / "sources").exists()  # nothing went to local files

    assert api.call("DELETE", f"/sources/{source['id']}", roles=CURATOR).status == 204
    assert s3.list_objects_v2(Bucket="memtool-sources-test").get("KeyCount") == 0
