"""The memory lifecycle's steps (docs/maintenance.md) on both record stores.

- decay writes the decayed confidence as a new version once the drop is worth a version, keeps
  the memory's expiry, and changes nothing on a second run; disuse archives with the reason;
- consolidation turns near-duplicate episodes (60 on SQLite) into at most 5 summaries and archives them,
  leaving unrelated ones alone; a rerun adds nothing, and an interrupted run is completed;
- capacity keeps the limit, evicting the lowest scored, never a pinned memory;
- conflicts finds two corrections of one term with different targets, the newer first;
- the PII re-scan redacts what older rules let through, once per rules version;
- a step bounded by its batch returns a cursor, and the calls together cover every partition.
"""

from __future__ import annotations

import pytest

from memtool.clock import FrozenClock
from memtool.lifecycle.capacity import Capacity
from memtool.lifecycle.conflicts import Conflicts, find_conflicts
from memtool.lifecycle.consolidate import Consolidate, is_summary
from memtool.lifecycle.decay import Decay, DecayPolicy
from memtool.lifecycle.pii_rescan import PiiRescan
from memtool.memory.records import Credit, MemoryDraft, MemoryKind, MemoryPatch, MemoryStatus
from memtool.memory.sqlite_store import SQLiteMemoryStore
from memtool.memory.store import MemoryStore, Partition
from memtool.retrieval.embedders import HashingEmbedder

LI = Partition("acme", "li")
WANG = Partition("acme", "wang")


def episode(store: MemoryStore, where: Partition, content: str, clock: FrozenClock, **fields: object) -> str:
    draft = MemoryDraft(kind=MemoryKind.EPISODIC, content=content, **fields)  # type: ignore[arg-type]
    return store.create(where, draft, clock.now()).record.id


def live(store: MemoryStore, where: Partition, kind: MemoryKind, clock: FrozenClock) -> list:
    return [r for r in store.heads(where, [kind], 100_000) if r.status is MemoryStatus.ACTIVE and not r.is_expired(clock.now())]


# ---------------------------------------------------------------------------------- decay


def test_decay_is_written_once_it_is_worth_a_version_and_keeps_the_expiry(store: MemoryStore, clock: FrozenClock) -> None:
    kept = episode(store, LI, "net revenue by channel last month", clock)
    expires = store.get(LI, kept, clock.now()).expires_at
    decay = Decay(store, DecayPolicy())

    clock.advance(days=3)  # 0.06: not yet worth a version
    assert decay.run("acme", None, clock.now()).counts.get("decayed", 0) == 0
    assert store.get(LI, kept, clock.now()).version == 1

    clock.advance(days=7)  # 10 days: 0.2
    result = decay.run("acme", None, clock.now())
    record = store.get(LI, kept, clock.now())
    assert result.counts["decayed"] == 1
    assert (record.version, record.confidence) == (2, pytest.approx(0.8))
    assert record.expires_at == expires  # a decayed episode does not live longer for it

    again = decay.run("acme", None, clock.now())  # the same day: the anchor moved with the version
    assert again.counts.get("decayed", 0) == 0 and store.get(LI, kept, clock.now()).version == 2


def test_decay_archives_what_stays_unused_and_never_touches_a_pinned_memory(store: MemoryStore, clock: FrozenClock) -> None:
    unused = episode(store, LI, "gross margin by region", clock)
    pinned = episode(store, LI, "the board's monthly revenue view", clock, value={"pinned": True})
    used = episode(store, LI, "refund rate by channel", clock)
    clock.advance(days=40)
    store.update_credit(LI, used, lambda r: Credit(uses=r.credit.uses + 1), clock.now(), clock.now())
    clock.advance(days=25)  # unused for 65 days; used 25 days ago

    result = Decay(store, DecayPolicy(unused_days=60)).run("acme", None, clock.now())

    archived = store.get(LI, unused, clock.now())
    assert archived.status is MemoryStatus.ARCHIVED and "unused for 65 days" in (archived.status_reason or "")
    assert store.get(LI, pinned, clock.now()).version == 1  # not decayed, not archived
    assert store.get(LI, used, clock.now()).status is MemoryStatus.ACTIVE
    assert result.counts["archived"] == 1


