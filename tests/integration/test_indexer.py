"""The stream indexer: idempotent by (id, version), ignores non-version changes, purges on REMOVE,
cascades TTL removals to snapshots, and reports per-record failures."""

from __future__ import annotations

import copy

from memtool.memory.store import Partition
from memtool.retrieval.index import IndexFilter, IndexQuery
from memtool.runtime import container
from memtool.runtime.handlers import function_handler
from memtool.runtime.lambda_context import LocalLambdaContext

from tests.support import ROOT, load_event, table_items


def captured(drain) -> list[dict]:
    """Stream records as Lambda would deliver them, without delivering them."""
    return drain._poll()


def test_an_older_version_replayed_after_a_newer_one_never_overwrites_it(api, drain):
    memory = api.call("POST", "/memories", {"kind": "correction", "content": "口径 v1"}).json()["memory"]
    api.call("PATCH", f"/memories/{memory['id']}", {"expected_version": 1, "content": "口径 v2"})
    records = captured(drain)
    heads = [r for r in records if r["dynamodb"]["Keys"]["sk"]["S"] == f"M#{memory['id']}"]
    insert_v1 = next(r for r in heads if r["eventName"] == "INSERT")
    modify_v2 = next(r for r in heads if r["eventName"] == "MODIFY")
    handler = function_handler(ROOT, "indexer")

    # When v2 is indexed first and the v1 INSERT arrives late (a retry, a replay)
    assert handler({"Records": [modify_v2]}, LocalLambdaContext()) == {"batchItemFailures": []}
    assert handler({"Records": [insert_v1]}, LocalLambdaContext()) == {"batchItemFailures": []}

    # Then the index still holds version 2, and the head says version 2 is indexed
    assert container.vector_index().indexed_version(memory["id"], api.tenant) == 2
    head = api.call("GET", f"/memories/{memory['id']}").json()["memory"]
    assert (head["version"], head["index_state"]) == (2, "indexed")


def test_marking_a_record_indexed_does_not_index_it_again(api, drain):
    api.call("POST", "/memories", {"kind": "correction", "content": "口径"})
    handler = function_handler(ROOT, "indexer")
    first = captured(drain)
    assert sorted(r["eventName"] for r in first) == ["INSERT", "INSERT"]  # head and snapshot
    assert handler({"Records": first}, LocalLambdaContext()) == {"batchItemFailures": []}

    # The index-state update comes back as a MODIFY without a new version...
    second = captured(drain)
    assert [r["eventName"] for r in second] == ["MODIFY"]
    images = second[0]["dynamodb"]
    assert images["OldImage"]["version"] == images["NewImage"]["version"]
    assert images["NewImage"]["index_state"] == {"S": "indexed"}
    # ...which the indexer ignores, so nothing further is written and the stream goes quiet
    assert handler({"Records": second}, LocalLambdaContext()) == {"batchItemFailures": []}
    assert captured(drain) == []


def test_a_ttl_removal_purges_the_index_and_the_snapshots(api, drain, aws):
    memory = api.call("POST", "/memories", {"kind": "working", "content": "这次用分", "session_id": "s1"}).json()["memory"]
    api.call("PATCH", f"/memories/{memory['id']}", {"expected_version": 1, "content": "这次用角"})
    drain.drain()
    head = next(i for i in table_items(aws) if i["sk"]["S"] == f"M#{memory['id']}")
    # Given DynamoDB's TTL process deletes the expired head (a REMOVE by the dynamodb service)
    removal = {
        "eventID": "ttl-1",
        "eventName": "REMOVE",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/memory/stream/2026",
        "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
        "dynamodb": {"Keys": {"pk": head["pk"], "sk": head["sk"]}, "OldImage": head, "SequenceNumber": "9", "StreamViewType": "NEW_AND_OLD_IMAGES"},
    }
    container.memory_store()._model(pk=head["pk"]["S"], sk=head["sk"]["S"]).delete()

    reply = function_handler(ROOT, "indexer")({"Records": [removal]}, LocalLambdaContext())

    assert reply == {"batchItemFailures": []}
    assert container.vector_index().indexed_version(memory["id"], api.tenant) is None
    assert [i for i in table_items(aws) if i.get("memory_id", {}).get("S") == memory["id"]] == []


