"""The DynamoDB memory store on moto: versions, optimistic locking, slots, TTL, forget."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memtool.errors import NotFound, VersionConflict
from memtool.memory.records import MemoryDraft, MemoryKind, MemoryPatch, MemoryStatus
from memtool.memory.store import Partition
from memtool.runtime import container
from memtool.runtime.aws import client

from tests.support import table_items

LI = Partition("acme", "li")


@pytest.fixture
def store(aws):
    return container.memory_store()


def draft(kind=MemoryKind.PROFILE, content="金额默认用元", **fields):
    return MemoryDraft(kind=kind, content=content, **fields)


def test_every_write_is_a_new_version_and_history_stays_readable(store, clock):
    # Given a memory written and then edited twice
    first = store.create(LI, draft(content="v1 text"), clock.now()).record
    clock.advance(minutes=1)
    store.update(LI, first.id, MemoryPatch(content="v2 text"), expected_version=1, now=clock.now())
    clock.advance(minutes=1)
    third = store.update(LI, first.id, MemoryPatch(content="v3 text"), expected_version=2, now=clock.now()).record

    # Then the current record is version 3 and every version can be read back
    assert third.version == 3
    assert store.get(LI, first.id, clock.now()).content == "v3 text"
    assert [store.get(LI, first.id, clock.now(), version=n).content for n in (1, 2, 3)] == [
        "v1 text",
        "v2 text",
        "v3 text",
    ]
    history = store.history(LI, first.id, clock.now())
    assert [(r.version, r.status) for r in history] == [
        (1, MemoryStatus.SUPERSEDED),
        (2, MemoryStatus.SUPERSEDED),
        (3, MemoryStatus.ACTIVE),
    ]
    assert history[0].created_at == first.created_at
    with pytest.raises(NotFound):
        store.get(LI, first.id, clock.now(), version=4)


def test_a_stale_expected_version_is_a_conflict_and_changes_nothing(store, clock, aws):
    record = store.create(LI, draft(content="first"), clock.now()).record
    store.update(LI, record.id, MemoryPatch(content="second"), expected_version=1, now=clock.now())
    stored_before = table_items(aws)

    with pytest.raises(VersionConflict) as conflict:
        store.update(LI, record.id, MemoryPatch(content="lost update"), expected_version=1, now=clock.now())

    assert conflict.value.current_version == 2
    assert store.get(LI, record.id, clock.now()).content == "second"
    assert table_items(aws) == stored_before


def test_a_race_between_read_and_write_is_caught_by_the_transaction(store, clock):
    # Given two writers that both read version 1
    record = store.create(LI, draft(content="base"), clock.now()).record
    stale_view = store.get(LI, record.id, clock.now())
    store.update(LI, record.id, MemoryPatch(content="writer A"), expected_version=1, now=clock.now())

    # When writer B commits on top of what it read, the head's version condition refuses it
    with pytest.raises(VersionConflict):
        store._write_version(stale_view, MemoryPatch(content="writer B"), clock.now())

    assert store.get(LI, record.id, clock.now()).content == "writer A"
    assert len(store.history(LI, record.id, clock.now())) == 2


def test_same_key_supersedes_and_keeps_the_old_value_as_history(store, clock):
    yuan = store.create(
        LI, draft(key="display.currency_unit", content="金额默认用元", value={"unit": "元"}), clock.now()
    )
    clock.advance(days=3)
    fen = store.create(
        LI, draft(key="display.currency_unit", content="金额默认用分", value={"unit": "分"}), clock.now()
    )

    assert fen.record.id == yuan.record.id
    assert fen.created is False
    assert fen.superseded is not None and fen.superseded.value == {"unit": "元"}
    current = store.get(LI, yuan.record.id, clock.now())
    assert (current.version, current.value) == (2, {"unit": "分"})
    old = store.get(LI, yuan.record.id, clock.now(), version=1)
    assert (old.value, old.status) == ({"unit": "元"}, MemoryStatus.SUPERSEDED)
    # Only one profile memory holds the slot
    listed = store.list(LI, clock.now(), kind=MemoryKind.PROFILE).items
    assert [r.id for r in listed] == [yuan.record.id]


def test_writing_the_same_slot_value_again_makes_no_new_version(store, clock):
    first = store.create(LI, draft(key="display.chart", content="默认柱状图"), clock.now())
    again = store.create(LI, draft(key="display.chart", content="默认柱状图"), clock.now())
    assert again.unchanged is True
    assert again.record.version == first.record.version == 1


def test_slots_are_per_user_and_per_kind(store, clock):
    mine = store.create(LI, draft(key="display.currency_unit", content="元"), clock.now()).record
    theirs = store.create(Partition("acme", "wang"), draft(key="display.currency_unit", content="万元"), clock.now())
    other_kind = store.create(
        LI, draft(kind=MemoryKind.CORRECTION, key="display.currency_unit", content="x"), clock.now()
    )
    assert len({mine.id, theirs.record.id, other_kind.record.id}) == 3
    assert store.get(LI, mine.id, clock.now()).content == "元"


@pytest.mark.parametrize(
    ("kind", "ttl"),
    [
        (MemoryKind.WORKING, timedelta(days=1)),
        (MemoryKind.PROFILE, timedelta(days=365)),
        (MemoryKind.EPISODIC, timedelta(days=90)),
        (MemoryKind.CORRECTION, timedelta(days=180)),
        (MemoryKind.KNOWLEDGE, None),
        (MemoryKind.FEWSHOT, None),
    ],
)
def test_expires_at_is_set_per_kind(store, clock, aws, kind, ttl):
    record = store.create(LI, draft(kind=kind, content="x", session_id="s1"), clock.now()).record
    expected = None if ttl is None else clock.now() + ttl
    assert record.expires_at == expected
    # and DynamoDB holds it as epoch seconds in the table's TTL attribute on the head item
    head = next(i for i in table_items(aws) if i["sk"]["S"] == f"M#{record.id}")
    if ttl is None:
        assert "expires_at" not in head
    else:
        assert int(head["expires_at"]["N"]) == int(expected.timestamp())


def test_expired_records_are_filtered_from_every_read(store, clock, aws):
    # Given a working memory and a profile memory; moto never deletes expired items
    working = store.create(LI, draft(kind=MemoryKind.WORKING, content="这次用分", session_id="s1"), clock.now()).record
    profile = store.create(LI, draft(content="金额默认用元"), clock.now()).record

    # When the working memory's expires_at is in the past
    clock.advance(days=1, seconds=1)

    # Then it is still stored, but no read returns it
    assert any(i["sk"]["S"] == f"M#{working.id}" for i in table_items(aws))
    with pytest.raises(NotFound):
        store.get(LI, working.id, clock.now())
    with pytest.raises(NotFound):
        store.get(LI, working.id, clock.now(), version=1)
    with pytest.raises(NotFound):
        store.history(LI, working.id, clock.now())
    assert store.list(LI, clock.now(), kind=MemoryKind.WORKING).items == []
    assert [r.id for r in store.list(LI, clock.now()).items] == [profile.id]


def test_an_item_written_with_expires_at_in_the_past_is_never_read(store, clock, aws):
    record = store.create(LI, draft(content="planted"), clock.now()).record
    past = int((clock.now() - timedelta(hours=1)).timestamp())
    client("dynamodb", aws).update_item(
        TableName=aws.memory_table,
        Key={"pk": {"S": "T#acme#O#li"}, "sk": {"S": f"M#{record.id}"}},
        UpdateExpression="SET expires_at = :past",
        ExpressionAttributeValues={":past": {"N": str(past)}},
    )
    with pytest.raises(NotFound):
        store.get(LI, record.id, clock.now())
    assert store.list(LI, clock.now()).items == []


def test_forget_removes_every_version_and_the_slot_and_streams_the_removal(store, clock, aws):
    record = store.create(LI, draft(key="display.currency_unit", content="元"), clock.now()).record
    store.create(LI, draft(key="display.currency_unit", content="分"), clock.now())
    store.update(LI, record.id, MemoryPatch(content="角"), expected_version=2, now=clock.now())
    keep = store.create(LI, draft(key="display.chart", content="柱状图"), clock.now()).record

    outcome = store.forget(LI, record.id)

    assert outcome.versions_removed == 3
    assert outcome.purge.memory_id == record.id and outcome.purge.last_version == 3
    remaining = [i for i in table_items(aws) if i.get("memory_id", {}).get("S") == record.id]
    assert remaining == []
    assert store.get(LI, keep.id, clock.now()).content == "柱状图"
    with pytest.raises(NotFound):
        store.forget(LI, record.id)
    # The slot is free again: a new write starts a new record at version 1
    fresh = store.create(LI, draft(key="display.currency_unit", content="元"), clock.now()).record
    assert fresh.id != record.id and fresh.version == 1
    # The table's stream carries the head's REMOVE with what the indexer needs to purge it
    removed = [r for r in _stream_records(aws) if r["eventName"] == "REMOVE"]
    heads = [r["dynamodb"]["OldImage"] for r in removed if r["dynamodb"]["Keys"]["sk"]["S"] == f"M#{record.id}"]
    assert len(heads) == 1
    assert heads[0]["tenant"]["S"] == "acme" and heads[0]["version"]["N"] == "3"


def test_listing_pages_with_an_opaque_cursor(store, clock):
    ids = []
    for n in range(5):
        clock.advance(seconds=1)
        ids.append(store.create(LI, draft(kind=MemoryKind.EPISODIC, content=f"episode {n}"), clock.now()).record.id)
    seen, cursor = [], None
    for _ in range(5):
        page = store.list(LI, clock.now(), kind=MemoryKind.EPISODIC, limit=2, cursor=cursor)
        seen.extend(r.id for r in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == list(reversed(ids))  # newest first, each exactly once


def _stream_records(settings):
    dynamodb = client("dynamodb", settings)
    streams = client("dynamodbstreams", settings)
    arn = dynamodb.describe_table(TableName=settings.memory_table)["Table"]["LatestStreamArn"]
    records = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records.extend(streams.get_records(ShardIterator=iterator, Limit=1000)["Records"])
    return records