# ---------------------------------------------------------------------------------- consolidate

DUPLICATES = [
    "Li asked for East China net revenue by channel for last month",
    "Li asked again for East China net revenue by channel for last month",
    "Li asked for the East China net revenue by channel last month",
    "Li wanted East China net revenue by channel for last month",
]
UNRELATED = [
    "refund rate of the hospital channel in July",
    "top 5 products by gross margin this year",
    "new customers per week in Shanghai",
    "average order value of online pharmacy orders",
    "inventory days of supply for vaccines",
    "returns by reason code in Q2",
    "sales reps ranked by quota attainment",
    "North China distributor count by province",
    "price changes of the ten best sellers",
    "weekly active pharmacies in Guangdong",
]


def test_near_duplicates_become_at_most_a_few_summaries(store: MemoryStore, clock: FrozenClock) -> None:
    # the 60 of docs/maintenance.md on SQLite (and over HTTP, tests/e2e/test_maintenance_http.py); 20 on
    # moto's DynamoDB, whose every write costs a transaction in Python
    count = 60 if isinstance(store, SQLiteMemoryStore) else 20
    members = [episode(store, LI, DUPLICATES[n % len(DUPLICATES)] + f" (turn {n})", clock) for n in range(count)]
    others = [episode(store, LI, text, clock) for text in UNRELATED]
    step = Consolidate(store, HashingEmbedder(256), min_cluster=5, similarity=0.8)

    result = step.run("acme", None, clock.now())

    active = live(store, LI, MemoryKind.EPISODIC, clock)
    summaries = [r for r in active if is_summary(r)]
    assert 1 <= len(summaries) <= 5, result.counts
    assert len(active) <= 15
    assert {r.id for r in active} >= set(others)  # the unrelated ones are left alone
    covered = {mid for s in summaries for mid in s.value["summary_of"]}
    assert covered <= set(members) and len(covered) >= count - 10
    archived = store.get(LI, next(iter(covered)), clock.now())
    assert archived.status is MemoryStatus.ARCHIVED
    assert archived.status_reason == f"consolidated into {next(s.id for s in summaries if archived.id in s.value['summary_of'])}"
    assert "East China net revenue by channel" in summaries[0].content

    again = step.run("acme", None, clock.now())
    assert again.counts.get("summaries", 0) == 0 and len(live(store, LI, MemoryKind.EPISODIC, clock)) == len(active)


def test_an_interrupted_consolidation_is_completed_by_the_next_run(store: MemoryStore, clock: FrozenClock) -> None:
    members = [episode(store, LI, DUPLICATES[0] + f" (turn {n})", clock) for n in range(6)]
    step = Consolidate(store, HashingEmbedder(256), min_cluster=5, similarity=0.8)
    step.run("acme", None, clock.now())
    summary = next(r for r in live(store, LI, MemoryKind.EPISODIC, clock) if is_summary(r))
    # as if the run had stopped after the summary: two members are active again
    for memory_id in members[:2]:
        current = store.get(LI, memory_id, clock.now())
        store.update(LI, memory_id, MemoryPatch(status=MemoryStatus.ACTIVE), current.version, clock.now())

    result = step.run("acme", None, clock.now())

    assert result.counts["consolidated"] == 2
    assert [r.id for r in live(store, LI, MemoryKind.EPISODIC, clock)] == [summary.id]


# ---------------------------------------------------------------------------------- capacity