def test_a_record_that_fails_is_reported_and_the_rest_of_the_batch_is_indexed(api, drain):
    good = api.call("POST", "/memories", {"kind": "correction", "content": "good one"}).json()["memory"]
    records = [r for r in captured(drain) if r["dynamodb"]["Keys"]["sk"]["S"].startswith("M#")]
    assert len(records) == 1
    broken = copy.deepcopy(records[0])
    broken["dynamodb"]["SequenceNumber"] = "999"
    broken["dynamodb"]["NewImage"]["kind"] = {"S": "not-a-kind"}

    reply = function_handler(ROOT, "indexer")({"Records": [broken, records[0]]}, LocalLambdaContext())

    assert reply == {"batchItemFailures": [{"itemIdentifier": "999"}]}
    assert container.vector_index().indexed_version(good["id"], api.tenant) == 1


def test_the_stream_event_file_runs_through_the_handler(aws):
    # events/indexer_stream.json is the file `sam local invoke IndexerFunction -e` takes
    event = load_event("indexer_stream.json")
    reply = function_handler(ROOT, "indexer")(event, LocalLambdaContext())
    assert reply == {"batchItemFailures": []}
    tenant = event["Records"][0]["dynamodb"]["NewImage"]["tenant"]["S"]
    memory_id = event["Records"][0]["dynamodb"]["NewImage"]["memory_id"]["S"]
    assert container.vector_index().indexed_version(memory_id, tenant) == 1


def test_snapshots_and_slots_are_not_indexed(api, drain, aws):
    api.call("POST", "/memories", {"kind": "profile", "key": "display.chart", "content": "柱状图"})
    drain.drain()
    store = container.memory_store()
    records = store.list(Partition(api.tenant, "li"), container.clock().now()).items
    assert len(records) == 1
    query = IndexQuery(
        filter=IndexFilter(tenant=api.tenant, owners=("li",), embedder=container.embedder().id), k=10, text="柱状图"
    )
    hits = container.vector_index().lexical(query)
    assert [h.memory_id for h in hits] == [records[0].id]


def test_a_session_the_ttl_removes_is_distilled_into_the_users_profile(api, drain, aws):
    """A session nobody ended (its working memory expired): DynamoDB's TTL REMOVE distils it, as
    DELETE /sessions/{id} does, into the user's usage.frequent."""
    answer = api.call("POST", "/ask", {"question": "上个月各渠道的净收入", "session_id": "s-ttl"}).json()
    assert answer["status"] == "answered", answer
    drain.drain()
    head = next(i for i in table_items(aws) if i.get("key", {}).get("S") == "session.s-ttl.turns" and i["sk"]["S"].startswith("M#"))
    removal = {
        "eventID": "ttl-2",
        "eventName": "REMOVE",
        "eventSource": "aws:dynamodb",
        "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
        "dynamodb": {"Keys": {"pk": head["pk"], "sk": head["sk"]}, "OldImage": head, "SequenceNumber": "10", "StreamViewType": "NEW_AND_OLD_IMAGES"},
    }
    container.memory_store()._model(pk=head["pk"]["S"], sk=head["sk"]["S"]).delete()

    assert function_handler(ROOT, "indexer")({"Records": [removal]}, LocalLambdaContext()) == {"batchItemFailures": []}

    profile = api.call("GET", "/memories", query={"kind": "profile"}).json()["items"]
    [usage] = [m for m in profile if m["key"] == "usage.frequent"]
    assert usage["value"]["metrics"] == {"net_revenue": 1} and usage["value"]["dimensions"] == {"channel": 1}