def test_capacity_evicts_the_lowest_scored_and_keeps_a_pinned_one(store: MemoryStore, clock: FrozenClock) -> None:
    # (the 150 -> 100 of docs/maintenance.md is tests/e2e/test_maintenance_http.py's, over HTTP)
    pinned = episode(store, LI, "the golden episode", clock, value={"pinned": True}, confidence=0.05)
    weak = [episode(store, LI, f"weak episode {n}", clock, confidence=0.2) for n in range(9)]
    strong = []
    for n in range(20):  # a second apart: among equals, the oldest leaves first
        clock.advance(seconds=1)
        strong.append(episode(store, LI, f"strong episode {n}", clock))

    result = Capacity(store, {MemoryKind.EPISODIC: 20}).run("acme", None, clock.now())

    active = {r.id for r in live(store, LI, MemoryKind.EPISODIC, clock)}
    assert len(active) == 20 and result.counts["evicted"] == 10
    assert pinned in active  # the lowest scored of all, and pinned
    assert not active & set(weak)  # the 9 lowest scored left first, then the oldest strong one
    assert active & set(strong) == set(strong[1:])
    evicted = store.get(LI, weak[0], clock.now())
    assert evicted.status is MemoryStatus.ARCHIVED and "over the episodic capacity of 20" in (evicted.status_reason or "")


# ---------------------------------------------------------------------------------- conflicts


def test_two_corrections_of_one_term_with_different_targets_are_a_conflict(store: MemoryStore, clock: FrozenClock) -> None:
    older = store.create(
        LI, MemoryDraft(kind=MemoryKind.CORRECTION, key="term.gmv", content="GMV means gross revenue", value={"term": "GMV", "maps_to": {"metric": "gross_revenue"}}), clock.now()
    ).record
    clock.advance(minutes=5)
    newer = store.create(
        LI, MemoryDraft(kind=MemoryKind.CORRECTION, key="term.ｇｍｖ", content="ＧＭＶ means net revenue", value={"term": "ＧＭＶ", "maps_to": {"metric": "net_revenue"}}), clock.now()
    ).record
    store.create(WANG, MemoryDraft(kind=MemoryKind.CORRECTION, key="term.gmv", content="GMV means net", value={"term": "GMV", "maps_to": {"metric": "net_revenue"}}), clock.now())

    found = find_conflicts(store, [LI, WANG], clock.now())

    assert [(c.owner, c.term, [m.id for m in c.members]) for c in found] == [("li", "gmv", [newer.id, older.id])]
    assert Conflicts(store).run("acme", None, clock.now()).counts["conflicts"] == 1


# ---------------------------------------------------------------------------------- pii_rescan


def test_the_pii_rescan_redacts_what_older_rules_let_through_once_per_rules_version(store: MemoryStore, clock: FrozenClock) -> None:
    leaked = episode(store, LI, "call me at 13812345678 about the report", clock, source_text="mail li@example.com")
    clean = episode(store, LI, "net revenue by month", clock)
    versions: dict[str, int] = {}
    step = PiiRescan(store, lambda t: versions.get(t, 0), versions.__setitem__, rules_version=1)

    result = step.run("acme", None, clock.now())

    record = store.get(LI, leaked, clock.now())
    assert record.version == 2 and "13812345678" not in record.content and "[PHONE]" in record.content
    assert record.source_text == "mail [EMAIL]" and record.redactions["phone"] == 1 and record.redactions["email"] == 1
    assert store.get(LI, clean, clock.now()).version == 1
    assert result.counts["redacted"] == 1 and versions == {"acme": 1}
    assert step.run("acme", None, clock.now()).counts == {"up_to_date": 1, "redacted": 0}


# ---------------------------------------------------------------------------------- cursors


def test_a_bounded_step_returns_a_cursor_and_its_calls_cover_every_partition(store: MemoryStore, clock: FrozenClock) -> None:
    owners = [f"u{n:02d}" for n in range(7)]
    for owner in owners:
        for n in range(3):
            episode(store, Partition("acme", owner), f"note {n}", clock)
    episode(store, Partition("other", "u00"), "another tenant's note", clock)
    clock.advance(days=30)
    step = Decay(store, DecayPolicy(), batch=5)  # two partitions (6 heads) per call

    cursor, calls, decayed = None, 0, 0
    while True:
        result = step.run("acme", cursor, clock.now())
        calls += 1
        decayed += result.counts.get("decayed", 0)
        cursor = result.cursor
        if cursor is None:
            break

    assert calls == 4 and decayed == 21
    assert store.heads(Partition("other", "u00"))[0].version == 1  # another tenant's memory is not this run's
